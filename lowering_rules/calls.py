"""Call-like primitives whose body is all that runs once lowered, and primitives that compute nothing.

- ``composite`` (``lax.composite``): a named operation with its decomposition; backends without a
  kernel for the name run the decomposition, as JAX's CPU backend does.
- ``linear_call`` (``jax.custom_derivatives.linear_call``): the callee; the transpose only
  matters to autodiff.
- ``remat_opt`` (``custom_vjp(..., optimize_remat=True)`` under differentiation): the forward
  function, which returns the primal outputs and the residuals.
- ``call_hi_primitive`` (``jax.experimental.hijax.VJPHiPrimitive``, ``HiPrim`` from JAX 0.11, which
  also makes ``jnp.searchsorted`` one): the primitive's ``expand``, traced on its input types, is
  what JAX's CPU backend runs. JAX 0.12.1's ``jnp.frexp`` and ``jnp.ldexp`` (``Frexp``, ``Ldexp``)
  expand to float bitcasts: they have exact rules of their own (``frexp_ldexp.py``).
- ``dce_sink`` (``lax.dce_sink``) only keeps a value alive against dead-code elimination, and
  ``inspect_sharding`` (``jax.debug.inspect_array_sharding``) hands the value's sharding to a Python
  callback while JAX compiles; neither computes anything at run time.
- ``rng_uniform`` (``lax.rng_uniform``) draws from XLA's stateful generator, whose state lives in
  the JAX process: the same program returns different numbers on every call, so no export can match
  it; it is rejected up front.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from lowering_rules.core.cases import boolean, case, f16, f32, i32
from lowering_rules.core.jax_compat import (
    SEARCHSORTED_IS_HIJAX,
    HiPrimitive,
    custom_derivatives,
    debugging,
    hijax,
    lax_internal,
)
from lowering_rules.core.key_types import physical_aval
from lowering_rules.core.registry import Limitation, lowering
from lowering_rules.core.vocabulary import ALL_TARGETS
from lowering_rules.frexp_ldexp import CASES as FREXP_LDEXP_CASES
from lowering_rules.frexp_ldexp import hi_primitive_rule
from lowering_rules.prng import _lower_through_impl

WEIGHT = np.linspace(-1.0, 1.5, 12, dtype=np.float32).reshape(3, 4)


def _call(ctx, closed_jaxpr, args):
    return ctx.sub_program(closed_jaxpr)(*args)


# ----------------------------------------------------------------------------- composite

@functools.partial(lax.composite, name="noxla.scaled_tanh")
def _scaled_tanh(x, /, *, scale):
    return jnp.tanh(x) * scale


@functools.partial(lax.composite, name="noxla.affine", version=2)
def _affine(x, y):
    return x @ WEIGHT + y, jnp.sum(x, axis=1)


@lowering(lax_internal.composite_p, cases=[
    case("tangent", lambda x: lax.composite(lambda y: jnp.sin(y) / jnp.cos(y), name="my.tangent")(x), f32(2, 5)),
    case("attribute", lambda x: _scaled_tanh(x, scale=np.float32(2.5)), f32(3, 4)),
    case("closed_over_weight_two_outputs", _affine, f32(2, 3), f32(2, 4)),
    case("i32", lambda x: lax.composite(lambda y: y * 3 - 1, name="my.affine_int")(x), i32(5)),
])
def lower_composite(ctx, *args, jaxpr=None, call_jaxpr=None, name="", attributes=(), version=0):
    # name, attributes and version identify the operation to backends with a kernel for it (JAX's
    # abstract evaluation needs none of them). JAX 0.11 renamed the decomposition to call_jaxpr.
    return _call(ctx, call_jaxpr if jaxpr is None else jaxpr, args)


# ----------------------------------------------------------------------------- linear_call

def _scale_by(r, y):
    return y * r


def _linear_call(r, x):
    return custom_derivatives.linear_call(_scale_by, _scale_by, r, x)


@lowering(custom_derivatives.linear_call_p, cases=[
    case("scale", _linear_call, np.float32(2.5), f32(3, 4)),
    case("transposed_under_grad", jax.grad(lambda r, x: jnp.sum(jnp.sin(_linear_call(r, x))), argnums=1),
         np.float32(-1.5), f32(4)),
])
def lower_linear_call(ctx, *args, callee, transpose_thunk=None, num_callee_consts=0, num_res=0):
    # The operands are the callee's constants, then its residual and linear arguments.
    return _call(ctx, callee, args)


# ----------------------------------------------------------------------------- remat_opt

@functools.partial(jax.custom_vjp, nondiff_argnums=())
def _sin_with_weight(x):
    return jnp.sin(x) * WEIGHT


def _sin_with_weight_fwd(x):
    return _sin_with_weight(x), jnp.cos(x)


def _sin_with_weight_bwd(cos_x, g):
    return (g * WEIGHT * cos_x,)


_sin_with_weight.defvjp(_sin_with_weight_fwd, _sin_with_weight_bwd, optimize_remat=True)


@lowering(custom_derivatives.remat_opt_p, cases=[
    case("value_and_grad", jax.value_and_grad(lambda x: jnp.sum(_sin_with_weight(x))), f32(3, 4, low=-1, high=1)),
    case("grad", jax.grad(lambda x: jnp.sum(_sin_with_weight(x) ** 2)), f32(3, 4)),
])
def lower_remat_opt(ctx, *args, fwd_jaxpr, num_consts=0, num_res=0, fun_jaxpr_thunk=None):
    # As JAX runs it: the forward function on the constants and arguments, giving the residuals
    # and the primal outputs; fun_jaxpr_thunk is only asked for when rematerialising.
    return _call(ctx, fwd_jaxpr, args)


# ----------------------------------------------------------------------------- call_hi_primitive

class _ScaledSin(HiPrimitive):
    """A user-defined hijax primitive: sin(x) * factor, with its own gradient."""

    def __init__(self, aval, factor):
        self.in_avals, self.out_aval, self.params = (aval,), aval, {"factor": factor}
        super().__init__()

    def expand(self, x):
        return jnp.sin(x) * self.factor

    def vjp_fwd(self, nzs_in, x):
        return self(x), x

    def vjp_bwd_retval(self, x, g):
        return (g * jnp.cos(x) * self.factor,)


class _SplitSum(HiPrimitive):
    """A hijax primitive on a pytree: (a, b) -> {"total": a + b, "diff": a - b}."""

    def __init__(self, aval):
        self.in_avals, self.out_aval, self.params = ((aval, aval),), {"total": aval, "diff": aval}, {}
        super().__init__()

    def expand(self, pair):
        a, b = pair
        return {"total": a + b, "diff": a - b}


_SORTED = np.array([-np.inf, -2.5, -1.0, 0.0, 0.0, 0.5, 3.0, 3.0, np.inf, np.nan], np.float32)
_QUERIES = np.array([-np.inf, -3.0, -1.0, -0.0, 0.0, 0.25, 3.0, 7.0, np.inf, np.nan, -np.nan, 0.5], np.float32)
_SEARCHSORTED_SKIP = "" if SEARCHSORTED_IS_HIJAX else "JAX before 0.11 traces searchsorted to lax primitives"


@lowering(hijax.call_hi_primitive_p, cases=[
    case("scaled_sin", lambda x: _ScaledSin(jax.typeof(x), 3.0)(x) + 1.0, f32(2, 5)),
    case("pytree_int", lambda a, b: _SplitSum(jax.typeof(a))((a, b)), i32(4), i32(4)),
    # JAX 0.11's jnp.searchsorted is a hijax primitive; each method expands differently.
    *(case(f"searchsorted_{method}_{side}", functools.partial(jnp.searchsorted, side=side, method=method),
           _SORTED, _QUERIES, skip=_SEARCHSORTED_SKIP)
      for method in ("scan", "scan_unrolled", "sort", "compare_all") for side in ("left", "right")),
    case("searchsorted_i32_batched", lambda a, v: jnp.searchsorted(a, v), np.array([-5, -5, 0, 2, 2, 9], np.int32),
         i32(3, 4), skip=_SEARCHSORTED_SKIP),
    case("searchsorted_i32_compare_all", lambda a, v: jnp.searchsorted(a, v, method="compare_all"),
         np.array([-5, -5, 0, 2, 2, 9], np.int32), i32(7), skip=_SEARCHSORTED_SKIP),
    case("searchsorted_f16", jnp.searchsorted, np.array([-1.5, 0, 0, 2, 2, 8], np.float16), f16(6),
         skip=_SEARCHSORTED_SKIP),
    case("searchsorted_bool", jnp.searchsorted, np.array([False, False, True]), boolean(4), skip=_SEARCHSORTED_SKIP),
    case("searchsorted_complex_keys_right", lambda re, im, v: jnp.searchsorted(
        lax.complex(re, im), lax.complex(v, -v), side="right", method="compare_all"),
         np.array([-1, 0, 0, 0, 2], np.float32), np.array([0, -1, 0, 1, 0], np.float32),
         np.array([0.0, -0.0, 2.0, np.nan, -1.0], np.float32), skip=_SEARCHSORTED_SKIP),
    # JAX 0.12.1's jnp.frexp and jnp.ldexp, lowered by rules of their own (frexp_ldexp.py).
    *FREXP_LDEXP_CASES,
])
def lower_call_hi_primitive(ctx, *args, _prim):
    # A hi primitive whose expansion noxla cannot lower (it reads float bit patterns) has its own
    # rule, chosen by its class; any other lowers as its expansion.
    own_rule = hi_primitive_rule(_prim)
    if own_rule is not None:
        return own_rule(ctx, *args)
    return _lower_through_impl(ctx, _expansion(_prim), *args)


def _expansion(prim):
    return functools.partial(hijax._call_hi_primitive_to_lojax, _prim=prim)


def lowered_expansion(eqn):
    """The jaxpr ``lower_call_hi_primitive`` lowers for a ``call_hi_primitive`` equation (its
    primitive's expansion, traced on its operands' types), for the up-front check to look inside;
    None for any other equation and for a hi primitive with a rule of its own."""
    if eqn.primitive is not hijax.call_hi_primitive_p or hi_primitive_rule(eqn.params["_prim"]) is not None:
        return None
    specs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in (physical_aval(v.aval) for v in eqn.invars)]
    return jax.make_jaxpr(_expansion(eqn.params["_prim"]))(*specs)


# ----------------------------------------------------------------------------- no computation

def _kept_alive(x):
    lax.dce_sink(jnp.sin(x))
    return x * 2.0


@lowering(lax_internal.dce_sink_p, cases=[
    case("unused_value", _kept_alive, f32(3)),
    case("pytree", lambda x, y: (lax.dce_sink({"a": x, "b": y}), x - y)[1], i32(4), i32(4)),
])
def lower_dce_sink(ctx, x, *, prevent_mlir_dce=False):
    return []


def _inspected(x):
    jax.debug.inspect_array_sharding(x, callback=lambda sharding: None)
    return jnp.cos(x)


@lowering(debugging.inspect_sharding_p, cases=[
    case("callback", _inspected, f32(2, 3)),
    case("under_jit", jax.jit(_inspected), f32(4)),
])
def lower_inspect_sharding(ctx, x, *, callback=None):
    # JAX calls the callback while it compiles, with the array's sharding; at run time there is
    # nothing to compute.
    return []


# ----------------------------------------------------------------------------- rng_uniform

_STATEFUL = Limitation(
    ALL_TARGETS, "always",
    "lax.rng_uniform draws from XLA's stateful generator, whose state lives in the JAX process: JAX "
    "returns different numbers on every call of the same program, so no exported model can match it",
    param="shape", when=lambda eqn: True,
    workaround="draw with jax.random (uniform, bits, ...) from a key or seed the program takes as input")


@lowering(lax_internal.rng_uniform_p, limitations=[_STATEFUL], cases=[
    case("rejected", lambda a: lax.rng_uniform(np.float32(0), np.float32(1), (3,)) + a, f32(3)),
])
def lower_rng_uniform(ctx, a, b, *, shape):
    raise NotImplementedError(_STATEFUL.reason)


_UNREACHABLE = Limitation(
    ALL_TARGETS, "always", "it marks code that must never run: JAX itself raises its exception when it "
    "compiles the program (the check reports the exception's message)", param="message", when=lambda eqn: True,
    workaround="do not export the branch that reaches it; JAX's jit cannot compile it either")


def _unreachable(x):
    out = (jax.core.ShapedArray(x.shape, x.dtype),)
    return custom_derivatives.unreachable_p.bind(x, out_avals=out, exc_type=TypeError, message="not here")[0]


@lowering(custom_derivatives.unreachable_p, limitations=[_UNREACHABLE], cases=[
    case("rejected", _unreachable, f32(3)),
])
def lower_unreachable(ctx, *args, out_avals, exc_type, message):
    raise NotImplementedError(message)
