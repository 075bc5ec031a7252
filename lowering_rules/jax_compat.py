"""Every JAX internal (``jax._src``) noxla relies on, in one place.

JAX moves its internals between versions; when an upgrade breaks one of these names, this is the
only file to change. It imports nothing of noxla's, so rules, the engine and noxla may all use it.
"""
from __future__ import annotations

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
           "PRIMITIVE_MODULES"]

# jax2tf.call_tf's primitive, by name: its TF function is in the equation's parameters, and noxla's
# output is TF, so it runs in place. Named, not imported: jax2tf imports TensorFlow, which the check
# does without (a program holding the primitive has imported it already).
CALL_TF = "call_tf"


def primitive_test_harnesses():
    """JAX's own primitive harnesses (the suite jax2tf was tested with), for tests/jax_harnesses.py:
    imported on call, as they build test data at import time."""
    from jax._src.internal_test_util import test_harnesses
    return test_harnesses
