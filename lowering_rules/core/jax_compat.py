"""Every JAX internal (``jax._src``) noxla relies on, in one place.

JAX moves its internals between versions; when an upgrade breaks one of these names, this is the
only file to change. It imports nothing of noxla's, so rules, the engine and noxla may all use it.
"""
from __future__ import annotations

import functools

from jax._src import (
    ad_checkpoint,
    ad_util,
    api_util,
    core,
    custom_derivatives,
    debugging,
    dispatch,
    hijax,
    linear_util,
    pjit,
    source_info_util,
)
from jax._src.core import InconclusiveDimensionOperation, is_constant_dim
from jax._src.export import shape_poly
from jax._src.interpreters import partial_eval
from jax._src.lax import ann, windowed_reductions
from jax._src.lax import lax as lax_internal
from jax._src.lax import linalg as linalg_internal
from jax._src.numpy import ufuncs as _numpy_ufuncs
from jax._src.random import prng, threefry2x32

# Modules whose primitives and helpers rules use directly: core (physical avals of PRNG keys),
# pjit (reshard_p, layout_constraint_p), lax_internal (empty_p), linalg_internal (geqrf_p,
# geqp3_p), prng and threefry2x32 (the PRNG primitives and the key implementations' vmapped
# functions), ann (approx_top_k_p), windowed_reductions (select_and_scatter_p), custom_derivatives,
# debugging and hijax (call-like primitives), api_util and linear_util (binding core.call_p).
# ad_util (zeros_like_p, which tests show JAX never stages). None of these is in jax.extend.
#
# jax.extend.core's names (ClosedJaxpr, Literal, jaxprs_in_params, ...) are jax._src.core's, and
# jax.extend.core.primitives' are the modules' above (ad_checkpoint's name_p, pjit's
# sharding_constraint_p, lax_internal's empty2_p): the rules, the check and tracing take them from
# here, as importing anything under jax.extend runs its package, which imports Pallas (~15 ms,
# a quarter of what importing the rules and the check costs).

# Primitives users' programs contain that jax.lax does not export.
device_put_p = dispatch.device_put_p
dim_as_value_p = shape_poly.dim_as_value_p

# Shapes: whether a dimension is an int, and solving dimension variables from input shapes.
solve_dim_vars = shape_poly.solve_dim_vars


def evaluate_dim(expr, env: dict, maximum, minimum):
    """A symbolic dimension's value from its variables' values in ``env``, with ``maximum(a, b)`` and
    ``minimum(a, b)`` for its max/min factors: JAX's own ``_evaluate`` calls ``lax.max`` on them, which
    takes no TF tensor (a convolution's or a window's output size is max(0, ...))."""
    def value(e):
        if is_constant_dim(e):
            return int(e)
        total = 0
        for term, coefficient in e._sorted_terms:
            product = coefficient
            for factor, power in term._factors:
                for _ in range(power):
                    product = product * factor_value(factor)
            total = total + product
        return total

    def factor_value(factor):
        if factor.var is not None:
            return env[factor.var]
        a, b = (value(o) for o in factor.operands)
        return {"floordiv": lambda: a // b, "mod": lambda: a % b,
                "max": lambda: maximum(a, b), "min": lambda: minimum(a, b)}[factor.operation]()
    return value(expr)

# JAX 0.11 renamed hijax's user-defined primitive base class (VJPHiPrimitive -> HiPrim).
HiPrimitive = getattr(hijax, "HiPrim", None) or hijax.VJPHiPrimitive

# JAX 0.11 folded ClosedJaxpr into Jaxpr: a jaxpr carries its own constants (its first inputs are
# the constvars, as many as it has constants) and ``jaxpr.jaxpr`` is the jaxpr itself.
_CLOSED_JAXPR = getattr(core, "ClosedJaxpr", None)
JAXPR_TYPES = (core.Jaxpr,) if _CLOSED_JAXPR is None else (core.Jaxpr, _CLOSED_JAXPR)


def closed_jaxpr(jaxpr, consts=()):
    """``jaxpr`` with ``consts`` as the values of its constvars, in the form the running JAX binds
    and evaluates (a ClosedJaxpr up to JAX 0.10; the Jaxpr itself from 0.11, whose own constants
    are kept when none are given)."""
    if _CLOSED_JAXPR is not None:
        return jaxpr if isinstance(jaxpr, _CLOSED_JAXPR) else _CLOSED_JAXPR(jaxpr, list(consts))
    return jaxpr.with_consts(list(consts)) if len(consts) else jaxpr


def open_jaxpr(jaxpr):
    """The equations' jaxpr of a closed or open jaxpr (its constvars still declared)."""
    return jaxpr.jaxpr if _CLOSED_JAXPR is not None and isinstance(jaxpr, _CLOSED_JAXPR) else jaxpr


def scan_counts(params: dict) -> tuple[int, int]:
    """(constants, carries) of a scan equation: ``num_consts``/``num_carry`` up to JAX 0.10, the
    lengths of the first two groups of ``ft_in`` (a flat tree of consts, carry, xs) from 0.11."""
    if params.get("ft_in") is not None:
        consts, carry, _ = params["ft_in"].unpack()
        return len(consts), len(carry)
    return params["num_consts"], params["num_carry"]


def _numpy_hijax():
    try:
        from jax._src.numpy import hijax as numpy_hijax
    except ImportError:
        return None
    return numpy_hijax


# JAX 0.11 made jnp.searchsorted a hijax primitive (call_hi_primitive, expanded when lowered). JAX
# 0.10 had the primitive class too, but jnp.searchsorted called its expansion (searchsorted_via_expand).
SEARCHSORTED_IS_HIJAX = (hasattr(_numpy_hijax(), "SearchSorted")
                         and not hasattr(_numpy_hijax(), "searchsorted_via_expand"))

# JAX 0.12.1 made jnp.frexp and jnp.ldexp hijax primitives (call_hi_primitive of these classes),
# whose expansions bitcast floats to unsigned words; before, they traced to lax primitives.
FREXP_HI_PRIMITIVE = getattr(_numpy_ufuncs, "Frexp", None)
LDEXP_HI_PRIMITIVE = getattr(_numpy_ufuncs, "Ldexp", None)
FREXP_LDEXP_ARE_HIJAX = FREXP_HI_PRIMITIVE is not None and LDEXP_HI_PRIMITIVE is not None

# JAX 0.11 made core.call_p an alias of eval_jaxpr_p, a call parameterised by a traced jaxpr.
CALL_IS_EVAL_JAXPR = getattr(core, "eval_jaxpr_p", None) is core.call_p


def bind_call(fun, *args):
    """``core.call_p.bind`` of the Python function ``fun`` (returning a list): up to JAX 0.10 the body
    is a wrapped function; from 0.11 it is the jaxpr of ``fun`` (``call_jaxpr=``)."""
    if CALL_IS_EVAL_JAXPR:
        import jax
        jaxpr = jax.make_jaxpr(fun)(*(jax.ShapeDtypeStruct(a.shape, a.dtype) for a in args))
        return core.call_p.bind(*args, call_jaxpr=jaxpr)
    body = linear_util.wrap_init(fun, debug_info=api_util.debug_info("call", fun, args, {}))
    return core.call_p.bind(*args, subfuns=(body,))


# JAX 0.12.1 gave random_bits a ``num_streams`` parameter (one application draws that many
# independent bit arrays: ``jax.random.bits(..., num_streams=2)`` or 4, and ``normal(mode="highest")``
# draws two) and made it a multiple-results primitive, and added ``raw_bits`` (a key implementation's
# raw 32-bit streams, ``impl.num_streams`` of them, threefry's two counter-hash words unmixed), which
# no public API binds. Up to 0.12.0 random_bits drew one array and raw_bits did not exist.
RANDOM_BITS_STREAMS = bool(prng.random_bits_p.multiple_results)
raw_bits_p = getattr(prng, "raw_bits_p", None)


def random_bits_function(impl, bit_width: int, shape, num_streams: int = 1):
    """The function of one key's data that JAX lowers random_bits to (a tuple of ``num_streams``
    arrays from 0.12.1, one array before): tracing it gives JAX's own bits, for every key type and
    either ``jax_threefry_partitionable``."""
    if RANDOM_BITS_STREAMS:
        return lambda key: prng._call_impl_random_bits(impl, key, bit_width, tuple(shape), num_streams)
    return lambda key: impl.random_bits(key, bit_width, shape)


def raw_bits_function(impl, shape):
    """The function of one key's data that JAX (0.12.1 on) lowers raw_bits to: a tuple of
    ``impl.num_streams`` uint32 arrays."""
    return lambda key: prng._call_impl_raw_bits(impl, key, tuple(shape))


def lax_value(name: str, *args: float) -> float:
    """``jax.lax.<name>(*args)`` on float32 scalars, as the installed JAX computes it: for the edge
    values JAX changed (digamma(0): NaN up to JAX 0.10, -inf from 0.11; igamma(inf, x): NaN for
    x >= 1 up to 0.10, 0 from 0.11), so rules follow whichever JAX is installed. Asked once each
    (by the arguments' bits: -0.0 == 0.0, and digamma tells them apart from JAX 0.12.1)."""
    return _lax_value(name, tuple(float(a).hex() for a in args))


@functools.cache
def _lax_value(name: str, args: tuple[str, ...]) -> float:
    import numpy as np
    from jax import lax
    return float(np.asarray(getattr(lax, name)(*(np.float32(float.fromhex(a)) for a in args))))


# Tracing: dead-code elimination of a jaxpr, and the user's frames of an equation's source.
dce_jaxpr = partial_eval.dce_jaxpr
user_frames = source_info_util.user_frames

# Where JAX defines primitives beyond ``jax.lax`` and ``jax.lax.linalg``: jit, custom derivatives,
# checkpointing, PRNG and autodiff helpers all appear in the jaxprs users hand to noxla.
PRIMITIVE_MODULES = (
    "jax._src.pjit", "jax._src.custom_derivatives", "jax._src.ad_checkpoint", "jax._src.ad_util",
    "jax._src.random.prng", "jax._src.random.threefry2x32", "jax._src.lax.lax", "jax._src.lax.linalg",
    "jax._src.lax.parallel", "jax._src.callback", "jax._src.debugging", "jax._src.core",
)

__all__ = ["ad_checkpoint", "ad_util", "api_util", "linear_util", "InconclusiveDimensionOperation",
           "core", "custom_derivatives", "debugging", "hijax", "ann", "windowed_reductions", "pjit",
           "lax_internal", "linalg_internal", "prng", "threefry2x32", "device_put_p", "dim_as_value_p",
           "is_constant_dim", "solve_dim_vars", "evaluate_dim", "dce_jaxpr", "user_frames",
           "PRIMITIVE_MODULES", "HiPrimitive", "JAXPR_TYPES", "closed_jaxpr", "open_jaxpr", "scan_counts",
           "CALL_IS_EVAL_JAXPR", "bind_call", "lax_value", "SEARCHSORTED_IS_HIJAX", "RANDOM_BITS_STREAMS",
           "raw_bits_p", "random_bits_function", "raw_bits_function", "FREXP_HI_PRIMITIVE",
           "LDEXP_HI_PRIMITIVE", "FREXP_LDEXP_ARE_HIJAX"]

# jax2tf.call_tf's primitive, by name: its TF function is in the equation's parameters, and noxla's
# output is TF, so it runs in place. Named, not imported: jax2tf imports TensorFlow, which the check
# does without (a program holding the primitive has imported it already).
CALL_TF = "call_tf"


def primitive_test_harnesses():
    """JAX's own primitive harnesses (the suite jax2tf was tested with), for tests/jax_harnesses.py:
    imported on call, as they build test data at import time."""
    from jax._src.internal_test_util import test_harnesses
    return test_harnesses
