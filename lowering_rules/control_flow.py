"""Control flow and call-like primitives: the rules that lower sub-programs.

Each rule lowers its bodies through ``ctx.sub_program``, asked for before the
branch or loop is built so that a body's constants are emitted outside it, and
wraps them in TF's functional control flow: ``tf.cond`` becomes TFLite's IF and TF.js's If/StatelessIf,
``tf.while_loop`` becomes TFLite's WHILE and TF.js's While/StatelessWhile.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from lowering_rules.core.cases import case, f16, f32, i32
from lowering_rules.core.helpers import compute_dtype
from lowering_rules.core.jax_compat import CALL_IS_EVAL_JAXPR, bind_call, core, is_constant_dim, open_jaxpr, scan_counts
from lowering_rules.core.key_types import physical_aval
from lowering_rules.core.lazy_tensorflow import tf
from lowering_rules.core.registry import Limitation, lowering
from lowering_rules.core.vocabulary import Target

# A fixed weight the cases close over: it becomes a constant of the (sub-)program.
WEIGHT = np.linspace(-1.5, 2.0, 12, dtype=np.float32).reshape(3, 4)


# ---------------------------------------------------------------------------------------------
# Cases' programs (JAX as users write it).

@jax.jit
def _inner_jit(x):
    return jnp.sin(x) + WEIGHT


@jax.jit
def _outer_jit(x):
    return _inner_jit(x) * WEIGHT - x


@jax.custom_jvp
def _sin_times_x(x):
    return jnp.sin(x) * x


@_sin_times_x.defjvp
def _sin_times_x_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return _sin_times_x(x), t * (jnp.sin(x) + x * jnp.cos(x))


@jax.custom_vjp
def _scaled_sin(x, y):
    return jnp.sin(x) * WEIGHT + y


def _scaled_sin_fwd(x, y):
    return _scaled_sin(x, y), x


def _scaled_sin_bwd(x, g):
    return g * WEIGHT * jnp.cos(x), g


_scaled_sin.defvjp(_scaled_sin_fwd, _scaled_sin_bwd)


def _running_sum_and_products(c0, xs):
    return lax.scan(lambda c, x: (c + x, c * x), c0, xs)


def _scan_of_nothing(c0, xs):
    # The empty sequence and its empty outputs stay inside the program (joined to xs), as
    # TFLite's Python interpreter can neither take nor return an empty tensor.
    carry, ys = _running_sum_and_products(c0, xs[:0])
    return carry, jnp.concatenate([ys, xs])


def _lstm_over_sequence(xs):
    """flax's LSTM over a (batch, time, features) input, with fixed weights."""
    import flax.linen as nn  # only this case needs flax
    batch, _, _ = xs.shape
    rnn = nn.RNN(nn.OptimizedLSTMCell(5))
    shapes = jax.eval_shape(lambda: rnn.init(jax.random.key(0), jnp.zeros(xs.shape, xs.dtype)))
    rng = np.random.default_rng(0)
    params = jax.tree.map(lambda s: (0.5 * rng.standard_normal(s.shape)).astype(s.dtype), shapes)
    carry = (jnp.zeros((batch, 5)), jnp.zeros((batch, 5)))
    return rnn.apply(params, xs, initial_carry=carry)


def _grad_of_checkpointed_scan(x, xs):
    @jax.checkpoint
    def final_state(y):
        return lax.scan(lambda c, a: (jnp.sin(c) * a, c), y, xs)[0]
    return jax.value_and_grad(lambda y: jnp.sum(final_state(y)))(x)


def _call(ctx, jaxpr, args):
    return ctx.sub_program(jaxpr)(*args)


# ---------------------------------------------------------------------------------------------
# Calls: the body is all that matters once lowered.

@lowering("jit", cases=[
    case("jit_in_jit_with_weight", _outer_jit, f32(3, 4)),
    case("multiple_outputs_int", jax.jit(lambda x: (x * 3, x - 1, x)), i32(2, 5)),
    # jax.nn activations are jitted functions.
    case("silu", jax.nn.silu, f32(3, 4)),
    case("log_softmax", jax.nn.log_softmax, f32(3, 4)),
    case("elu", jax.nn.elu, f32(3, 4)),
    case("polymorphic", jax.jit(lambda x: jax.jit(lambda y: jnp.sin(y) * WEIGHT[0])(x) - x), f32(3, 4),
         polymorphic_shapes=("(b, 4)",)),
])
def lower_jit(ctx, *args, jaxpr, donated_invars=(), name="jit", keep_unused=False, inline=False,
              compiler_options_kvs=()):
    # Everything but the jaxpr is a compilation hint for XLA (buffer donation, inlining, compiler
    # flags; placement was removed before the call); TF compiles the inlined ops its own way.
    return _call(ctx, jaxpr, args)


@lowering("closed_call", cases=[
    # JAX wraps the forward half of a rematerialised scan in closed_call when differentiating.
    case("grad_of_checkpointed_scan", _grad_of_checkpointed_scan, f32(4), f32(3, 4),
         skip="JAX 0.11 binds closed_call as eval_jaxpr (its case is there)" if CALL_IS_EVAL_JAXPR else ""),
])
def lower_closed_call(ctx, *args, call_jaxpr):
    return _call(ctx, call_jaxpr, args)


def _core_call(x):
    return bind_call(lambda y: [jnp.cos(y) * 2.0], x)[0]


def _core_call_with_weight(x):
    return bind_call(lambda y: [jnp.cos(y) * jnp.asarray(WEIGHT[:2, :3]), y - 1.0], x)


# ``core.call`` (an open jaxpr, no constants): what older JAX emitted for closed_call, still bindable.
@lowering("call", cases=[
    case("open_jaxpr", _core_call, f32(2, 3),
         skip="JAX 0.11 binds core.call_p as eval_jaxpr (its case is there)" if CALL_IS_EVAL_JAXPR else ""),
])
def lower_core_call(ctx, *args, call_jaxpr):
    return _call(ctx, call_jaxpr, args)


_NO_EVAL_JAXPR = "" if CALL_IS_EVAL_JAXPR else "JAX before 0.11 has no eval_jaxpr"


# JAX 0.11's one call primitive (core.call_p, closed_call_p and custom derivatives' calls bind it):
# its jaxpr carries its constants.
@lowering("eval_jaxpr", cases=[
    case("weight_two_outputs", _core_call_with_weight, f32(2, 3), skip=_NO_EVAL_JAXPR),
    case("grad_of_checkpointed_scan", _grad_of_checkpointed_scan, f32(4), f32(3, 4), skip=_NO_EVAL_JAXPR),
])
def lower_eval_jaxpr(ctx, *args, call_jaxpr):
    return _call(ctx, call_jaxpr, args)


@lowering("remat2", cases=[
    case("checkpoint", jax.checkpoint(lambda x: jnp.sin(jnp.sin(x)) * x), f32(3, 4)),
    case("policy_no_cse", jax.checkpoint(lambda x, y: (jnp.sin(x) * y, y - x), prevent_cse=False,
                                         policy=jax.checkpoint_policies.nothing_saveable),
         f32(2, 3), f32(2, 3)),
    case("grad_of_checkpoint", jax.grad(jax.checkpoint(lambda x: jnp.sum(jnp.sin(x) * 2.0))), f32(5)),
])
def lower_checkpoint(ctx, *args, jaxpr, prevent_cse, differentiated, policy):
    # Rematerialisation only changes what autodiff saves; the forward computation is the body.
    return _call(ctx, jaxpr, args)


@lowering("custom_jvp_call", cases=[
    case("relu", jax.nn.relu, f32(3, 4)),
    case("relu_i32", jax.nn.relu, i32(7)),
    case("relu6", jax.nn.relu6, f32(4, 3, low=-3.0, high=9.0)),
    case("user_defined", _sin_times_x, f32(2, 5)),
    # jax.nn / jnp functions defined with custom_jvp (gelu and softmax are not, in this JAX).
    case("softplus", jax.nn.softplus, f32(3, 4, low=-30.0, high=30.0)),
    case("mish", jax.nn.mish, f32(3, 4)),
    case("logaddexp", jnp.logaddexp, f32(5), f32(5)),
    case("sinc", jnp.sinc, f32(6), skip="JAX 0.11's sinc has no custom_jvp (its series is the polynomial primitive, "
                                        "whose rule has sinc cases)" if hasattr(lax, "polynomial_p") else ""),
])
def lower_custom_jvp_call(ctx, *args, call_jaxpr, jvp_jaxpr_fun, num_consts, symbolic_zeros):
    # The converted program is never differentiated, so only the primal body is lowered.
    # call_jaxpr takes the consts and the arguments alike.
    return _call(ctx, call_jaxpr, args)


@lowering("custom_vjp_call", cases=[
    case("user_defined_with_weight", _scaled_sin, f32(3, 4), f32(3, 4)),
])
def lower_custom_vjp_call(ctx, *args, call_jaxpr, fwd_jaxpr_thunk, num_consts, bwd, out_trees,
                          symbolic_zeros):
    # As for custom_jvp: the user's primal function, without the fwd/bwd pair.
    return _call(ctx, call_jaxpr, args)


# ---------------------------------------------------------------------------------------------
# cond / switch

# +-inf, NaN and the largest floats (which the converter wrote for an infinite literal).
_INFINITE_EDGES = np.array([np.inf, -np.inf, 2.0, np.nan, 0.0, 3.4028235e38, -3.4028235e38, -2.0], np.float32)


@lowering("cond", cases=[
    case("bool_pred_true", lambda p, x: lax.cond(p, jnp.sin, jnp.tanh, x), np.bool_(True), f32(3, 4)),
    case("bool_pred_false", lambda p, x: lax.cond(p, jnp.sin, jnp.tanh, x), np.bool_(False), f32(3, 4)),
    case("data_dependent_pred", lambda x: lax.cond(jnp.sum(x) > 0, lambda a: a * WEIGHT, lambda a: a - 1.0, x),
         f32(3, 4)),
    case("int_pred", lambda p, x: lax.cond(p, lambda a: a * 2, lambda a: a - 1, x), np.int32(-3), i32(4)),
    case("int_pred_zero", lambda p, x: lax.cond(p, lambda a: a * 2, lambda a: a - 1, x), np.int32(0), i32(4)),
    case("several_operands_and_outputs",
         lambda p, x, n: lax.cond(p, lambda a, b: (jnp.exp(a), b + 1), lambda a, b: (a * a, b * b), x, n),
         np.bool_(True), f32(2, 3), i32(3)),
    case("switch3", lambda i, x: lax.switch(i, [jnp.sin, jnp.cos, jnp.tanh], x), np.int32(1), f32(3, 4)),
    case("switch3_last", lambda i, x: lax.switch(i, [jnp.sin, jnp.cos, jnp.tanh], x), np.int32(2), f32(3, 4)),
    case("switch3_index_above", lambda i, x: lax.switch(i, [jnp.sin, jnp.cos, jnp.tanh], x), np.int32(7),
         f32(3, 4)),
    case("switch3_index_below", lambda i, x: lax.switch(i, [jnp.sin, jnp.cos, jnp.tanh], x), np.int32(-4),
         f32(3, 4)),
    case("f16", lambda p, x: lax.cond(p, jnp.sin, jnp.tanh, x), np.bool_(False), f16(3, 4)),
    case("platform_dependent", lambda x: lax.platform_dependent(x, cpu=jnp.sin, default=jnp.cos), f32(3)),
    case("constant_pred", lambda x: lax.cond(jnp.int32(2) > 1, jnp.sin, jnp.cos, x), f32(3)),
    # Constants made inside the branches (from literals only) are folded into the root graph.
    case("constants_made_in_branches",
         lambda p, x: lax.cond(p > 0, lambda a: a + jnp.ones((2, 4)), lambda a: a - jnp.arange(8.0).reshape(2, 4), x),
         np.int32(-2), f32(2, 4)),
    case("polymorphic", lambda p, x: lax.cond(p, jnp.sin, lambda a: a * 2.0, x), np.bool_(True), f32(3, 4),
         polymorphic_shapes=(None, "(b, 4)")),
    # A branch returning both results of an inner two-output cond: TF.js read the last one for both.
    case("two_output_cond_in_branch", lambda p, q, x, t: lax.cond(
        p, lambda a, b: lax.cond(q, lambda u, v: (u + 1, v + 2), lambda u, v: (u - 1, v - 2), a, b),
        lambda a, b: (a * 2, b * 3), x, t), np.bool_(True), np.bool_(False), f32(3), f32(3)),
    # The same in a scan long enough to run as a loop.
    case("two_output_cond_in_scan_loop", lambda x, t, xs: lax.scan(
        lambda c, s: (lax.cond(s > 0, lambda u, v: (u + s, v * 0.5), lambda u, v: (u * 0.5, v - s), *c), s),
        (x, t), xs)[0], f32(3), f32(3), f32(600, low=-0.1, high=0.1)),
    # top_k in a body: TF.js read TopKV2's indices as its values until its writer named a body's
    # tensors by flat output index ('TopKV2:1', noxla.writers.tfjs.graph_def.flat_output_names).
    case("top_k_in_branch", lambda p, x: lax.cond(p, lambda a: lax.top_k(a, 2), lambda a: lax.top_k(-a, 2), x),
         np.bool_(False), f32(5)),
    # An infinite literal in a branch: TFLite's converter read a body's as FLT_MAX (inf came out for
    # x = inf); it is made in the root graph, whose infinities reach TFLite exactly.
    case("inf_literal_in_branch", lambda p, x: lax.cond(p, lambda a: jnp.where(jnp.abs(a) == jnp.inf, 0.0, a),
                                                        lambda a: a, x), np.bool_(True), _INFINITE_EDGES),
])
def lower_cond(ctx, index, *operands, branches, branches_platforms=None):
    # branches_platforms (from lax.platform_dependent) only names the platform of each branch;
    # the index, computed by platform_index, already picks one.
    if ctx.avals_in[0].dtype == bool:
        index = tf.cast(index, tf.int32)
    known = tf.get_static_value(index)
    if known is not None or len(branches) == 1:
        # A constant index (e.g. from platform_index) needs no IF, and the unused branches no ops.
        chosen = len(branches) - 1 if known is None or not 0 <= known < len(branches) else int(known)
        return ctx.sub_program(branches[chosen])(*operands)
    return _select_branch(index, [ctx.sub_program(b) for b in branches], operands)


def _select_branch(index, bodies, operands):
    """Nested two-way tf.cond: TF.js has no Case op and TFLite's converter rejects it.

    An index out of [0, n) runs the last branch, like XLA's Case (lax.switch clamps
    before cond, so this only matters for programs that bind cond directly).
    """
    first, *rest = bodies
    if not rest:
        return first(*operands)
    return tf.cond(tf.equal(index, 0),
                   lambda: _one_node_per_output(first(*operands)),
                   lambda: _one_node_per_output(_select_branch(index - 1, rest, operands)))


def _cpu_branch(platforms):
    for i, names in enumerate(platforms):
        if names is not None and "cpu" in names:
            return i
    return next((i for i, names in enumerate(platforms) if names is None), None)


@lowering("platform_index", limitations=[Limitation(
    tuple(Target), condition="no branch is for 'cpu' and there is no default", param="platforms",
    reason="a TF program runs the branch JAX runs on CPU; this program has none",
    workaround="give lax.platform_dependent a cpu= or default= branch",
    when=lambda eqn: _cpu_branch(eqn.params.get("platforms", ())) is None)],
    cases=[case("cpu_branch", lambda x: lax.platform_dependent(x, tpu=jnp.cos, cpu=jnp.sin), f32(3)),
           # Without a cpu or default branch JAX itself cannot run on CPU, so the limitation has
           # no differential case: there is no reference result.
           case("default_branch", lambda x: lax.platform_dependent(x, cuda=jnp.cos, default=jnp.tanh), f32(3)),
           # JAX traces a program with no branch for the CPU but cannot run it: rejected everywhere.
           case("no_cpu_branch_rejected", lambda x: lax.platform_dependent(x, tpu=jnp.cos), f32(3))])
def lower_platform_index(ctx, *, platforms=()):  # none: no cpu branch, rejected up front
    # TF, TFLite and TF.js stand in for JAX's CPU: the reference results are JAX's on CPU.
    return tf.constant(_cpu_branch(platforms), tf.int32)


# ---------------------------------------------------------------------------------------------
# custom_linear_solve

def _diagonal_solve(a, b):
    return lax.custom_linear_solve(lambda x: a * x, b, solve=lambda _, r: r / a,
                                   transpose_solve=lambda _, r: r / a)


def _conjugate_gradient(m, b):
    import jax.scipy.sparse.linalg  # noqa: F401  (jax.scipy is not imported by `import jax`)
    spd = m @ m.T + 4.0 * jnp.eye(m.shape[0], dtype=m.dtype)
    return jax.scipy.sparse.linalg.cg(lambda v: spd @ v, b, tol=1e-6, maxiter=20)[0]


@lowering("custom_linear_solve", cases=[
    case("diagonal", _diagonal_solve, f32(5, low=1.0, high=2.0), f32(5)),
    case("conjugate_gradient", _conjugate_gradient, f32(4, 4, low=-0.5, high=0.5), f32(4), atol=1e-4),
])
def lower_custom_linear_solve(ctx, *args, const_lengths, jaxprs):
    # Forward evaluation only applies `solve`; matvec and the transposed maps serve autodiff.
    start = const_lengths.matvec + const_lengths.vecmat
    solve_consts = args[start:start + const_lengths.solve]
    b = args[sum(const_lengths):]
    return _call(ctx, jaxprs.solve, [*solve_consts, *b])


# ---------------------------------------------------------------------------------------------
# while

def _steps_past_10(x):
    """Double x until it passes 10, counting the steps: vmapped, each example stops on its own."""
    return lax.while_loop(lambda c: c[1] < 10.0, lambda c: (c[0] + 1, c[1] * 2.0), (0, x))


def _mixed_carries(n, x, w):
    """Carries of several ranks and dtypes, one (w) the same for every example until vmap batches it."""
    def body(c):
        i, v, flag, grid, shared = c
        return i + 1, v * 1.5 + shared, ~flag, grid - jnp.sum(v), shared * 0.5
    init = (0, x, x[0] > 0, jnp.ones((2, 3)), w)
    return lax.while_loop(lambda c: c[0] < n, body, init)


def _nested_vmaps(x, y):
    """Stops per x (the outer vmap's examples); y, batched only by the inner vmap, rides along."""
    return lax.while_loop(lambda c: c[0] < x, lambda c: (c[0] + 1.0, c[1] * 2.0 - 1.0, c[2] + 1), (0.0, y, 0))


def _greedy_nms(scores, centers):
    """Greedy non-maximum suppression on a line: keep the best remaining score, drop the candidates
    within 0.5 of it, until no score passes 0.2 or 4 are kept. Vmapped over images."""
    def body(c):
        remaining, kept, n = c
        best = jnp.argmax(remaining)
        near = jnp.abs(centers - centers[best]) < 0.5
        return jnp.where(near, -1.0, remaining), jnp.where(jnp.arange(4) == n, best, kept), n + 1
    return lax.while_loop(lambda c: (jnp.max(c[0]) > 0.2) & (c[2] < 4), body,
                          (scores, jnp.full(4, -1), 0))


def _split_until(n):
    """A PRNG key carry: its data's trailing axis takes the per-example stop too (numbers drawn from it
    come out: TF.js has no uint32 output for its data)."""
    key, i = lax.while_loop(lambda c: c[1] < n, lambda c: (jax.random.split(c[0])[0], c[1] + 1),
                            (jax.random.key(7), 0))
    return jax.random.uniform(key, (2,)), i


def _shape_invariant(aval) -> tf.TensorShape:
    # Symbolic dimensions are unknown to TF's shape inference: leave them open so the loop
    # does not reject a body output whose static shape is less precise than the input's.
    return tf.TensorShape([d if is_constant_dim(d) else None for d in aval.shape])


@lowering("while", cases=[
    # The trip count depends on the data: double until every entry reaches 100.
    case("data_dependent_trips",
         lambda x: lax.while_loop(lambda c: jnp.min(c[1]) < 100.0, lambda c: (c[0] + 1, c[1] * 2.0), (0, x)),
         f32(3, 4, low=0.5, high=4.0)),
    case("no_trip", lambda x: lax.while_loop(lambda c: c[0] > 5, lambda c: (c[0] + 1, c[1] * 2.0), (0, x)),
         f32(3)),
    case("fori_dynamic_bound", lambda n, x: lax.fori_loop(0, n, lambda i, c: c * WEIGHT + i, x),
         np.int32(3), f32(3, 4)),
    case("consts_in_cond_and_body",
         lambda lim, x: lax.while_loop(lambda c: c[0] < lim, lambda c: (c[0] + 1, jnp.sin(c[1]) + x), (0, x)),
         np.int32(4), f32(2, 3)),
    # Constants made inside the body from literals only are folded into the root graph.
    case("constant_made_in_body",
         lambda x: lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] + jnp.ones((2, 4))), (0, x)),
         f32(2, 4)),
    case("inf_literal_in_body", lambda x: lax.while_loop(
        lambda c: c[0] < x[2], lambda c: (c[0] + 1, jnp.where(jnp.abs(c[1]) == jnp.inf, 0.0, c[1]) - 1.0), (0.0, x))[1],
         _INFINITE_EDGES),
    case("fori_dynamic_bound_constant_in_body",
         lambda n, x: lax.fori_loop(0, n, lambda i, c: c * 0.5 + jnp.arange(4.0) * jnp.ones((3, 4)), x),
         np.int32(3), f32(3, 4)),
    case("polymorphic",
         lambda x: lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, jnp.sin(c[1])), (0, x)),
         f32(5, 2), polymorphic_shapes=("(b, 2)",)),
    # Found by tests/fuzz_grad.py: LiteRT returned (t, t) for a body that swaps its carries (the
    # export copies each one; noxla.writers.tflite.flatbuffer.webgpu.copy_passthrough_outputs).
    case("swapped_carries", lambda x, t: lax.while_loop(lambda c: c[0] < 2, lambda c: (c[0] + 1, c[2], c[1]),
                                                        (0, x, t))[1:], f32(3), f32(3)),
    # An op with several outputs inside the body: TF.js read its last output for each.
    case("two_output_cond_in_body", lambda x, t: lax.while_loop(
        lambda c: c[0] < 1, lambda c: (c[0] + 1, *lax.cond(c[0] == 0, lambda a, b: (a + 1, b + 2),
                                                            lambda a, b: (a - 1, b - 2), c[1], c[2])),
        (0, x, t))[1:], f32(3), f32(3)),
    case("top_k_in_body", lambda x: lax.while_loop(
        lambda c: c[0] < 2, lambda c: (c[0] + 1, *lax.top_k(c[1] + c[2], 3)), (0, x, jnp.zeros(3, jnp.int32))),
         f32(3)),
    # Under vmap a stop that differs per example gives a pred per example (TF eager crashed on it,
    # LiteRT refused it, TF.js cpu/wasm returned wrong numbers).
    case("vmapped_steps_past_10", jax.vmap(_steps_past_10), f32(7, low=0.3, high=14.0)),
    case("vmapped_mixed_carries", jax.vmap(_mixed_carries, in_axes=(0, 0, None)), i32(4, low=0, high=4),
         f32(4, 3), f32(3)),
    # float16 and int8 carries are selected in float32 and int32 (TFLite's SELECT_V2 has no kernels).
    case("vmapped_f16_i8_carries", jax.vmap(lambda n, x: lax.while_loop(
        lambda c: c[0] < n, lambda c: (c[0] + 1, c[1] * 1.5, c[2] - jnp.int8(3)), (0, x, jnp.int8(7)))),
         i32(3, low=0, high=4), f16(3, 2)),
    case("nested_vmaps", jax.vmap(jax.vmap(_nested_vmaps, in_axes=(0, None)), in_axes=(None, 0)),
         f32(3, low=0.0, high=4.0), f32(2, 5)),
    case("vmapped_greedy_nms", jax.vmap(_greedy_nms), f32(5, 8, low=0.0, high=1.0), f32(5, 8, low=0.0, high=3.0)),
    case("vmapped_fori_counter", jax.vmap(lambda n, x: lax.fori_loop(0, n, lambda i, c: c * 0.5 + i, x)),
         i32(5, low=-1, high=5), f32(5, 3)),
    case("vmapped_key_carry", jax.vmap(_split_until), i32(4, low=0, high=3)),
    case("vmapped_polymorphic", jax.vmap(_steps_past_10), f32(6, low=0.3, high=14.0), polymorphic_shapes=("(b,)",)),
])
def lower_while(ctx, *args, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
    cond_consts = args[:cond_nconsts]
    body_consts = args[cond_nconsts:cond_nconsts + body_nconsts]
    init = list(args[cond_nconsts + body_nconsts:])
    cond_fn, body_fn = ctx.sub_program(cond_jaxpr), ctx.sub_program(body_jaxpr)
    carry_avals = ctx.avals_in[cond_nconsts + body_nconsts:]
    invariants = [_shape_invariant(physical_aval(a)) for a in carry_avals]  # a key carries its data
    # Under vmap a stop condition that differs per example gives one bool per example (a pred
    # of shape [B], [B1, B2] under nested vmaps: a prefix of every carry's shape). JAX's while
    # then runs while ANY example runs and keeps the carries of the examples that have stopped.
    batched = len(cond_jaxpr.out_avals[0].shape) > 0

    def cond(*carry):
        pred = cond_fn(*cond_consts, *carry)[0]
        return tf.reduce_any(pred) if batched else pred

    def body(*carry):
        outs = body_fn(*body_consts, *carry)
        if batched:
            running = cond_fn(*cond_consts, *carry)[0]  # on the carry before this step, as JAX does
            outs = [_keep_stopped(running, new, old) for new, old in zip(outs, carry)]
        outs = _one_node_per_output(outs)
        # A rule may leave a static size unknown (dynamic_update_slice's select): JAX's avals
        # know it, and tf.while_loop rejects a body output less precise than its invariant.
        for out, invariant in zip(outs, invariants):
            if isinstance(out, tf.Tensor):
                out.set_shape(invariant)
        return outs
    return tf.while_loop(cond, body, init, shape_invariants=invariants)


def _producer(t):
    while t.op.type in ("Identity", "Snapshot"):  # tf.cond's outputs are Identities of the If's
        t = t.op.inputs[0]
    return t.op


def _one_node_per_output(outs):
    """A body's results, each from its own node: two taken from one op with several outputs (a cond's
    If, a nested loop, top_k) get a Snapshot each (which the TF.js converter keeps, unlike Identity).
    TF.js's GraphModel maps a function's results to nodes with one default output each, so two
    results of one node both read the last one (noxla.writers.tfjs.writer refuses a body that breaks this)."""
    if tf.executing_eagerly():
        return outs
    ops = [_producer(o) if isinstance(o, tf.Tensor) else None for o in outs]
    return [tf.raw_ops.Snapshot(input=o) if op is not None and ops.count(op) > 1 and len(op.outputs) > 1 else o
            for o, op in zip(outs, ops)]


def _keep_stopped(running, new, old):
    """``new`` where the example still runs, else ``old``: the pred broadcast over the carry's trailing
    axes (a key's data axes too). Selected in compute_dtype: TF.js's wasm Select garbles booleans
    and TFLite's SELECT_V2 has no 8/16-bit integer or float16 kernel."""
    work = compute_dtype(old.dtype, bools=True)
    mask = running
    for _ in range(old.shape.rank - running.shape.rank):
        mask = tf.expand_dims(mask, -1)
    return tf.cast(tf.where(mask, tf.cast(new, work), tf.cast(old, work)), old.dtype)


# ---------------------------------------------------------------------------------------------
# scan

def _scans_float16_rows(eqn) -> bool:
    num_consts, num_carry = scan_counts(eqn.params)
    rows = (*eqn.avals_in[num_consts + num_carry:], *eqn.avals_out[num_carry:])
    return any(np.dtype(a.dtype) in (np.float16, np.uint16) for a in rows)


SCAN_FLOAT16_ON_TFLITE = Limitation(
    (Target.TFLITE,), condition="a scanned input or stacked output is float16 or uint16", param="dtype",
    reason="reading and writing one row of a sequence (GATHER, STRIDED_SLICE, SELECT_V2, PACK) has no "
           "float16 or uint16 kernel among TFLite's builtins",
    workaround="scan over float32 (int32 for uint16): cast the sequence before the scan and the outputs after it",
    when=_scans_float16_rows)


@lowering("scan", limitations=[SCAN_FLOAT16_ON_TFLITE], cases=[
    case("carry_and_stacked", _running_sum_and_products, f32(3), f32(5, 3)),
    case("reverse", lambda c0, xs: lax.scan(lambda c, x: (c * 0.5 + x, jnp.sin(c)), c0, xs, reverse=True),
         f32(2, 3), f32(4, 2, 3)),
    case("consts", lambda w, xs: lax.scan(lambda c, x: (jnp.tanh(c * w + x * WEIGHT[0]), c), xs[0], xs),
         f32(4), f32(6, 4)),
    case("fori_static", lambda x: lax.fori_loop(0, 5, lambda i, c: c * 1.5 + i, x), f32(3, 2)),
    case("unroll_full", lambda c0, xs: lax.scan(lambda c, x: (c + x, c * x), c0, xs, unroll=True),
         f32(3), f32(5, 3)),
    case("reverse_unrolled", lambda c0, xs: lax.scan(lambda c, x: (c - x, c), c0, xs, reverse=True, unroll=4),
         f32(3), f32(4, 3)),
    case("length_zero", _scan_of_nothing, f32(3), f32(2, 3)),
    case("length_one", _running_sum_and_products, f32(3), f32(1, 3)),
    case("no_xs", lambda c0: lax.scan(lambda c, _: (c * 2 - 1, c), c0, None, length=4), f32(2)),
    case("int_and_bool_outputs",
         lambda c0, xs: lax.scan(lambda c, x: (c + x, (c * x, c > x)), c0, xs), i32(3), i32(5, 3)),
    case("scalar_carry_f16", lambda xs: lax.scan(lambda c, x: (c + x, c * x), jnp.float16(1), xs), f16(6)),
    case("lstm_flax_rnn", _lstm_over_sequence, f32(2, 6, 4), atol=1e-5),
    case("cond_inside_scan",
         lambda c0, xs: lax.scan(lambda c, x: (lax.cond(x > 0, lambda a: a + x, lambda a: a * 0.5, c), c), c0, xs),
         f32(3), f32(7)),
    case("scan_inside_scan",
         lambda xs: lax.scan(lambda c, row: (c + lax.scan(lambda d, v: (d * v, d), 1.0, row)[0], c), 0.0, xs),
         f32(4, 3)),
    case("polymorphic_length", _running_sum_and_products, f32(3), f32(5, 3), polymorphic_shapes=(None, "(n, 3)")),
    # Long enough to exceed UNROLL_BUDGET: these run as loops.
    case("loop_carry_and_stacked", _running_sum_and_products, f32(3, low=-0.1, high=0.1),
         f32(600, 3, low=0.9, high=1.1)),
    case("loop_reverse_with_consts",
         lambda w, xs: lax.scan(lambda c, x: (jnp.tanh(c * w + x), (jnp.sin(c), c)), xs[0], xs, reverse=True),
         f32(2), f32(300, 2)),
    case("loop_int_and_bool_outputs",
         lambda c0, xs: lax.scan(lambda c, x: (c + x, (c * x, c > x)), c0, xs), i32(3, low=-1, high=1),
         i32(400, 3, low=-1, high=1)),
    case("loop_partial_unroll", lambda c0, xs: lax.scan(lambda c, x: (c + x, c * x), c0, xs, unroll=3),
         f32(3), f32(600, 3, low=0.9, high=1.1)),
    case("loop_no_xs", lambda c0: lax.scan(lambda c, _: (c * 0.99 + 1.0, c), c0, None, length=600), f32(2)),
    case("loop_lstm_flax_rnn", _lstm_over_sequence, f32(2, 40, 4), atol=1e-5),
    # A sort in a loop body (TF.js read TopKV2's indices as its values, as in cond:top_k_in_branch).
    case("loop_sort_in_body", lambda c0, xs: lax.scan(lambda c, x: (jnp.sort(c * x), c[0]), c0, xs), f32(4),
         f32(600, low=0.9, high=1.1)),
])
def lower_scan(ctx, *args, reverse, length, jaxpr, unroll, num_consts=None, num_carry=None, ft_in=None,
               ft_out=None):
    # JAX 0.11 replaced num_consts/num_carry by flat trees of the operands (ft_in: consts, carry,
    # xs) and results (ft_out: carry, ys); only their group sizes matter here.
    num_consts, num_carry = scan_counts(dict(num_consts=num_consts, num_carry=num_carry, ft_in=ft_in))
    consts = args[:num_consts]
    init = list(args[num_consts:num_consts + num_carry])
    xs = args[num_consts + num_carry:]
    step = ctx.sub_program(jaxpr)
    y_avals = jaxpr.out_avals[num_carry:]
    if _unrolls(length, unroll, jaxpr):
        return _unrolled_scan(ctx, step, consts, init, xs, int(length), reverse, num_carry, y_avals)
    return _looped_scan(ctx, step, consts, init, xs, length, reverse, num_carry, y_avals)


# Most equations an unrolled scan may emit (steps x equations per step). A loop costs every
# step a round trip through the runtime's control flow: a 16-step LSTM measured 2-4x faster
# unrolled on TF.js (cpu and wasm, where loops also force executeAsync) and no slower on TFLite.
UNROLL_BUDGET = 512


def _unrolls(length, unroll, jaxpr) -> bool:
    """Unroll fully when JAX asks for it (unroll >= length) or when the unrolled body stays small.

    A partial unroll (1 < unroll < length) is only a hint for XLA's loop pipelining and is not
    reproduced: the loop runs one step per iteration.
    """
    if not is_constant_dim(length):
        return False
    return unroll is True or unroll >= length or length * _equation_count(open_jaxpr(jaxpr)) <= UNROLL_BUDGET


def _equation_count(jaxpr) -> int:
    return sum(1 + sum(_equation_count(getattr(sub, "jaxpr", sub)) for sub in core.jaxprs_in_params(eqn.params))
               for eqn in jaxpr.eqns)


def _unrolled_scan(ctx, step, consts, carry, xs, length, reverse, num_carry, y_avals):
    if length == 0:
        return [*carry, *(tf.zeros(ctx.shape(_stacked(a, 0).shape), ctx.tf_dtype(a.dtype)) for a in y_avals)]
    # Each step's rows from one UNPACK of each stacked input: x[i] would be a STRIDED_SLICE with
    # shrink_axis_mask per step, which LiteRT.js's WebGPU delegate refuses, and one op per step
    # everywhere (the zoo's LSTM: 224 -> 213 TFLite ops, 230 -> 219 TF.js nodes; LiteRT 1 thread
    # 0.017 -> 0.015 ms).
    rows = [tf.unstack(x, num=length) for x in xs]
    xs = [[r[i] for r in rows] for i in range(length)]
    steps_ys = []
    for i in (reversed(range(length)) if reverse else range(length)):
        outs = step(*consts, *carry, *xs[i])
        carry, ys = outs[:num_carry], outs[num_carry:]
        steps_ys.append(ys)
    if reverse:
        steps_ys.reverse()
    return [*carry, *(tf.stack(y) for y in zip(*steps_ys))]


def _looped_scan(ctx, step, consts, init, xs, length, reverse, num_carry, y_avals):
    n = ctx.dim(length)
    # Stacked outputs are preallocated and row i is written by a one-hot tf.where (SELECT_V2),
    # which every target has for every dtype. Each step passes over the whole output (quadratic
    # in the length; short scans are unrolled instead). Measured alternatives: TensorArrays (TensorList ops)
    # lose rows on TF.js when the written tensor is not also a carry ("reading 'backend'" errors);
    # tensor_scatter_nd_update was slower on TF.js and TFLite lowers it to several scatters.
    # TF.js's wasm Select corrupts memory on bool tensors, so bool rows are buffered as int32.
    buffers = [tf.zeros(ctx.shape(_stacked(a, length).shape), _buffer_dtype(ctx, a)) for a in y_avals]
    rows = tf.range(n)

    def body(k, *state):
        carry, ys = state[:num_carry], state[num_carry:]
        i = n - 1 - k if reverse else k
        outs = step(*consts, *carry, *(tf.gather(x, i) for x in xs))
        row_mask = tf.equal(rows, i)
        ys = [tf.where(tf.reshape(row_mask, [-1] + [1] * len(a.shape)), tf.cast(y, buf.dtype)[None], buf)
              for y, buf, a in zip(outs[num_carry:], ys, y_avals)]
        return [k + 1, *_one_node_per_output(outs[:num_carry]), *ys]

    carry_avals = ctx.avals_in[len(consts):len(consts) + num_carry]
    invariants = [tf.TensorShape([]), *map(_shape_invariant, carry_avals),
                  *(_shape_invariant(_stacked(a, length)) for a in y_avals)]
    outs = tf.while_loop(lambda k, *_: k < n, body, [tf.constant(0), *init, *buffers],
                         shape_invariants=invariants)
    carry, ys = outs[1:1 + num_carry], outs[1 + num_carry:]
    return [*carry, *(tf.cast(y, ctx.tf_dtype(a.dtype)) for y, a in zip(ys, y_avals))]


def _buffer_dtype(ctx, aval) -> tf.DType:
    return tf.int32 if aval.dtype == np.bool_ else ctx.tf_dtype(aval.dtype)


def _stacked(aval, length):
    return aval.update(shape=(length, *aval.shape))
