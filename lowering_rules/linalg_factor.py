"""LAPACK's factorization building blocks on small static matrices: geqrf, geqp3 (pivoted QR),
householder_product (orgqr), ormqr, hessenberg (gehrd), tridiagonal (sytrd), symmetric_product
and cholesky_update, through basic ops (TFLite builtins and TF.js have no linalg kernels).

- Householder reflectors follow LAPACK's dlarfg: H = I - tau v v^T with v's leading entry 1 and
  beta = -sign(alpha) |x|; a column already zero below the pivot gives tau = 0 (H = I). The
  outputs are LAPACK's packed forms (reflector tails stored below the factor), so they compare
  entry by entry with JAX's CPU results (which call LAPACK).
- Each factorization is unrolled over the (static) matrix size: every step is a handful of
  elementwise ops and two matrix products; batch dimensions ride along. Sizes are limited
  (MAX_SIZE), declared up front.
"""
from __future__ import annotations

import jax  # jax.scipy.linalg loads on first use (JAX's lazy submodule): importing it jits ~30 functions
import jax.numpy as jnp
import numpy as np
from jax import lax

from lowering_rules.core.cases import case, f32
from lowering_rules.core.dtype_support import dtypes, gap
from lowering_rules.core.jax_compat import linalg_internal as lapack_like  # geqrf and geqp3 are not public
from lowering_rules.core.lazy_tensorflow import tf
from lowering_rules.core.matrices import cols as _cols
from lowering_rules.core.matrices import eye_like as _eye_like
from lowering_rules.core.matrices import index as _index
from lowering_rules.core.matrices import rows as _rows
from lowering_rules.core.matrices import swap_last as _t
from lowering_rules.core.registry import Limitation, Target, lowering
from lowering_rules.core.vocabulary import ALL_TARGETS, webgpu_computes_wrong

# Largest matrix dimension each rule unrolls: the graph grows with n. Measured at the limit
# (float32 32x32, batch 1, TFLite builtins, LiteRT 1 thread, a shared 2-core AMD EPYC, one primitive
# per model): geqrf 1159 ops, 228 KB, 1.2 ms; geqp3 1957 ops, 340 KB, 3.2 ms; hessenberg 1244 ops,
# 242 KB, 0.8 ms; tridiagonal 1344 ops, 327 KB, 0.3 ms; householder_product 317 ops, 62 KB,
# 0.07 ms (ormqr alike); cholesky_update 833 ops, 122 KB, 0.3 ms. Export takes 3-18 s.
MAX_SIZE = {"geqrf": 32, "geqp3": 32, "householder_product": 32, "ormqr": 32, "hessenberg": 32,
            "tridiagonal": 32, "cholesky_update": 32}


def _size_limit(name: str, cost: str, operand: int = 0) -> Limitation:
    limit = MAX_SIZE[name]
    return Limitation(
        ALL_TARGETS, f"a matrix dimension is larger than {limit}",
        f"noxla unrolls {name} over the matrix size ({cost}); beyond {limit} the graph grows too large",
        when=lambda eqn: max(eqn.avals_in[operand].shape[-2:], default=0) > limit,
        param="shape", workaround="split the problem into smaller matrices, or compute it outside the model")


def _check_size(name: str, *sizes: int) -> None:
    if max(sizes, default=0) > MAX_SIZE[name]:
        raise ValueError(f"{name} is unrolled up to size {MAX_SIZE[name]}; got {max(sizes)}")


def _masks(m: int, n: int):
    return tf.constant(_index(m, 0)), tf.constant(_index(n, 1))


# ----------------------------------------------------------------------------- reflectors

def _larfg(column, pivot, tail):
    """dlarfg on a column (..., m, 1): the reflector taking the entry at ``pivot`` (a row mask with
    one true row) and the entries at ``tail`` (a row mask) to (beta, 0, ...). Returns v (1 at the
    pivot, 0 outside pivot and tail), tau and the pivot's new value, each (..., 1, 1) but v."""
    zero = tf.zeros_like(column)
    alpha = tf.reduce_sum(tf.where(pivot, column, zero), axis=-2, keepdims=True)
    below = tf.where(tail, column, zero)
    xnorm = tf.sqrt(tf.reduce_sum(below * below, axis=-2, keepdims=True))
    norm = tf.sqrt(alpha * alpha + xnorm * xnorm)
    beta = tf.where(alpha >= 0, -norm, norm)              # Fortran's SIGN: alpha = 0 counts as +
    trivial = tf.equal(xnorm, 0)                           # H = I, as dlarfg
    ones, zeros = tf.ones_like(beta), tf.zeros_like(beta)
    tau = tf.where(trivial, zeros, (beta - alpha) / tf.where(trivial, ones, beta))
    scale = tf.where(trivial, zeros, 1.0 / tf.where(trivial, ones, alpha - beta))
    v = tf.where(pivot, tf.ones_like(column), below * scale)
    return v, tau, tf.where(trivial, alpha, beta)


def _apply_left(x, v, tau):
    """H x = x - tau v (v^T x)."""
    return x - tau * v * tf.linalg.matmul(v, x, transpose_a=True)


def _apply_right(x, v, tau):
    """x H = x - tau (x v) v^T."""
    return x - tau * tf.linalg.matmul(x, v) * _t(v)


def _stored_reflector(a, taus, j: int, m: int):
    """Reflector j of a packed factorization: v = (0.., 1 at row j, a[j+1:, j]) and its tau."""
    row = tf.constant(_index(m, 0))
    column = _cols(a, j, j + 1)
    v = tf.where(tf.equal(row, j), tf.ones_like(column), tf.where(row > j, column, tf.zeros_like(column)))
    tau = tf.expand_dims(taus[..., j:j + 1], -1)
    return v, tau


def householder_qr(w, m: int, n: int, steps):
    """Householder QR of w's columns in the order ``steps`` yields them; ``steps(w, j)`` may swap
    columns first (pivoting) and returns the new w. Returns the packed factor and the taus."""
    row, col = _masks(m, n)
    stored, taus = tf.zeros_like(w), []
    for j in range(min(m, n)):
        w = steps(w, j)
        v, tau, top = _larfg(_cols(w, j, j + 1), tf.equal(row, j), row > j)
        w = _apply_left(w, v, tau)
        # Column j is exactly (top, 0, ...) from row j down: store it so, and keep the reflector.
        at_j = tf.equal(col, j)
        column = tf.where(tf.equal(row, j), top, tf.zeros_like(top)) + tf.zeros_like(w)
        w = tf.where(tf.logical_and(at_j, row >= j), column, w)
        stored = tf.where(tf.logical_and(at_j, row > j), v + tf.zeros_like(w), stored)
        taus.append(tau[..., 0])
    return tf.where(row <= col, w, stored), tf.concat(taus, axis=-1)


# ----------------------------------------------------------------------------- geqrf

def _raw_qr(x):
    a, taus = jnp.linalg.qr(x, mode="raw")
    return a, taus


# Measured (tests/browser_sweep.py, LiteRT.js 2.5.3 in headless Chromium): batched cholesky, lu, qr, svd,
# eig, schur, hessenberg, tridiagonal, householder_product, geqrf, ormqr, and geqp3, lu's slogdet, an
# other-triangle triangular_solve, entries off by O(1) on WebGPU (eigh and svd fail to compile there);
# LiteRT.js's wasm matches JAX. Not found op by op.
WEBGPU_LINALG = webgpu_computes_wrong("any matrix decomposition or triangular solve",
                                      "entries off by O(1), batched matrices most often", "dtype")


@lowering(lapack_like.geqrf_p, limitations=[WEBGPU_LINALG, _size_limit("geqrf", "about 15 min(m, n) ops")], cases=[
    case("qr_raw", _raw_qr, f32(4, 3)),
    case("wide", lambda x: lapack_like.geqrf(x), f32(2, 4)),
    case("batched", lambda x: lapack_like.geqrf(x), f32(2, 3, 3)),
    case("zero_column", lambda x: lapack_like.geqrf(x), np.array([[0, 1], [0, 2], [0, 3]], np.float32)),
    case("slogdet_qr", lambda x: tuple(jnp.linalg.slogdet(x, method="qr")), f32(4, 4)),
    case("too_large", lambda x: lapack_like.geqrf(x), f32(33, 2)),
])
def lower_geqrf(ctx, x):
    m, n = ctx.avals_in[0].shape[-2:]
    _check_size("geqrf", m, n)
    return list(householder_qr(x, m, n, lambda w, j: w))


# ----------------------------------------------------------------------------- geqp3

def _swap_columns(x, perm, j: int, p, n: int):
    """Columns j and p (an int32 tensor (..., 1) per batch) of x and entries of perm swapped, by a
    product with the transposition matrix (TF.js's wasm backend gathers with batch_dims wrongly)."""
    i, k = _index(n, 0), _index(n, 1)
    p = tf.expand_dims(p, -1)                                          # (..., 1, 1)
    ii, kk = tf.constant(i), tf.constant(k)
    swap = tf.logical_or(tf.logical_and(tf.equal(ii, j), tf.equal(kk, p)),
                         tf.logical_and(tf.equal(ii, p), tf.equal(kk, j)))
    keep = tf.logical_and(tf.constant(i == k), tf.logical_and(tf.not_equal(ii, j), tf.not_equal(ii, p)))
    s = tf.cast(tf.logical_or(swap, keep), x.dtype)                   # (..., n, n)
    perm = tf.reduce_sum(tf.cast(tf.logical_or(swap, keep), tf.int32) * tf.expand_dims(perm, -1), axis=-2)
    return tf.linalg.matmul(x, s), perm


def _pivoted_qr(x, jpvt):
    a, p, taus = lapack_like.geqp3(x, jpvt)
    return a, p, taus


def _pivoted_multiply(a, c):
    cq, r, p = jax.scipy.linalg.qr_multiply(a, c, pivoting=True)
    return cq, r, p


@lowering(lapack_like.geqp3_p, limitations=[WEBGPU_LINALG,
    _size_limit("geqp3", "about 25 n ops, each step a column swap as a product with an n x n matrix")], cases=[
    case("scipy_qr_multiply", _pivoted_multiply, f32(4, 3), f32(2, 4)),
    case("free_columns", _pivoted_qr, f32(3, 4), np.zeros(4, np.int32)),
    # Nonzero jpvt entries fix those columns in front (LAPACK's dgeqp3), the rest are pivoted.
    case("fixed_columns", _pivoted_qr, f32(2, 4, 4), np.array([[0, 1, 0, 1], [0, 0, 0, 3]], np.int32)),
    case("too_large", _pivoted_qr, f32(33, 2), np.zeros(2, np.int32)),
])
def lower_geqp3(ctx, x, jpvt, *, use_magma=None):
    # use_magma picks a GPU library: meaningless here.
    m, n = ctx.avals_in[0].shape[-2:]
    _check_size("geqp3", m, n)
    return list(geqp3(x, jpvt, m, n))


def geqp3(x, jpvt, m: int, n: int):
    """LAPACK's dgeqp3: (packed factor, 1-based column pivots, taus). Pivot choice: dlaqp2 takes the
    first column of largest remaining norm; it downdates the norms, this recomputes them, so
    columns whose remaining norms tie to rounding may be taken in another order."""
    row, col = _masks(m, n)
    perm = tf.zeros_like(jpvt) + tf.constant(np.arange(n, dtype=np.int32))
    fixed_count = tf.zeros_like(jpvt[..., :1])                        # (..., 1)
    for j in range(n):  # nonzero jpvt entries: those columns move to the front, by swaps
        fixed = tf.not_equal(jpvt[..., j:j + 1], 0)
        x, perm = _swap_columns(x, perm, j, tf.where(fixed, fixed_count, tf.zeros_like(fixed_count) + j), n)
        fixed_count = fixed_count + tf.cast(fixed, fixed_count.dtype)
    state = {"perm": perm}

    def pivot(w, j):
        remaining = tf.where(row >= j, w, tf.zeros_like(w))
        norms = tf.reduce_sum(remaining * remaining, axis=-2, keepdims=True)       # (..., 1, n)
        norms = tf.where(col >= j, norms, -tf.ones_like(norms))
        largest = tf.equal(norms, tf.reduce_max(norms, axis=-1, keepdims=True))
        index = tf.constant(_index(n, 1)) + tf.zeros_like(norms, tf.int32)
        first = tf.reduce_min(tf.where(largest, index, tf.zeros_like(index) + n), axis=-1)   # (..., 1)
        p = tf.where(fixed_count > j, tf.zeros_like(first) + j, first)   # fixed columns stay
        w, state["perm"] = _swap_columns(w, state["perm"], j, p, n)
        return w

    a, taus = householder_qr(x, m, n, pivot)
    return a, state["perm"] + 1, taus   # LAPACK's pivots count from 1


def pivoted_qr(x, m: int, n: int, full_matrices: bool):
    """qr with pivoting=True, as JAX's own lowering: geqp3, then orgqr on the reflectors."""
    jpvt = tf.zeros(tf.concat([tf.shape(x)[:-2], [n]], 0), tf.int32)
    r, p, taus = geqp3(x, jpvt, m, n)
    k = min(m, n)
    if m < n:
        q = householder_product(_cols(r, 0, m), taus, m, m, k)
    elif full_matrices:
        q = householder_product(tf.concat([r, tf.zeros_like(_cols(r, 0, m - n))], -1), taus, m, m, k)
    else:
        q, r = householder_product(r, taus, m, n, k), _rows(r, 0, n)
    row, col = _masks(min(m, n) if not full_matrices or m < n else m, n)
    return [q, tf.where(row <= col, r, tf.zeros_like(r)), p - 1]


# ----------------------------------------------------------------------------- orgqr / ormqr

@lowering(lax.linalg.householder_product_p, limitations=[WEBGPU_LINALG,
    _size_limit("householder_product", "about 8 k ops")], cases=[
    case("from_geqrf", lambda x: lax.linalg.householder_product(*lapack_like.geqrf(x)), f32(4, 3)),
    case("fewer_taus", lambda a, t: lax.linalg.householder_product(a, t), f32(4, 4), f32(2)),
    case("batched", lambda x: lax.linalg.householder_product(*lapack_like.geqrf(x)), f32(2, 3, 3)),
    case("hessenberg_q", lambda x: jax.scipy.linalg.hessenberg(x, calc_q=True), f32(4, 4)),
    case("too_large", lambda a, t: lax.linalg.householder_product(a, t), f32(33, 2), f32(2)),
])
def lower_householder_product(ctx, a, taus):
    m, n = ctx.avals_in[0].shape[-2:]
    _check_size("householder_product", m, n)
    return householder_product(a, taus, m, n, ctx.avals_in[1].shape[-1])


def householder_product(a, taus, m: int, n: int, k: int):
    """LAPACK's orgqr: the first n columns of H_0 ... H_{k-1}, innermost applied first."""
    q = _cols(_eye_like(a, m), 0, n)
    for j in reversed(range(k)):
        v, tau = _stored_reflector(a, taus, j, m)
        q = _apply_left(q, v, tau)
    return q


def _ormqr(left, transpose):
    return lambda x, c: lax.linalg.ormqr(*lapack_like.geqrf(x), c, left=left, transpose=transpose)


@lowering(lax.linalg.ormqr_p, limitations=[WEBGPU_LINALG, _size_limit("ormqr", "about 8 k ops")], cases=[
    case("q_c", _ormqr(True, False), f32(4, 3), f32(4, 2)),
    case("qt_c", _ormqr(True, True), f32(3, 3), f32(3, 2)),
    case("c_q", _ormqr(False, False), f32(4, 2), f32(3, 4)),
    case("c_qt_batched", _ormqr(False, True), f32(2, 3, 3), f32(2, 2, 3)),
    case("scipy_qr_multiply", lambda a, c: jax.scipy.linalg.qr_multiply(a, c)[0], f32(3, 3), f32(3)),
    case("too_large", _ormqr(True, False), f32(33, 2), f32(33, 1)),
])
def lower_ormqr(ctx, a, taus, c, *, left, transpose):
    m = ctx.avals_in[0].shape[-2]
    k = ctx.avals_in[1].shape[-1]
    _check_size("ormqr", m)
    # Q = H_0 ... H_{k-1}: Q C and C Q^T apply H_{k-1} first; Q^T C and C Q apply H_0 first.
    order = range(k) if left == transpose else reversed(range(k))
    for j in order:
        v, tau = _stored_reflector(a, taus, j, m)
        c = _apply_left(c, v, tau) if left else _apply_right(c, v, tau)
    return c


# ----------------------------------------------------------------------------- hessenberg / tridiagonal

def _set_column(w, row, col, c: int, pivot_row: int, tail, top):
    """w with column c set to ``top`` at the pivot row and 0 on the tail rows (pass row and col
    swapped to set row c)."""
    at_c = tf.equal(col, c)
    w = tf.where(tf.logical_and(at_c, tail(row)), tf.zeros_like(w), w)
    return tf.where(tf.logical_and(at_c, tf.equal(row, pivot_row)), top + tf.zeros_like(w), w)


def two_sided(w, n: int, reflect, symmetric: bool):
    """Reductions H_j ... w ... H_j on both sides (gehrd, sytrd): ``reflect(j)`` gives reflector j's
    (column, pivot row, tail mask). Returns the reduced matrix, the stored tails, taus, tops (the
    new pivot values) and the reflectors as (v, tau) pairs."""
    row, col = _masks(n, n)
    stored, taus, tops, reflectors = tf.zeros_like(w), [], [], []
    for c, pivot_row, tail in reflect:
        v, tau, top = _larfg(_cols(w, c, c + 1), tf.equal(row, pivot_row), tail(row))
        w = _apply_right(_apply_left(w, v, tau), v, tau)
        # Column c is exactly top at the pivot and 0 on the tail (and so is row c if symmetric).
        w = _set_column(w, row, col, c, pivot_row, tail, top)
        if symmetric:
            w = _set_column(w, col, row, c, pivot_row, tail, top)
        stored = tf.where(tf.logical_and(tf.equal(col, c), tail(row)), v + tf.zeros_like(w), stored)
        taus.append(tau[..., 0])
        tops.append(top[..., 0])
        reflectors.append((v, tau))
    return w, stored, taus, tops, reflectors


def hessenberg_reflectors(n: int):
    """Reflector j annihilates column j below row j + 1 (the last one, j = n - 2, is H = I)."""
    return [(j, j + 1, lambda r, j=j: r > j + 1) for j in range(n - 1)]


def _hessenberg_parts(x):
    a, taus = lax.linalg.hessenberg(x)
    return a, taus


@lowering(lax.linalg.hessenberg_p, limitations=[WEBGPU_LINALG, _size_limit("hessenberg", "about 20 n ops")], cases=[
    case("packed", _hessenberg_parts, f32(4, 4)),
    case("batched", _hessenberg_parts, f32(2, 3, 3)),
    case("scipy_hessenberg", lambda x: jax.scipy.linalg.hessenberg(x), f32(4, 4)),
    case("one", _hessenberg_parts, f32(1, 1)),
    case("already_hessenberg", _hessenberg_parts, np.triu(np.arange(1, 10, dtype=np.float32).reshape(3, 3), -1)),
    case("too_large", _hessenberg_parts, f32(33, 33)),
])
def lower_hessenberg(ctx, x):
    n = ctx.avals_in[0].shape[-1]
    _check_size("hessenberg", n)
    row, col = _masks(n, n)
    w, stored, taus, _, _ = two_sided(x, n, hessenberg_reflectors(n), symmetric=False)
    taus = tf.concat(taus, axis=-1) if taus else _cols(x, 0, 0)[..., 0, :]    # n = 1: no reflectors
    return [tf.where(row <= col + 1, w, stored), taus]


def _tridiagonal_parts(lower):
    def fn(x):
        a, d, e, taus = lax.linalg.tridiagonal(x, lower=lower)
        return a, d, e, taus
    return fn


@lowering(lax.linalg.tridiagonal_p, limitations=[WEBGPU_LINALG, _size_limit("tridiagonal", "about 25 n ops")], cases=[
    case("lower", _tridiagonal_parts(True), f32(4, 4)),
    case("upper", _tridiagonal_parts(False), f32(4, 4)),
    case("batched", _tridiagonal_parts(True), f32(2, 3, 3)),
    case("one", _tridiagonal_parts(False), f32(1, 1)),
    case("too_large", _tridiagonal_parts(True), f32(33, 33)),
])
def lower_tridiagonal(ctx, x, *, lower=True):  # lax.linalg.tridiagonal's default
    # LAPACK's sytrd reads only the named triangle and leaves the other one as it was.
    n = ctx.avals_in[0].shape[-1]
    _check_size("tridiagonal", n)
    row, col = _masks(n, n)
    triangle = tf.where(row >= col if lower else row <= col, x, tf.zeros_like(x))
    w = triangle + _t(tf.where(tf.equal(row, col), tf.zeros_like(x), triangle))
    if lower:   # as hessenberg: first to last
        reflect = hessenberg_reflectors(n)
    else:       # reflector i annihilates column i + 1 above row i, last to first
        reflect = [(i + 1, i, lambda r, i=i: r < i) for i in reversed(range(n - 1))]
    w, stored, taus, tops, _ = two_sided(w, n, reflect, symmetric=True)
    if not lower:
        taus, tops = taus[::-1], tops[::-1]
    offset = row - col if lower else col - row
    band = tf.logical_and(offset >= 0, offset <= 1)        # the diagonal and the named off-diagonal
    a = tf.where(band, w, tf.where(row > col if lower else row < col, stored, x))
    d = tf.reduce_sum(tf.where(tf.equal(row, col), w, tf.zeros_like(w)), axis=-1)
    if n == 1:
        return [a, d, tf.zeros_like(d[..., :0]), tf.zeros_like(d[..., :0])]
    return [a, d, tf.concat(tops, axis=-1), tf.concat(taus, axis=-1)]


# ----------------------------------------------------------------------------- symmetric_product

# A A^T reads A twice, which LiteRT.js 2.5.3's WebGPU delegate cannot build: the .tflite for WebGPU
# copies A for the second read (noxla.writers.tflite.flatbuffer.webgpu.distinct_operands).
@lowering(lax.linalg.symmetric_product_p, dtypes=dtypes(gaps=[gap((Target.TFLITE,), {"float16"}, (
    "the product is a float16 MatMul, which TFLite's builtins have no kernel for"))]), cases=[
    case("alpha_beta", lambda a, c: lax.linalg.symmetric_product(a, c, alpha=0.5, beta=2.0), f32(3, 2), f32(3, 3)),
    case("symmetrized_batched", lambda a, c: lax.linalg.symmetric_product(a, c, symmetrize_output=True),
         f32(2, 3, 4), f32(2, 3, 3)),
])
def lower_symmetric_product(ctx, a, c, *, alpha=1.0, beta=0.0):  # lax.linalg's defaults
    # JAX's CPU lowering: alpha A A^T + beta C, the whole matrix (not only the lower triangle).
    return alpha * tf.linalg.matmul(a, a, transpose_b=True) + beta * c


# ----------------------------------------------------------------------------- cholesky_update

def _update(r, w):
    a = r @ r.T + 4 * jnp.eye(r.shape[0])
    return lax.linalg.cholesky_update(jnp.linalg.cholesky(a).T, w)


@lowering(lax.linalg.cholesky_update_p, limitations=[_size_limit("cholesky_update", "about 16 n ops")], cases=[
    case("rank_one", _update, f32(4, 4), f32(4)),
    case("zero_entries", _update, f32(3, 3), np.array([0.0, 1.5, 0.0], np.float32)),
    case("too_large", _update, f32(33, 33), f32(33)),
])
def lower_cholesky_update(ctx, r, w):
    # JAX's own algorithm (its CPU lowering): a Givens rotation per row folds w into R.
    n = ctx.avals_in[0].shape[-1]
    _check_size("cholesky_update", n)
    z = tf.expand_dims(w, 0)                                          # (1, n)
    rows = [_rows(r, k, k + 1) for k in range(n)]
    for k in range(n):
        x, y = rows[k][:, k:k + 1], z[:, k:k + 1]
        larger = tf.where(tf.abs(x) > tf.abs(y), tf.abs(x), tf.abs(y))
        nonzero = tf.not_equal(y, 0)
        safe = tf.where(nonzero, larger, tf.ones_like(larger))
        xs, ys = x / safe, y / safe
        rh = 1.0 / tf.sqrt(xs * xs + ys * ys)
        c = tf.where(nonzero, xs * rh, tf.ones_like(x))
        s = tf.where(nonzero, -ys * rh, tf.zeros_like(y))
        rows[k], z = c * rows[k] - s * z, c * z + s * rows[k]
    return tf.concat(rows, axis=0)
