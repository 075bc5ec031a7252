"""The fuzzer's derivative families (tests/fuzz.py draws from them): the programs JAX builds to
differentiate a program of another family, as noxla converts them for ``jax.grad`` of a loss (training
on device) and for a TF gradient of a converted function (noxla/writers/tf/gradients.py converts ``jax.vjp``).

Autodiff emits what forward programs rarely hold: transposes (pad with negative and interior padding,
scatter-add, convolutions with lhs dilation or swapped groups, select_and_scatter_add, reversed
cumulative sums, dynamic_update_slice into zeros), forward-mode rules (select_and_gather_add, sorts
carrying an iota), and the ops of each primitive's derivative.

``vjp``: ``jax.vjp`` of the inner program at its inputs, applied to cotangents that are inputs too (so
that nothing is folded into a constant). ``jvp``: ``jax.jvp``'s tangent outputs, the tangents inputs.
Only the float inputs are differentiated (the others, indices, stay inputs, closed over), and only
the float outputs get cotangents, as noxla/writers/tf/gradients.py does.
"""
from __future__ import annotations

import numpy as np

from tests.fuzz import Program, values
from tests.fuzz_ops import EXACT_FLOAT

# Inner families: every float-valued one. shape_op's reshapes fix their sizes in Python (fine here:
# the derivative has the same sizes); polymorphic wraps others.
NOT_DRAWN = ("polymorphic",)
# Transcendental ops smooth on the whole real line: a chain may end with one (as fuzz_ops lets it).
# The others' derivatives have poles (log, rsqrt, tan, lgamma, ...) or domains (asin, acosh, pow of a
# negative base, ...) that quarter-valued inputs hit, where a tolerance on the op becomes an
# unbounded one on its derivative. JAX has no derivative of nextafter.
SMOOTH = ("exp", "exp2", "expm1", "tanh", "logistic", "sin", "cos", "atan", "sinh", "cosh", "asinh", "erf",
          "erfc")
ELEMENTWISE_OPS = frozenset(EXACT_FLOAT + SMOOTH) - {"nextafter"}
# JAX has no reverse-mode derivative of a while_loop; forward mode it has.
NO_VJP = ("while", "while_of_cond")


def _differentiable(dtype) -> bool:
    import jax.numpy as jnp
    return jnp.issubdtype(dtype, jnp.floating)


def _drawable(family: str, inner: Program, mode: str) -> bool:
    """Whether JAX differentiates the program without a refusal or a non-finite derivative from
    well-defined inputs (see SMOOTH); NaN/inf inputs (strict programs) are left to the forward families."""
    if inner.strict or (mode == "vjp" and inner.primitive in NO_VJP):
        return False
    if inner.primitive == "scatter_mul" and "unique_indices=False" in inner.description:
        return False  # JAX differentiates scatter_mul only with unique indices
    if (inner.primitive in ("scatter_min", "scatter_max") and "mode=CLIP" in inner.description
            and "operand_batching_dims=()" not in inner.description and _jax_before((0, 12))):
        # JAX 0.10.2's derivative of a clipped scatter_min/max with batching dimensions and an index
        # out of bounds is NaN for finite inputs and all-ones tangents (0.12.1's is right, and noxla
        # matches it there); found by the fuzzer, seed 2026201.
        return False
    if mode == "vjp" and inner.primitive == "select_n" and inner.description == "1 cases":
        return False  # JAX's transpose of a one-case select_n fails (an IndexError)
    if mode == "vjp" and inner.primitive == "reduce_window":
        # JAX transposes neither a reduce_window of another monoid or init nor a max/min one's
        # window dilation (its forward mode does both).
        monoid, dilation = inner.description.split()[0], inner.description.split("window_dilation=")[1]
        return monoid in ("add", "max", "min") and (monoid == "add" or set(dilation) <= set("[1, ]"))
    return family != "elementwise" or set(inner.description.split(" -> ")) <= ELEMENTWISE_OPS


def _jax_before(version: tuple) -> bool:
    import jax
    return tuple(int(p) for p in jax.__version__.split(".")[:2]) < version


def _held_constant(inner: Program) -> tuple:
    """Float inputs not differentiated: JAX's derivative of clamp w.r.t. a scalar bound of an array
    fails (a select of unbroadcast cases)."""
    if inner.primitive != "clamp":
        return ()
    return tuple(i for i in (0, 2) if np.shape(inner.args[i]) != np.shape(inner.args[1]))


def derivative(inner: Program, mode: str, rng, constant: tuple = ()) -> Program | None:
    """The ``vjp`` or ``jvp`` program of ``inner``, its cotangents or tangents drawn from ``rng``; None
    when there is nothing to differentiate (no float input or output). The inputs ``constant``
    (indices) are not differentiated."""
    import jax
    leaves = jax.tree_util.tree_leaves(jax.eval_shape(inner.fun, *inner.args))
    wrt = [i for i, a in enumerate(inner.args) if _differentiable(a.dtype) and i not in constant]
    floats = [i for i, o in enumerate(leaves) if _differentiable(o.dtype)]
    if not wrt or not floats:
        return None
    primals = inner.args
    extra = [values(rng, leaves[i].shape, leaves[i].dtype) for i in floats] if mode == "vjp" else \
        [values(rng, primals[i].shape, primals[i].dtype) for i in wrt]

    def fun(*args):
        given, seeds = args[:len(primals)], args[len(primals):]

        def of_wrt(*xs):
            full = list(given)
            for i, x in zip(wrt, xs):
                full[i] = x
            outs = jax.tree_util.tree_leaves(inner.fun(*full))
            return [outs[i] for i in floats]
        if mode == "jvp":
            return jax.jvp(of_wrt, [given[i] for i in wrt], list(seeds))[1]
        return jax.vjp(of_wrt, *[given[i] for i in wrt])[1](list(seeds))
    fun.inner, fun.wrt = inner, wrt  # for tape_gradient_matches
    return Program(mode, f"of {inner.primitive}: {inner.description} w.r.t. inputs {wrt}", fun,
                   (*primals, *extra))


def strategies(inner: dict):
    """``vjp`` and ``jvp``: the derivative of a program of one of ``inner``'s families (name -> strategy)."""
    from hypothesis import assume
    from hypothesis import strategies as st

    names = sorted(n for n in inner if n not in NOT_DRAWN)

    def family(mode):
        @st.composite
        def draw_derivative(draw):
            name = draw(st.sampled_from(names))
            program = draw(inner[name])
            assume(_drawable(name, program, mode))
            rng = np.random.RandomState(draw(st.integers(0, 2 ** 31 - 1)))
            try:
                out = derivative(program, mode, rng, _held_constant(program))
            except Exception:  # noqa: BLE001 - a program JAX refuses: the forward families count it
                out = None
            assume(out is not None)
            return out
        return draw_derivative()

    return {"vjp": family("vjp"), "jvp": family("jvp")}


def tape_gradient_matches(program: Program) -> bool:
    """Whether the TF gradient (tf.GradientTape) of ``noxla.convert`` of a ``vjp`` program's inner
    program, of the sum of its float outputs times the cotangents, is the program's JAX result: the
    path noxla/writers/tf/gradients.py takes. False when not applicable (JAX refuses, noxla's check refuses, or
    inputs are held constant)."""
    import jax
    import tensorflow as tf

    import noxla
    from noxla.runtimes.verify import jax_outputs
    from tests.differential import assert_matches
    from tests.test_gradients import tape_gradient
    inner, wrt = program.fun.inner, program.fun.wrt
    if len(wrt) != sum(_differentiable(a.dtype) for a in inner.args):
        return False  # TF asks for every float input's gradient
    try:
        expected = tuple(jax_outputs(program.fun, program.args))
    except Exception:  # noqa: BLE001 - JAX refuses: run_program counts such programs
        return False
    converted, cts = noxla.convert(inner.fun), program.args[len(inner.args):]

    def loss(*args):
        outs = [o for o in jax.tree_util.tree_leaves(converted(*args)) if o.dtype.is_floating]
        return tf.add_n([tf.constant(0.0)] + [tf.reduce_sum(tf.cast(o * c, tf.float32)) for o, c in zip(outs, cts)])
    try:
        grads = tape_gradient(loss, *inner.args)
    except noxla.UnsupportedError:  # the check refused the forward or the VJP program for TF
        return False
    assert_matches(expected, [grads[i].numpy() for i in wrt], [f"d/d input {i}" for i in wrt],
                   where=f"tf.GradientTape of {program!r}")
    return True


def tape_fuzz(examples: int, seed: int) -> int:
    """``tape_gradient_matches`` on ``examples`` drawn ``vjp`` programs; returns how many applied."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hypothesis_seed

    from tests import fuzz
    applied = []

    @hypothesis_seed(seed)
    @settings(max_examples=examples, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck), print_blob=False)
    @given(fuzz.strategies()["vjp"])
    def check(program):
        applied.append(tape_gradient_matches(program))
    check()
    return sum(applied)
