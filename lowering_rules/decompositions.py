"""Linear algebra on small static matrices: cholesky, triangular_solve, lu, lu_pivots_to_permutation,
qr, eigh, svd and tridiagonal_solve, through basic ops (no TF linalg kernels: TFLite builtins and
TF.js have none).

- Direct methods are unrolled over the (static) matrix size with masks and slices, so each step
  is a few elementwise ops and at most one matrix product; batch dimensions ride along.
- eigh and svd are Jacobi methods: each round applies n/2 disjoint plane rotations at once (a
  round-robin tournament of index pairs) as one rotation matrix built by matrix products from
  constant patterns; a fixed number of sweeps runs in a while loop.
- JAX's conventions: lower triangles, LAPACK's Householder signs (R's diagonal is -sign(alpha)|x|),
  getrf's pivots (first largest magnitude) and permutation, eigenvalues ascending, singular values
  descending. Eigenvector and singular vector signs are not unique: cases compare invariants
  (reconstruction, orthogonality, the values), computed inside the program in both JAX and noxla.
- Sizes are limited (MAX_SIZE): the unrolled graph grows with n. The limit is declared up front,
  and the rule refuses beyond it.
"""
from __future__ import annotations

import jax  # jax.scipy.linalg loads on first use (JAX's lazy submodule): importing it jits ~30 functions
import jax.numpy as jnp
import numpy as np
from jax import lax

from lowering_rules import linalg_factor
from lowering_rules.core.cases import case, f32
from lowering_rules.core.dtype_support import dtypes, gap
from lowering_rules.core.helpers import axis_slice
from lowering_rules.core.lazy_tensorflow import tf
from lowering_rules.core.matrices import cols as _cols
from lowering_rules.core.matrices import eye_like as _eye_like
from lowering_rules.core.matrices import index as _index
from lowering_rules.core.matrices import rows as _rows
from lowering_rules.core.matrices import swap_last as _t
from lowering_rules.core.registry import Limitation, Target, lowering
from lowering_rules.core.vocabulary import ALL_TARGETS
from lowering_rules.linalg_factor import WEBGPU_LINALG

# Largest matrix dimension each rule unrolls. Measured at the limit (float32, batch 1, TFLite
# builtins, LiteRT 1 thread, on a shared 2-core AMD EPYC, one primitive per model): cholesky 32:
# 385 ops, 68 KB, 0.17 ms; triangular_solve 32 (1 rhs): 284 ops, 0.05 ms;
# lu 32: 819 ops, 154 KB, 0.29 ms; qr 32: 1033 ops, 182 KB, 0.27 ms; tridiagonal_solve 64:
# 952 ops, 0.05 ms; eigh 32: a WHILE loop, 4.1 MB of rotation patterns, 49 ms; svd 32x32
# (values only): 4.1 MB, 65 ms. Export time grows with the op count (lu 32: 25 s).
MAX_SIZE = {
    "cholesky": 32, "triangular_solve": 32, "lu": 32, "lu_pivots_to_permutation": 64,
    "qr": 32, "eigh": 32, "svd": 32, "tridiagonal_solve": 64,
}
JACOBI_SWEEPS = 10  # float32 converges in 5-7 sweeps for n <= 32; the rest are cheap insurance


def _size_limit(name: str, dims, cost: str) -> Limitation:
    limit = MAX_SIZE[name]
    return Limitation(
        ALL_TARGETS, f"a matrix dimension is larger than {limit}",
        f"noxla unrolls {name} over the matrix size ({cost}); beyond {limit} the graph grows too large",
        when=lambda eqn: max((max(a.shape[d] for d in dims(a)) for a in eqn.avals_in[:1]), default=0) > limit,
        param="shape", workaround="split the problem into smaller matrices, or compute it outside the model")


def _check_size(name: str, *sizes: int) -> None:
    if max(sizes, default=0) > MAX_SIZE[name]:
        raise ValueError(f"{name} is unrolled up to size {MAX_SIZE[name]}; got {max(sizes)}")


def _last_two(aval):
    return (aval.ndim - 2, aval.ndim - 1)


# ----------------------------------------------------------------------------- small helpers

def _nan_where_not(ok, x):
    nan = tf.constant(np.nan, x.dtype)
    return tf.where(ok, x, tf.fill(tf.shape(x), nan))


def _swap(x, j: int, p, n: int, axis: int):
    """x with entries j and p (an int32 tensor per batch) swapped along ``axis`` (-2: the rows of
    matrices, -1: vectors). By selection, not a batched gather: TF.js's wasm backend gathers
    with batch_dims wrongly."""
    shape = (n, 1) if axis == -2 else (n,)
    i = tf.constant(np.arange(n, dtype=np.int32).reshape(shape))
    p = tf.reshape(p, tf.concat([tf.shape(p), [1] * len(shape)], 0))
    at_p = tf.equal(i, p)
    x_p = tf.reduce_sum(tf.where(at_p, x, tf.zeros_like(x)), axis=axis, keepdims=True)
    rank = len(x.shape)
    x_j = axis_slice(x, rank, rank + axis, j, j + 1)
    return tf.where(tf.equal(i, j), x_p + tf.zeros_like(x), tf.where(at_p, x_j + tf.zeros_like(x), x))


# ----------------------------------------------------------------------------- cholesky

def _spd(x):
    """A well-conditioned symmetric positive definite matrix from any square one."""
    return x @ jnp.swapaxes(x, -1, -2) + x.shape[-1] * jnp.eye(x.shape[-1], dtype=x.dtype)


@lowering(lax.linalg.cholesky_p, limitations=[WEBGPU_LINALG, _size_limit("cholesky", _last_two, "about 10 n ops")],
          cases=[
    case("spd", lambda x: jnp.linalg.cholesky(_spd(x)), f32(5, 5)),
    case("batched", lambda x: jnp.linalg.cholesky(_spd(x)), f32(2, 3, 4, 4)),
    case("one", lambda x: jnp.linalg.cholesky(_spd(x)), f32(1, 1)),
    case("not_positive_definite", jnp.linalg.cholesky, np.array([[1.0, 2.0], [2.0, 1.0]], np.float32)),
    case("cho_solve", lambda x, b: jax.scipy.linalg.cho_solve(jax.scipy.linalg.cho_factor(_spd(x), lower=True), b),
         f32(6, 6), f32(6, 2)),
    case("too_large", lambda x: jnp.linalg.cholesky(_spd(x)), f32(33, 33)),
    case("empty", lambda x, y: jnp.concatenate([jnp.linalg.cholesky(x[:, :0, :0]).reshape(-1), y]),
         f32(3, 2, 2), f32(3)),
])
def lower_cholesky(ctx, x):
    n = ctx.avals_in[0].shape[-1]
    _check_size("cholesky", n)
    if n == 0:  # no columns to concatenate: the empty factor is the empty input
        return x
    row = tf.constant(_index(n, 0))
    columns, ok = [], None
    for j in range(n):
        column = _cols(x, j, j + 1)                                     # (..., n, 1)
        if columns:
            done = tf.concat(columns, axis=-1)                          # (..., n, j)
            column = column - tf.linalg.matmul(done, _rows(done, j, j + 1), transpose_b=True)
        pivot = _rows(column, j, j + 1)                                 # (..., 1, 1)
        positive = pivot > 0
        ok = positive if ok is None else tf.logical_and(ok, positive)
        column = column / tf.sqrt(tf.where(positive, pivot, tf.ones_like(pivot)))
        columns.append(tf.where(row >= j, column, tf.zeros_like(column)))
    # LAPACK stops at a non-positive pivot and JAX then returns NaNs everywhere.
    return _nan_where_not(ok, tf.concat(columns, axis=-1))


# ----------------------------------------------------------------------------- triangular_solve

def _triangular(x, lower=True, unit=False):
    n = x.shape[-1]
    m = jnp.tril(x) if lower else jnp.triu(x)
    return m + (0 if unit else n * jnp.eye(n, dtype=x.dtype))


@lowering(lax.linalg.triangular_solve_p, dtypes=dtypes(gaps=[gap((Target.TFLITE,), {"float16"}, (
    "the substitution slices float16 rows (STRIDED_SLICE), which TFLite's builtins have no kernel for"))]),
    limitations=[WEBGPU_LINALG,
    _size_limit("triangular_solve", lambda a: (a.ndim - 1,), "about 6 n ops")], cases=[
    case("lower_left", lambda a, b: lax.linalg.triangular_solve(_triangular(a), b, left_side=True, lower=True),
         f32(5, 5), f32(5, 3)),
    case("upper_left_transposed", lambda a, b: lax.linalg.triangular_solve(
        _triangular(a, lower=False), b, left_side=True, lower=False, transpose_a=True), f32(4, 4), f32(4, 2)),
    case("lower_right", lambda a, b: lax.linalg.triangular_solve(_triangular(a), b, left_side=False, lower=True),
         f32(4, 4), f32(3, 4)),
    case("upper_right_unit", lambda a, b: lax.linalg.triangular_solve(
        _triangular(a, lower=False, unit=True), b, left_side=False, lower=False, unit_diagonal=True),
        f32(4, 4), f32(2, 4)),
    # Only the named triangle is read: NaN elsewhere must not leak in.
    case("other_triangle_ignored", lambda a, b: jax.scipy.linalg.solve_triangular(
        _triangular(a) + jnp.triu(jnp.full_like(a, jnp.nan), 1), b, lower=True), f32(4, 4), f32(4)),
    case("batched", lambda a, b: jax.scipy.linalg.solve_triangular(_triangular(a, lower=False), b, lower=False),
         f32(2, 5, 5), f32(2, 5, 2)),
    case("too_large", lambda a, b: jax.scipy.linalg.solve_triangular(_triangular(a), b, lower=True),
         f32(33, 33), f32(33)),
])
def lower_triangular_solve(ctx, a, b, *, left_side=False, lower=False, transpose_a=False, conjugate_a=False,
                           unit_diagonal=False):  # lax.linalg.triangular_solve's defaults
    # conjugate_a only matters for complex matrices, which this rule does not take.
    n = ctx.avals_in[0].shape[-1]
    _check_size("triangular_solve", n)
    if transpose_a:
        a, lower = _t(a), not lower
    if not left_side:  # x A = b  <=>  A^T x^T = b^T
        a, b, lower = _t(a), _t(b), not lower
    order = range(n) if lower else range(n - 1, -1, -1)
    solved = {}
    for i in order:
        row = _rows(b, i, i + 1)                                        # (..., 1, k)
        if solved:
            lo, hi = (0, i) if lower else (i + 1, n)
            known = tf.concat([solved[r] for r in range(lo, hi)], axis=-2)
            row = row - tf.linalg.matmul(_cols(_rows(a, i, i + 1), lo, hi), known)
        if not unit_diagonal:
            row = row / _cols(_rows(a, i, i + 1), i, i + 1)
        solved[i] = row
    x = tf.concat([solved[i] for i in range(n)], axis=-2)
    return x if left_side else _t(x)


# ----------------------------------------------------------------------------- lu

def _lu_parts(x):
    lu, pivots, permutation = lax.linalg.lu(x)
    return lu, pivots, permutation


@lowering(lax.linalg.lu_p, limitations=[WEBGPU_LINALG, _size_limit("lu", _last_two, "about 15 n ops")], cases=[
    case("square", _lu_parts, f32(5, 5)),
    case("wide", _lu_parts, f32(3, 5)),
    case("tall", _lu_parts, f32(5, 3)),
    case("batched", _lu_parts, f32(2, 4, 4)),
    case("singular_zero_column", _lu_parts, np.array([[0, 1, 2], [0, 3, 4], [0, 5, 7]], np.float32)),
    case("solve", jnp.linalg.solve, f32(6, 6), f32(6, 2)),
    case("inv", jnp.linalg.inv, f32(5, 5)),
    case("det", jnp.linalg.det, f32(5, 5)),
    case("slogdet", lambda x: tuple(jnp.linalg.slogdet(x)), f32(2, 6, 6)),
    case("scipy_lu", lambda x: jax.scipy.linalg.lu(x), f32(4, 4)),
    case("too_large", _lu_parts, f32(33, 33)),
])
def lower_lu(ctx, x):
    aval = ctx.avals_in[0]
    m, n = aval.shape[-2:]
    _check_size("lu", m, n)
    row, col = tf.constant(_index(m, 0)), tf.constant(_index(n, 1))
    permutation = tf.broadcast_to(tf.range(m, dtype=tf.int32), tf.concat([tf.shape(x)[:-2], [m]], 0))
    pivots = []
    for j in range(min(m, n)):
        # getrf's pivot: the first row (from j down) of largest magnitude in column j.
        magnitude = tf.where(row >= j, tf.abs(_cols(x, j, j + 1)), -tf.ones_like(_cols(x, j, j + 1)))
        p = tf.argmax(tf.squeeze(magnitude, -1), axis=-1, output_type=tf.int32)
        pivots.append(p)
        x = _swap(x, j, p, m, axis=-2)
        permutation = _swap(permutation, j, p, m, axis=-1)
        pivot = _cols(_rows(x, j, j + 1), j, j + 1)
        # A zero pivot means the column is zero below it: getrf leaves it, and so do we.
        pivot = tf.where(tf.equal(pivot, 0), tf.ones_like(pivot), pivot)
        multipliers = tf.where(row > j, _cols(x, j, j + 1) / pivot, tf.zeros_like(_cols(x, j, j + 1)))
        pivot_row = tf.where(col > j, _rows(x, j, j + 1), tf.zeros_like(_rows(x, j, j + 1)))
        x = x - multipliers * pivot_row
        x = tf.where(tf.logical_and(row > j, tf.equal(col, j)), multipliers + tf.zeros_like(x), x)
    return x, tf.stack(pivots, axis=-1), permutation


@lowering(lax.linalg.lu_pivots_to_permutation_p, limitations=[WEBGPU_LINALG,
    _size_limit("lu_pivots_to_permutation", lambda a: (a.ndim - 1,), "3 ops per pivot")], cases=[
    case("pivots", lambda p: lax.linalg.lu_pivots_to_permutation(p, 5), np.array([2, 2, 4, 3], np.int32)),
    case("batched", lambda p: lax.linalg.lu_pivots_to_permutation(p, 4), np.array([[3, 1, 2], [0, 3, 3]], np.int32)),
    case("too_large", lambda p: lax.linalg.lu_pivots_to_permutation(p, 70), np.zeros(65, np.int32)),
])
def lower_lu_pivots_to_permutation(ctx, pivots, *, permutation_size):
    aval = ctx.avals_in[0]
    _check_size("lu_pivots_to_permutation", aval.shape[-1], permutation_size)
    batch = tf.shape(pivots)[:-1]
    permutation = tf.broadcast_to(tf.range(permutation_size, dtype=tf.int32), tf.concat([batch, [permutation_size]], 0))
    for j in range(aval.shape[-1]):
        p = tf.squeeze(_last(pivots, j), -1)
        permutation = _swap(permutation, j, p, permutation_size, axis=-1)
    return permutation


def _last(x, j):
    rank = len(x.shape)
    return axis_slice(x, rank, rank - 1, j, j + 1)


# ----------------------------------------------------------------------------- qr

def _householder(x, m: int, n: int, full_q: bool):
    """LAPACK's geqrf + orgqr: reflectors H_j = I - tau v v^T with beta = -sign(alpha) |x|."""
    row, col = tf.constant(_index(m, 0)), tf.constant(_index(n, 1))
    q = _eye_like(x, m)
    for j in range(min(m, n)):
        column = _cols(x, j, j + 1)                                     # (..., m, 1)
        alpha = _rows(column, j, j + 1)                                 # (..., 1, 1)
        below = tf.where(row > j, column, tf.zeros_like(column))
        tail = tf.sqrt(tf.reduce_sum(below * below, axis=-2, keepdims=True))
        norm = tf.sqrt(alpha * alpha + tail * tail)
        beta = tf.where(alpha >= 0, -norm, norm)
        trivial = tf.equal(tail, 0)                                     # H = I, as dlarfg
        safe = tf.where(trivial, tf.ones_like(beta), beta)
        tau = tf.where(trivial, tf.zeros_like(beta), (beta - alpha) / safe)
        scale = tf.where(trivial, tf.zeros_like(beta), 1.0 / tf.where(trivial, tf.ones_like(beta), alpha - beta))
        v = tf.where(tf.equal(row, j), tf.ones_like(column), below * scale)
        x = x - tau * v * tf.linalg.matmul(v, x, transpose_a=True)
        # Column j is exactly (beta, 0, ...) below the diagonal: store it so.
        fixed = tf.where(tf.equal(row, j), tf.where(trivial, alpha, beta), tf.zeros_like(column))
        x = tf.where(tf.logical_and(tf.equal(col, j), row >= j), fixed + tf.zeros_like(x), x)
        q = q - tau * tf.linalg.matmul(tf.linalg.matmul(q, v), v, transpose_b=True)
    r = tf.where(row <= col, x, tf.zeros_like(x))
    k = min(m, n)
    return (q, r) if full_q else (_cols(q, 0, k), _rows(r, 0, k))


def _qr_invariants(mode):
    def fn(x):
        q, r = jnp.linalg.qr(x, mode=mode)
        return q, r, q @ r, jnp.swapaxes(q, -1, -2) @ q
    return fn


@lowering(lax.linalg.qr_p, limitations=[WEBGPU_LINALG,
    _size_limit("qr", _last_two, "about 20 min(m, n) ops"),
], cases=[
    case("square", _qr_invariants("reduced"), f32(5, 5)),
    case("tall_reduced", _qr_invariants("reduced"), f32(6, 3)),
    case("tall_complete", _qr_invariants("complete"), f32(5, 3)),
    case("wide", _qr_invariants("reduced"), f32(3, 5)),
    case("batched", _qr_invariants("reduced"), f32(2, 4, 4)),
    case("zero_column", _qr_invariants("reduced"), np.array([[0, 1], [0, 2], [0, 3]], np.float32)),
    case("r_only", lambda x: jnp.linalg.qr(x, mode="r"), f32(4, 3)),
    case("pivoting", lambda x: jax.scipy.linalg.qr(x, pivoting=True), f32(4, 3)),
    case("pivoting_economic_wide", lambda x: jax.scipy.linalg.qr(x, pivoting=True, mode="economic"), f32(2, 3, 4)),
    case("pivoting_economic_tall", lambda x: jax.scipy.linalg.qr(x, pivoting=True, mode="economic"), f32(4, 2)),
    case("too_large", _qr_invariants("reduced"), f32(33, 4)),
])
def lower_qr(ctx, x, *, full_matrices, pivoting=False, use_magma=None):
    # use_magma picks a GPU library: meaningless here.
    m, n = ctx.avals_in[0].shape[-2:]
    _check_size("qr", m, n)
    if pivoting:  # geqp3's rules, JAX's own composition
        return linalg_factor.pivoted_qr(x, m, n, full_matrices)
    return list(_householder(x, m, n, full_matrices))


# ----------------------------------------------------------------------------- Jacobi methods

def _tournament(n: int) -> list[list[tuple[int, int]]]:
    """Rounds of disjoint index pairs in which every pair meets once (round-robin, circle method)."""
    players = list(range(n + n % 2))
    rounds = []
    for _ in range(len(players) - 1):
        half = len(players) // 2
        pairs = [(min(a, b), max(a, b)) for a, b in zip(players[:half], players[::-1][:half])]
        rounds.append([(p, q) for p, q in pairs if q < n])
        players = [players[0], players[-1], *players[1:-1]]
    return rounds


def _rotation_patterns(n: int, pairs, dtype):
    """Constant matrices turning (c, s) vectors into the round's rotation J (flattened):
    J[p, p] = J[q, q] = c, J[p, q] = s, J[q, p] = -s, and 1 on indices outside every pair."""
    cos, sin, rest = np.zeros((len(pairs), n * n)), np.zeros((len(pairs), n * n)), np.eye(n).reshape(-1)
    for k, (p, q) in enumerate(pairs):
        cos[k, p * n + p] = cos[k, q * n + q] = 1.0
        sin[k, p * n + q], sin[k, q * n + p] = 1.0, -1.0
        rest[p * n + p] = rest[q * n + q] = 0.0
    return [tf.constant(a.astype(dtype)) for a in (cos, sin, rest)]


def _rotation(t, n, pairs, dtype, batch_shape):
    """J for the round from the rotations' tangents t (..., pairs)."""
    c = tf.math.rsqrt(t * t + 1.0)
    s = t * c
    cos, sin, rest = _rotation_patterns(n, pairs, dtype)
    flat = tf.linalg.matmul(tf.reshape(c, [-1, len(pairs)]), cos) + tf.linalg.matmul(
        tf.reshape(s, [-1, len(pairs)]), sin) + rest
    return tf.reshape(flat, tf.concat([batch_shape, [n, n]], 0))


def _tangent(diff, off):
    """tan of the angle zeroing ``off``: t = sign(z) / (|z| + sqrt(z^2 + 1)), z = diff / (2 off)."""
    nonzero = tf.not_equal(off, 0)
    z = diff / (2.0 * tf.where(nonzero, off, tf.ones_like(off)))
    sign = tf.where(z >= 0, tf.ones_like(z), -tf.ones_like(z))
    t = sign / (tf.abs(z) + tf.sqrt(z * z + 1.0))
    return tf.where(nonzero, t, tf.zeros_like(t))


def _sweeps(body, state):
    """JACOBI_SWEEPS applications of ``body`` in a while loop (one WHILE op, one sweep's ops)."""
    return tf.while_loop(lambda k, *_: k < JACOBI_SWEEPS, lambda k, *s: (k + 1, *body(*s)),
                         [tf.constant(0), *state])[1:]


def _ascending_order(values, descending=False):
    """Indices sorting the last axis (stable): rank each value, then invert the ranks."""
    n = values.shape[-1]
    a, b = tf.expand_dims(values, -1), tf.expand_dims(values, -2)   # a: i along rows, b: j along cols
    before = (b > a) if descending else (b < a)
    j_before_i = tf.constant(_index(n, 1) < _index(n, 0))
    ties = tf.logical_and(tf.equal(b, a), j_before_i)
    rank = tf.reduce_sum(tf.cast(tf.logical_or(before, ties), tf.int32), axis=-1)   # (..., n)
    onehot = tf.cast(tf.equal(tf.expand_dims(rank, -1), tf.constant(_index(n, 1))), tf.int32)  # [i, r]
    return tf.reduce_sum(onehot * tf.constant(_index(n, 0)), axis=-2)              # order[r] = i


def _permute_columns(x, order):
    """x[..., order] for a matrix (columns) or a vector, as a product with the permutation matrix
    (exact for finite values; TF.js's wasm backend gathers with batch_dims wrongly)."""
    n = order.shape[-1]
    chosen = tf.equal(tf.expand_dims(order, -2), tf.constant(_index(n, 0)))  # [i, r]: order[r] == i
    if len(x.shape) == len(order.shape):
        # A vector by selection: TFLite's converter rejects the (1, n) x (n, n) product of a vector.
        column = tf.expand_dims(x, -1)
        return tf.reduce_sum(tf.where(chosen, column, tf.zeros_like(column)), axis=-2)
    return tf.linalg.matmul(x, tf.cast(chosen, x.dtype))


def _subset_limitation(values: str) -> Limitation:
    return Limitation(ALL_TARGETS, "subset_by_index is set", f"subsets of the {values} are not lowered",
                      param="subset_by_index",
                      when=lambda eqn: eqn.params.get("subset_by_index") not in (None, (0, -1)),
                      workaround=f"compute all {values} and slice")


def _eigh_invariants(x):
    w, v = jnp.linalg.eigh(x + jnp.swapaxes(x, -1, -2))
    return w, (v * w[..., None, :]) @ jnp.swapaxes(v, -1, -2), jnp.swapaxes(v, -1, -2) @ v


@lowering(lax.linalg.eigh_p, limitations=[WEBGPU_LINALG,
    _size_limit("eigh", _last_two, f"{JACOBI_SWEEPS} sweeps of n - 1 rotation rounds in a while loop"),
    _subset_limitation("eigenvalues"),
], cases=[
    case("invariants", _eigh_invariants, f32(5, 5)),
    case("batched", _eigh_invariants, f32(2, 4, 4)),
    case("eigvalsh", lambda x: jnp.linalg.eigvalsh(x + x.T), f32(6, 6)),
    case("one", _eigh_invariants, f32(1, 1)),
    case("repeated_eigenvalues", lambda x: jnp.linalg.eigvalsh(x), np.diag([2.0, 1.0, 2.0, 1.0]).astype(np.float32)),
    case("lower_only", lambda x: lax.linalg.eigh(jnp.tril(x) + 5 * jnp.eye(4), symmetrize_input=False)[1],
         f32(4, 4)),
    case("subset", lambda x: lax.linalg.eigh(x + x.T, subset_by_index=(0, 2))[1], f32(4, 4)),
    case("too_large", lambda x: jnp.linalg.eigvalsh(x + x.T), f32(33, 33)),
    case("empty", lambda x, y: jnp.concatenate([c.reshape(-1) for c in jnp.linalg.eigh(x[:0, :0])] + [y]),
         f32(2, 2), f32(3)),
])
def lower_eigh(ctx, x, *, lower=True, sort_eigenvalues=True, subset_by_index=None, algorithm=None):
    # algorithm picks among XLA's eigensolvers; any one gives the same decomposition.
    aval = ctx.avals_in[0]
    n = aval.shape[-1]
    _check_size("eigh", n)
    if n == 0:
        # Reshaped from the empty input: the reduction below gave TF.js a (1,) vector for (0, 0).
        return x, tf.reshape(x, ctx.shape(ctx.avals_out[1].shape))
    row, col = tf.constant(_index(n, 0)), tf.constant(_index(n, 1))
    # Only the named triangle is read.
    triangle = tf.where(row >= col if lower else row <= col, x, tf.zeros_like(x))
    a = triangle + _t(tf.where(tf.equal(row, col), tf.zeros_like(x), triangle))
    batch_shape = tf.shape(x)[:-2]
    flat_index = lambda p, q: [i * n + j for i, j in zip(p, q)]

    def sweep(a, v):
        for pairs in _tournament(n):
            p, q = zip(*pairs)
            flat = tf.reshape(a, tf.concat([batch_shape, [n * n]], 0))
            app, aqq, apq = (tf.gather(flat, flat_index(i, j), axis=-1) for i, j in ((p, p), (q, q), (p, q)))
            rot = _rotation(_tangent(aqq - app, apq), n, pairs, x.dtype.as_numpy_dtype, batch_shape)
            a = tf.linalg.matmul(tf.linalg.matmul(rot, a, transpose_a=True), rot)
            v = tf.linalg.matmul(v, rot)
        return a, v

    if n > 1:
        _, v = _sweeps(sweep, [a, _eye_like(x, n)])
        # Each eigenvalue as the Rayleigh quotient of the symmetric input and its vector, not as the
        # rotated matrix's diagonal: that one carries the rounding of every rotation round (up to
        # sweeps * (n - 1) of them), which the quotient does not; its error is second order in the
        # vector's. The diagonal was off by 27 eps |A| on a 20 x 20 here and by 640 on an Intel Xeon.
        w = tf.reduce_sum(v * tf.linalg.matmul(a, v), axis=-2) / tf.reduce_sum(v * v, axis=-2)
    else:
        v = _eye_like(x, n)
        w = tf.reduce_sum(a, axis=-1)
    if sort_eigenvalues:
        order = _ascending_order(w)
        w, v = _permute_columns(w, order), _permute_columns(v, order)
    return v, w


def _one_sided_jacobi(b, n):
    """B (m x n, m >= n) -> (B V, V): the columns of B V are orthogonal."""
    batch_shape = tf.shape(b)[:-2]

    def sweep(b, v):
        for pairs in _tournament(n):
            p, q = (list(t) for t in zip(*pairs))
            bp, bq = tf.gather(b, p, axis=-1), tf.gather(b, q, axis=-1)
            alpha = tf.reduce_sum(bp * bp, axis=-2)
            beta = tf.reduce_sum(bq * bq, axis=-2)
            gamma = tf.reduce_sum(bp * bq, axis=-2)
            rot = _rotation(_tangent(beta - alpha, gamma), n, pairs, b.dtype.as_numpy_dtype, batch_shape)
            b, v = tf.linalg.matmul(b, rot), tf.linalg.matmul(v, rot)
        return b, v

    v = _eye_like(b, n)
    return _sweeps(sweep, [b, v]) if n > 1 else (b, v)


def _svd_invariants(full):
    def fn(x):
        u, s, vh = jnp.linalg.svd(x, full_matrices=full)
        k = s.shape[-1]
        return (s, (u[..., :, :k] * s[..., None, :]) @ vh[..., :k, :],
                jnp.swapaxes(u, -1, -2) @ u, vh @ jnp.swapaxes(vh, -1, -2))
    return fn


@lowering(lax.linalg.svd_p, limitations=[WEBGPU_LINALG,
    _size_limit("svd", _last_two, f"{JACOBI_SWEEPS} sweeps of one-sided Jacobi rounds in a while loop"),
    _subset_limitation("singular values"),
], cases=[
    case("square", _svd_invariants(True), f32(5, 5)),
    case("tall_reduced", _svd_invariants(False), f32(6, 3)),
    case("tall_full", _svd_invariants(True), f32(5, 3)),
    case("wide_reduced", _svd_invariants(False), f32(3, 5)),
    case("wide_full", _svd_invariants(True), f32(2, 4)),
    case("batched", _svd_invariants(False), f32(2, 4, 3)),
    case("values_only", lambda x: jnp.linalg.svd(x, compute_uv=False), f32(4, 6)),
    case("pinv", jnp.linalg.pinv, f32(5, 3)),
    case("lstsq", lambda a, b: jnp.linalg.lstsq(a, b)[0], f32(6, 3), f32(6, 2)),
    case("subset", lambda x: lax.linalg.svd(x, full_matrices=False, subset_by_index=(0, 1), compute_uv=False),
         f32(3, 3)),
    case("too_large", lambda x: jnp.linalg.svd(x, compute_uv=False), f32(33, 4)),
])
def lower_svd(ctx, x, *, full_matrices, compute_uv, subset_by_index=None, algorithm=None):
    aval = ctx.avals_in[0]
    m, n = aval.shape[-2:]
    _check_size("svd", m, n)
    wide = m < n
    b = _t(x) if wide else x                                            # (rows >= cols)
    rows, cols = max(m, n), min(m, n)
    b, v = _one_sided_jacobi(b, cols)
    s = tf.sqrt(tf.reduce_sum(b * b, axis=-2))                          # (..., cols)
    order = _ascending_order(s, descending=True)
    s = _permute_columns(s, order)
    if not compute_uv:
        return [s]
    b, v = _permute_columns(b, order), _permute_columns(v, order)
    safe = tf.where(s > 0, s, tf.ones_like(s))
    u = b / tf.expand_dims(safe, -2)                                    # (..., rows, cols)
    if full_matrices and rows > cols:
        # Complete U to an orthonormal basis: Householder QR of U gives Q whose last columns
        # span U's orthogonal complement.
        q, _ = _householder(u, rows, cols, full_q=True)
        u = tf.concat([u, _cols(q, cols)], axis=-1)
    if wide:  # x^T = U S V^T  =>  x = V S U^T
        u, v = v, u
    return [s, u, _t(v)]


# ----------------------------------------------------------------------------- tridiagonal_solve

def _tridiagonal(dl, d, du, b):
    # A diagonally dominant system, as LAPACK's gtsv (partial pivoting) and the Thomas algorithm
    # (none) then agree to rounding.
    return lax.linalg.tridiagonal_solve(dl.at[..., 0].set(0), jnp.abs(d) + 4, du.at[..., -1].set(0), b)


@lowering(lax.linalg.tridiagonal_solve_p, limitations=[
    _size_limit("tridiagonal_solve", lambda a: (a.ndim - 1,), "about 12 n ops"),
    Limitation(ALL_TARGETS, "perturb_singular=True", "zero pivots are not perturbed (LAPACK's gtsv "
               "perturbation is not reproduced)", param="perturb_singular",
               when=lambda eqn: eqn.params.get("perturb_singular"), workaround="keep the system non-singular"),
], cases=[
    case("system", _tridiagonal, f32(6), f32(6), f32(6), f32(6, 2)),
    case("batched", _tridiagonal, f32(2, 5), f32(2, 5), f32(2, 5), f32(2, 5, 3)),
    case("one", _tridiagonal, f32(1), f32(1), f32(1), f32(1, 1)),
    case("too_large", _tridiagonal, f32(65), f32(65), f32(65), f32(65, 1)),
    case("perturb_singular", lambda b: lax.linalg.tridiagonal_solve(
        jnp.array([0.0, 1.0, 1.0]), jnp.array([1.0, 1.0, 1.0]), jnp.array([1.0, 1.0, 0.0]), b,
        perturb_singular=True), f32(3, 1)),
])
def lower_tridiagonal_solve(ctx, dl, d, du, b, *, perturb_singular=False):
    # The Thomas algorithm (no pivoting): JAX's CPU result comes from LAPACK's gtsv, which
    # pivots; both solve the system, and agree to rounding on well-conditioned ones.
    n = ctx.avals_in[1].shape[-1]
    _check_size("tridiagonal_solve", n)
    at = lambda v, i: tf.expand_dims(_last(v, i), -1)
    c_primes, b_primes = [], []
    for i in range(n):
        row = _rows(b, i, i + 1)
        if i == 0:
            denominator = at(d, 0)
        else:
            denominator = at(d, i) - at(dl, i) * c_primes[-1]
            row = row - at(dl, i) * b_primes[-1]
        c_primes.append(at(du, i) / denominator)
        b_primes.append(row / denominator)
    x = [b_primes[-1]]
    for i in range(n - 2, -1, -1):
        x.append(b_primes[i] - c_primes[i] * x[-1])
    return tf.concat(x[::-1], axis=-2)

