"""What every rule reads: the registry, the words rules and the check share (``vocabulary``),
the ``tf`` seam (``lazy_tensorflow``), JAX's internals (``jax_compat``), dtype data
(``dtype_support``) and PRNG keys' (``key_types``), helpers (``helpers``, ``matrices``) and
the cases' vocabulary (``cases``)."""
