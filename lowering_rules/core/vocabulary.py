"""The words the rules and the limitations engine share, and nothing else.

A leaf: it imports neither ``lowering_rules`` nor ``limitations`` nor ``noxla``, so both the rules
(which declare limitations) and the engine (which reads them) can import it without importing each
other. Targets, a declared ``Limitation`` and the ``EqnView`` its predicate sees live here, with
the one list of parameters no rule ever sees.
"""
from __future__ import annotations

import dataclasses
import enum
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np


class Target(str, enum.Enum):
    TF = "tf"                    # TensorFlow itself: eager, tf.function, SavedModel
    TFLITE = "tflite"            # .tflite with TFLITE_BUILTINS only
    TFLITE_FLEX = "tflite_flex"  # .tflite that may also use SELECT_TF_OPS (Flex)
    TFJS = "tfjs"                # TF.js graph model
    # A TF.js graph model run on TF.js's WebGL backend (what browsers pick first): every TF.js
    # limitation applies (``base``), plus WebGL's own, declared by the rules with this target.
    TFJS_WEBGL = "tfjs_webgl"
    # The same model run on TF.js's WebGPU backend: every TF.js limitation applies (``base``), plus
    # what TF.js 4.22's WebGPU kernels compute wrong or cannot run, declared by the rules with this target.
    TFJS_WEBGPU = "tfjs_webgpu"
    # A .tflite (builtins, ``base``) run on LiteRT.js, the web's TFLite runtime, on wasm (XNNPACK):
    # its own limits are at the program's boundary (tensor dtypes, static shapes; limitations/targets.py).
    LITERTJS = "litertjs"
    # LiteRT.js on WebGPU: an op its delegate lacks runs on wasm instead (a placement the runners
    # report, not a rejection); declared here is what WebGPU computes wrong.
    LITERTJS_WEBGPU = "litertjs_webgpu"

    @property
    def label(self) -> str:
        return _LABELS[self]

    @property
    def base(self) -> "Target | None":
        """The target this one narrows (it inherits every limitation declared for it), or None."""
        return _BASES.get(self)

    @property
    def lineage(self) -> "tuple[Target, ...]":
        """This target, then the targets it narrows: a limitation for any of them holds here."""
        return (self,) if self.base is None else (self, *self.base.lineage)

    def within(self, targets: "Iterable[Target]") -> bool:
        """Whether a declaration for ``targets`` binds this target (directly or through its base)."""
        targets = tuple(targets)
        return any(t in targets for t in self.lineage)

    @classmethod
    def parse(cls, name: "str | Target") -> "Target":
        if isinstance(name, Target):
            return name
        try:
            return cls(name.lower().replace("-", "_"))
        except ValueError:
            choices = ", ".join(t.value for t in cls)
            raise ValueError(f"unknown target {name!r}; choose one of: {choices}") from None


_LABELS = {
    Target.TF: "TF",
    Target.TFLITE: "TFLite (builtins)",
    Target.TFLITE_FLEX: "TFLite (Flex)",
    Target.TFJS: "TF.js",
    Target.TFJS_WEBGL: "TF.js (WebGL)",
    Target.TFJS_WEBGPU: "TF.js (WebGPU)",
    Target.LITERTJS: "LiteRT.js",
    Target.LITERTJS_WEBGPU: "LiteRT.js (WebGPU)",
}
_BASES = {Target.TFJS_WEBGL: Target.TFJS, Target.TFJS_WEBGPU: Target.TFJS, Target.LITERTJS: Target.TFLITE,
          Target.LITERTJS_WEBGPU: Target.LITERTJS}

ALL_TARGETS = tuple(Target)



@dataclasses.dataclass(frozen=True)
class LoweringFor:
    """What one lowering of a program is for, in the few places where its TF ops must differ by
    artifact. The pipeline sets it per lowering (``noxla.front.lowering.serving_function``); a rule reads
    it as ``ctx.lowering_for``, never from global state. Everything else a target needs of a graph
    is a writer's pass, not a rule's branch (lowering_rules/README.md says which fields exist and why).

    ``tfjs``: TF.js's own lowering. TF.js has no uint32: a uint32 value is carried as the int32 with
    the same bits (``uint32_as_int32``: every dtype a rule makes goes through ``ctx.tf_dtype``;
    literals and weights arrive carried), products and remainders of those words take 16-bit limbs,
    and rules that emit an op TF.js lacks use their declared variant (``Rule.differs``).
    ``tflite_converter``: a graph only the TFLite converter reads (never saved, run or written as
    TF.js): it may hold a TF op that exists only as the converter's input form of a TFLite builtin
    (``XlaDynamicUpdateSlice`` -> DYNAMIC_UPDATE_SLICE).
    ``webgpu``: a .tflite for LiteRT.js's WebGPU delegate, which refuses some forms the converter
    makes (LOG_SOFTMAX, GATHER with 2-D indices, ...), where its form would cost the other targets."""
    tfjs: bool = False
    tflite_converter: bool = False
    webgpu: bool = False

    @property
    def uint32_as_int32(self) -> bool:
        return self.tfjs


DEFAULT_LOWERING = LoweringFor()  # TF's, SavedModel's, ``noxla.convert``'s and the shared .tflite's


# Placement and annotation parameters: meaningless for one device and one TF graph. They are
# removed here, once, before both the up-front check and the rule call, so no rule names them and
# none can be surprised when JAX adds one to another primitive.
PLACEMENT_PARAMS = frozenset({"sharding", "out_sharding", "in_shardings", "out_shardings", "in_layouts",
                              "out_layouts", "ctx_mesh"})


def rule_params(params: Mapping) -> dict:
    """A primitive application's parameters as its rule (and its limitations) see them."""
    return {k: v for k, v in params.items() if k not in PLACEMENT_PARAMS}


def is_key_dtype(dtype) -> bool:
    """Whether ``dtype`` is a PRNG key type (``key<fry>``), which has no TF dtype."""
    import jax
    return not isinstance(dtype, np.dtype) and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)


def physical_dtype(dtype) -> np.dtype:
    """What the dtype tables see: a key's data dtype (uint32) for a key, else the dtype itself."""
    if is_key_dtype(dtype):
        from lowering_rules.core.jax_compat import core
        return np.dtype(core.physical_element_aval(dtype).dtype)
    return np.dtype(dtype)


def dtype_name(dtype) -> str:
    """A dtype's name: ``float32``, ``bfloat16``, ``key<fry>``. Never raises for a JAX dtype."""
    if isinstance(dtype, str):
        return dtype
    name = _NAMES.get(dtype)   # the check asks for every operand of every equation
    if name is None:
        import jax
        name = str(dtype) if jax.dtypes.issubdtype(dtype, jax.dtypes.extended) else np.dtype(dtype).name
        _NAMES[dtype] = name
    return name


_NAMES: dict = {}


@dataclasses.dataclass(frozen=True)
class EqnView:
    """What a limitation predicate may look at: a primitive application, before lowering.

    ``params`` are already without placement parameters (``rule_params``). ``literals`` holds, per
    operand, its value when the jaxpr spells it as a literal (``x >> 9``'s 9), else None."""
    primitive: str
    params: dict
    avals_in: tuple
    avals_out: tuple
    literals: tuple = ()

    def literal(self, i: int):
        """Operand ``i``'s literal value, or None when it is computed or an input."""
        return self.literals[i] if i < len(self.literals) else None

    @property
    def dtypes(self) -> set:
        """The numpy dtypes of operands and results; a PRNG key counts as its key data's (uint32).
        ``dtype_names`` tells keys apart."""
        return {physical_dtype(d) for d in self._all_dtypes()}

    @property
    def dtype_names(self) -> set[str]:
        """Every operand and result dtype by name, key dtypes included (``key<fry>``)."""
        return {dtype_name(d) for d in self._all_dtypes()}

    def _all_dtypes(self) -> list:
        return [a.dtype for a in (*self.avals_in, *self.avals_out) if getattr(a, "dtype", None) is not None]

    @property
    def dtype_in(self):
        return physical_dtype(self.avals_in[0].dtype)


@dataclasses.dataclass(frozen=True)
class Limitation:
    """A declared case that a target cannot run: data, not code paths.

    ``when(eqn)`` returns true when the application falls in the unsupported case.
    ``param`` names the parameter (or "dtype") that is out of range.
    """
    targets: tuple[Target, ...]
    condition: str
    reason: str
    when: Callable[[EqnView], bool]
    param: str = "dtype"
    workaround: str = ""

    def applies(self, eqn: EqnView, target: Target) -> bool:
        return target.within(self.targets) and bool(self.when(eqn))


def dtype_limitation(targets: Sequence[Target], dtypes: Iterable, reason: str,
                     workaround: str = "") -> Limitation:
    """The common limitation: some operand or result has one of ``dtypes``."""
    bad = frozenset(np.dtype(d) for d in dtypes)
    names = ", ".join(sorted(d.name for d in bad))
    return Limitation(tuple(targets), f"dtype is {names}", reason,
                      when=lambda eqn: bool(eqn.dtypes & bad), workaround=workaround)


def webgpu_computes_wrong(condition: str, measured: str, param: str, when=lambda eqn: True) -> Limitation:
    """A use LiteRT.js 2.5.3's WebGPU delegate computes wrong, silently, in noxla's lowering (found by
    tests/browser_sweep.py; ``measured``: what it gave); LiteRT.js's wasm runs the same .tflite right."""
    return Limitation((Target.LITERTJS_WEBGPU,), condition,
                      f"LiteRT.js 2.5.3's WebGPU delegate computes noxla's lowering of it wrong, silently ({measured})",
                      when=when, param=param,
                      workaround="run the model on LiteRT.js wasm (the default .tflite), or do this step in JavaScript")


def tfjs_webgpu_fails(condition: str, measured: str, param: str, when=lambda eqn: True) -> Limitation:
    """A use TF.js 4.22's WebGPU backend computes wrong or fails to run, in noxla's lowering of it (found
    by tests/browser_sweep.py; ``measured``: what it gave); TF.js's cpu, wasm and WebGL run the same model.json."""
    return Limitation((Target.TFJS_WEBGPU,), condition,
                      f"TF.js 4.22's WebGPU backend does not compute noxla's lowering of it ({measured})",
                      when=when, param=param,
                      workaround="run the model on TF.js's webgl or wasm backend (tf.setBackend), or do this step "
                                 "in JavaScript")


__all__ = ["Target", "ALL_TARGETS", "LoweringFor", "DEFAULT_LOWERING", "PLACEMENT_PARAMS",
           "rule_params", "is_key_dtype", "physical_dtype", "dtype_name",
           "EqnView", "Limitation", "dtype_limitation", "webgpu_computes_wrong",
           "tfjs_webgpu_fails"]
