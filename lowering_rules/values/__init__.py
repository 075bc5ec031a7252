"""Values and arithmetic a target lacks, in other forms: complex values as (real, imaginary)
pairs (``complex_values``), uint32 on 16-bit limbs (``limb_values``), exact 32-bit word
arithmetic (``limbs``) and the uint32 arithmetic TFLite's builtins lack (``words``)."""
