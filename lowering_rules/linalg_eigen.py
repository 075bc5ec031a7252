"""The real Schur decomposition (schur) and the eigenvalues of a general matrix (eig) for small
static matrices, through basic ops.

The textbook algorithm LAPACK's gees/dlahqr also runs: Householder reduction to Hessenberg form,
then double-shift QR steps on the active window [0, hi] until its last 1x1 or 2x2 block splits
off (a subdiagonal entry below eps times its diagonal neighbours is set to 0), each split 2x2
block standardized as LAPACK's dlanv2 does (upper triangular if its eigenvalues are real, equal
diagonal entries and off-diagonal entries of opposite signs if complex). One data-dependent
tf.while_loop (one WHILE op in TFLite) runs the steps, at most MAX_STEPS_PER_ROW * n of them;
each batch element keeps its own window. Each double-shift step is explicit: QR of
(H - s1)(H - s2) restricted to the window, then H <- Q^T H Q (cheap at these sizes).

The Schur form is not unique: the order in which eigenvalues appear along the diagonal follows
each implementation's deflation order, and Schur vectors may differ in sign. So the cases compare
what is unique: Z T Z^T = A, Z^T Z = I, T quasi-upper-triangular, and the eigenvalues (sorted,
on inputs with real eigenvalues). eig reads the eigenvalues off the Schur form, in its diagonal
order (LAPACK's geev does the same with its own Schur form, so the order may differ from JAX's):
its cases compare the power sums sum_i w_i^k (k = 1..n), which fix the eigenvalues whatever
their order, and sorted parts. Right eigenvectors come from inverse iteration (not LAPACK's
dtrevc back substitution), normalized as geev does (unit 2-norm, largest component real); their
phase (a sign, for real ones) may differ from JAX's, so cases compare A V - V diag(w), the norms
and |V| ordered by eigenvalue. Repeated eigenvalues give repeated vectors (where LAPACK may give
independent ones): the vectors are meant for distinct eigenvalues.
"""
from __future__ import annotations

import jax  # jax.scipy.linalg loads on first use (JAX's lazy submodule): importing it jits ~30 functions
import jax.numpy as jnp
import numpy as np
from jax import lax

from lowering_rules.core.cases import c64, case, f32
from lowering_rules.core.dtype_support import NUMERIC, dtypes
from lowering_rules.core.lazy_tensorflow import tf
from lowering_rules.core.matrices import eye_like, index, swap_last
from lowering_rules.core.registry import Limitation, add_complex, lowering
from lowering_rules.core.vocabulary import ALL_TARGETS
from lowering_rules.linalg_factor import (
    WEBGPU_LINALG,
    hessenberg_reflectors,
    householder_product,
    householder_qr,
    two_sided,
)
from lowering_rules.values.complex_values import ComplexPair, is_complex

# Measured at 8x8 (float32, batch 1, TFLite builtins, LiteRT 1 thread, a shared 2-core AMD EPYC):
# schur 268 ops, 131 KB, 5.2 ms; eig (values) 243 ops, 125 KB, 4.8 ms, export 8 s; eig with right
# eigenvectors 2092 ops, 387 KB, 5.1 ms, export 19 s.
MAX_SIZE = 8
MAX_STEPS_PER_ROW = 30   # LAPACK's dlahqr allows 30 iterations per eigenvalue too
_EPS = float(np.finfo(np.float32).eps)
# Deflation and standardization test against float32's eps: float64 would get float32 accuracy.
_FLOAT32_ITERATION = dtypes(NUMERIC - {"float64"}, missing=(
    "the QR iteration deflates at float32's eps; float64 results would have float32 accuracy"))


def _size_limit(name: str) -> Limitation:
    return Limitation(
        ALL_TARGETS, f"the matrix is larger than {MAX_SIZE}x{MAX_SIZE}",
        f"noxla's {name} runs explicit double-shift QR steps whose graph grows as n^2; beyond "
        f"{MAX_SIZE} it is too large and too slow", param="shape",
        when=lambda eqn: eqn.avals_in[0].shape[-1] > MAX_SIZE,
        workaround="compute the decomposition outside the model")


def _at(x, i, j):
    """x[..., i, j] for int32 index tensors i, j of x's batch shape (-> the batch shape), by masks."""
    n = x.shape[-1]
    row, col = tf.constant(index(n, 0)), tf.constant(index(n, 1))
    hit = tf.logical_and(tf.equal(row, i[..., None, None]), tf.equal(col, j[..., None, None]))
    return tf.reduce_sum(tf.where(hit, x, tf.zeros_like(x)), axis=[-2, -1])


def _rotation(n: int, p, c, s, dtype):
    """The identity with [[c, s], [-s, c]] at rows/columns (p, p + 1) (p: int32 of the batch shape)."""
    row, col = tf.constant(index(n, 0)), tf.constant(index(n, 1))
    p = p[..., None, None]
    c, s = c[..., None, None], s[..., None, None]
    eye = tf.cast(tf.equal(row, col), dtype)
    in_pair = lambda k: tf.logical_or(tf.equal(k, p), tf.equal(k, p + 1))
    block = tf.logical_and(in_pair(row), in_pair(col))
    value = tf.where(tf.equal(row, col), c + 0 * eye,
                     tf.where(tf.equal(row, p), s + 0 * eye, -s + 0 * eye))
    return tf.where(block, value, eye + 0 * c)


def _sign(x):
    return tf.where(x >= 0, tf.ones_like(x), -tf.ones_like(x))   # Fortran's SIGN(1, x)


def _standardize(a, b, c, d):
    """LAPACK's dlanv2: the rotation (cs, sn) standardizing the block [[a, b], [c, d]]."""
    one, zero = tf.ones_like(a), tf.zeros_like(a)
    p = 0.5 * (a - d)
    bcmax = tf.maximum(tf.abs(b), tf.abs(c))
    bcmis = tf.minimum(tf.abs(b), tf.abs(c)) * _sign(b) * _sign(c)
    scale = tf.maximum(tf.abs(p), bcmax)
    safe_scale = tf.where(scale > 0, scale, one)
    z = p / safe_scale * p + bcmax / safe_scale * bcmis
    real = z >= 4.0 * _EPS
    # Real eigenvalues: rotate the eigenvector of the eigenvalue d + z on top (upper triangular).
    zr = p + _sign(p) * tf.sqrt(scale) * tf.sqrt(tf.maximum(z, zero))
    tau = tf.sqrt(c * c + zr * zr)
    safe_tau = tf.where(tau > 0, tau, one)
    cs_real, sn_real = zr / safe_tau, c / safe_tau
    # Otherwise: the rotation making the diagonal entries equal ...
    sigma = b + c
    tau2 = tf.sqrt(sigma * sigma + 4.0 * p * p)
    safe_tau2 = tf.where(tau2 > 0, tau2, one)
    cs = tf.sqrt(0.5 * (1.0 + tf.abs(sigma) / safe_tau2))
    sn = -(p / (safe_tau2 * cs)) * _sign(sigma)
    aa, bb, cc, dd = a * cs + b * sn, -a * sn + b * cs, c * cs + d * sn, -c * sn + d * cs
    b2, c2 = bb * cs + dd * sn, -aa * sn + cc * cs
    # ... and, if the off-diagonal entries then share a sign (real eigenvalues after all), a
    # second rotation to upper triangular form.
    same_sign = tf.logical_and(tf.not_equal(b2, 0.0), tf.logical_and(tf.not_equal(c2, 0.0),
                                                                     tf.equal(_sign(b2), _sign(c2))))
    sab, sac = tf.sqrt(tf.abs(b2)), tf.sqrt(tf.abs(c2))
    tau3 = 1.0 / tf.sqrt(tf.maximum(tf.abs(b2 + c2), tf.constant(1e-30, a.dtype)))
    cs1, sn1 = sab * tau3, sac * tau3
    cs_t, sn_t = cs * cs1 - sn * sn1, cs * sn1 + sn * cs1
    cs_c, sn_c = tf.where(same_sign, cs_t, cs), tf.where(same_sign, sn_t, sn)
    # b2 = 0 (c2 != 0): swap rows and columns.
    swap = tf.logical_and(tf.equal(b2, 0.0), tf.not_equal(c2, 0.0))
    cs_c, sn_c = tf.where(swap, -sn_c, cs_c), tf.where(swap, cs_c, sn_c)
    cs_out, sn_out = tf.where(real, cs_real, cs_c), tf.where(real, sn_real, sn_c)
    # c = 0: already triangular; b = 0: swap; equal diagonal, opposite off-diagonal signs: standard.
    standard = tf.logical_and(tf.equal(a, d), tf.not_equal(_sign(b), _sign(c)))
    cs_out = tf.where(tf.equal(b, 0.0), zero, tf.where(standard, one, cs_out))
    sn_out = tf.where(tf.equal(b, 0.0), one, tf.where(standard, zero, sn_out))
    cs_out = tf.where(tf.equal(c, 0.0), one, cs_out)
    sn_out = tf.where(tf.equal(c, 0.0), zero, sn_out)
    return cs_out, sn_out


def real_schur(x, n: int, with_vectors: bool = True):
    """(T, Z) with x = Z T Z^T, T in standardized real Schur form (see the module docstring)."""
    dtype = x.dtype
    row, col = tf.constant(index(n, 0)), tf.constant(index(n, 1))
    eye = eye_like(x, n)
    if n == 1:
        return x, eye
    h, _, _, _, reflectors = two_sided(x, n, hessenberg_reflectors(n), symmetric=False)
    h = tf.where(row <= col + 1, h, tf.zeros_like(h))
    z = eye
    for v, tau in reflectors:   # Z = H_0 H_1 ... H_{n-2}
        z = z - tau * tf.linalg.matmul(z, v) * swap_last(v)
    batch = tf.shape(x)[:-2]
    hi0 = tf.fill(batch, n - 1)

    def body(step, hi, h, z):
        # Constants are made inside the loop body: TF.js's converter fails on a loop body that
        # captures constants from outside it ("Cannot read properties of undefined").
        row, col = tf.constant(index(n, 0)), tf.constant(index(n, 1))
        eye = eye_like(h, n)
        sub = tf.equal(row, col + 1)
        # Negligible subdiagonal entries become 0 (dlahqr's simple test).
        diag = tf.reduce_sum(tf.where(tf.equal(row, col), h, tf.zeros_like(h)), axis=-1)  # (..., n)
        neighbours = tf.abs(diag[..., :-1]) + tf.abs(diag[..., 1:])                      # (..., n-1)
        neighbours = tf.concat([neighbours, tf.zeros_like(neighbours[..., :1])], -1)   # by column
        small = tf.logical_and(sub, tf.abs(h) <= _EPS * tf.expand_dims(neighbours, -2))
        h = tf.where(small, tf.zeros_like(h), h)
        s1 = tf.where(hi >= 1, _at(h, hi, tf.maximum(hi - 1, 0)), tf.zeros_like(diag[..., 0]))
        s2 = tf.where(hi >= 2, _at(h, tf.maximum(hi - 1, 0), tf.maximum(hi - 2, 0)), tf.zeros_like(s1))
        active = hi >= 0
        one = tf.logical_and(active, tf.equal(s1, 0.0))
        split_above = tf.logical_or(tf.equal(hi, 1), tf.equal(s2, 0.0))
        two = tf.logical_and(tf.logical_and(active, tf.logical_not(one)), split_above)
        iterate = tf.logical_and(active, tf.logical_not(tf.logical_or(one, two)))
        p = tf.maximum(hi - 1, 0)
        a, b, c, d = _at(h, p, p), _at(h, p, hi), _at(h, hi, p), _at(h, hi, hi)
        # A split 2x2 block: standardize it.
        cs, sn = _standardize(a, b, c, d)
        g = _rotation(n, p, cs, sn, dtype)
        h_two = tf.linalg.matmul(tf.linalg.matmul(g, h), g, transpose_b=True)
        z_two = tf.linalg.matmul(z, g, transpose_b=True)
        # Exact zeros where dlanv2 makes them: below the block if its eigenvalues are real, else
        # equal diagonal entries.
        real = 0.25 * (a - d) * (a - d) + b * c >= 0
        block_sub = tf.logical_and(tf.equal(row, hi[..., None, None]), tf.equal(col, p[..., None, None]))
        h_two = tf.where(tf.logical_and(block_sub, real[..., None, None]), tf.zeros_like(h), h_two)
        mean = 0.5 * (_at(h_two, p, p) + _at(h_two, hi, hi))
        in_diag = tf.logical_and(tf.equal(row, col), tf.logical_or(tf.equal(row, p[..., None, None]),
                                                                   tf.equal(row, hi[..., None, None])))
        h_two = tf.where(tf.logical_and(in_diag, tf.logical_not(real)[..., None, None]),
                         mean[..., None, None] + tf.zeros_like(h), h_two)
        # Otherwise a double-shift QR step on the window [0, hi]: shifts are the eigenvalues of the
        # window's last 2x2 block, an exceptional shift every 10 steps without progress (dlahqr).
        trace, det = a + d, a * d - b * c
        exceptional = tf.equal(tf.math.floormod(step, 10), 9)
        ex = tf.abs(s1) + tf.abs(s2)
        trace = tf.where(exceptional, 2.0 * (d + 0.75 * ex), trace)
        det = tf.where(exceptional, (d + 0.75 * ex) ** 2 - (0.4375 * ex) ** 2, det)
        window = tf.logical_and(row <= hi[..., None, None], col <= hi[..., None, None])
        hw = tf.where(window, h, tf.zeros_like(h))
        eye_w = tf.where(window, eye, tf.zeros_like(eye))
        m = tf.linalg.matmul(hw, hw) - trace[..., None, None] * hw + det[..., None, None] * eye_w
        m = tf.where(window, m, eye)
        packed, taus = householder_qr(m, n, n, lambda w, j: w)
        q = householder_product(packed, taus, n, n, n)
        h_step = tf.linalg.matmul(tf.linalg.matmul(q, h, transpose_a=True), q)
        h_step = tf.where(row > col + 1, tf.zeros_like(h), h_step)
        z_step = tf.linalg.matmul(z, q)
        pick = lambda mask, new, old: tf.where(mask[..., None, None], new, old)
        h = pick(iterate, h_step, pick(two, h_two, h))
        z = pick(iterate, z_step, pick(two, z_two, z))
        hi = tf.where(one, hi - 1, tf.where(two, hi - 2, hi))
        return step + 1, hi, h, z

    _, _, h, z = tf.while_loop(
        lambda step, hi, *_: tf.logical_and(step < MAX_STEPS_PER_ROW * n, tf.reduce_any(hi >= 0)),
        body, [tf.constant(0), hi0, h, z])
    return h, z


def _schur_invariants(x):
    """Z T Z^T (= x), Z^T Z (= I) and T below its first subdiagonal (= 0)."""
    t, z = lax.linalg.schur(x)
    n = x.shape[-1]
    below = jnp.tril(jnp.ones((n, n), bool), -2)
    return z @ t @ jnp.swapaxes(z, -1, -2), jnp.swapaxes(z, -1, -2) @ z, jnp.where(below, t, 0.0)


def _real_spectrum(x):
    """A matrix with real, well separated eigenvalues (1, 2, ... n) and eigenvectors x + n I."""
    n = x.shape[-1]
    p = x + n * jnp.eye(n, dtype=x.dtype)
    return p @ jnp.diag(jnp.arange(1.0, n + 1, dtype=x.dtype)) @ jnp.linalg.inv(p)


@lowering(lax.linalg.schur_p, dtypes=_FLOAT32_ITERATION, limitations=[WEBGPU_LINALG,
    _size_limit("schur"),
    Limitation(ALL_TARGETS, "sort_eig_vals=True", "JAX itself does not implement the sorted Schur form "
               "(LAPACK gees' sort)", param="sort_eig_vals", when=lambda eqn: eqn.params.get("sort_eig_vals"),
               workaround="do not sort"),
], cases=[
    case("invariants", _schur_invariants, f32(4, 4)),
    case("real_eigenvalues", lambda x: jnp.sort(jnp.diagonal(jax.scipy.linalg.schur(_real_spectrum(x))[0])), f32(3, 3)),
    case("values_only", lambda x: jnp.where(jnp.tril(jnp.ones((4, 4), bool), -2), lax.linalg.schur(
        x, compute_schur_vectors=False)[0], 0.0), f32(4, 4)),
    case("batched", _schur_invariants, f32(2, 3, 3)),
    case("one", lambda x: jax.scipy.linalg.schur(x), f32(1, 1)),
    case("too_large", lambda x: jax.scipy.linalg.schur(x)[0], f32(9, 9)),
    case("sorted", lambda x: lax.linalg.schur(x, sort_eig_vals=True)[0], f32(2, 2)),
])
def lower_schur(ctx, x, *, compute_schur_vectors, sort_eig_vals=False, select_callable=None):  # lax.linalg's defaults
    # select_callable only matters with sort_eig_vals, which is refused.
    n = ctx.avals_in[0].shape[-1]
    if sort_eig_vals:
        raise ValueError("schur with sort_eig_vals=True is not lowered (JAX does not implement it)")
    if n > MAX_SIZE:
        raise ValueError(f"schur runs up to {MAX_SIZE}x{MAX_SIZE}; got {n}")
    t, z = real_schur(x, n)
    return [t, z] if compute_schur_vectors else [t]



# ----------------------------------------------------------------------------- eig (eigenvalues)

def _eigenvalues(t, n: int):
    """The eigenvalues of a standardized real Schur form, as LAPACK reads them: T[i, i] for a 1x1
    block; a +- i sqrt(|b c|) for a 2x2 block [[a, b], [c, a]], the + one first."""
    row, col = tf.constant(index(n, 0)), tf.constant(index(n, 1))
    zero = tf.zeros_like(t)
    diag = tf.reduce_sum(tf.where(tf.equal(row, col), t, zero), axis=-1)
    above = tf.reduce_sum(tf.where(tf.equal(col, row + 1), t, zero), axis=-1)    # T[i, i+1] at i
    below = tf.reduce_sum(tf.where(tf.equal(row, col + 1), t, zero), axis=-2)    # T[i+1, i] at i
    starts = tf.not_equal(below, 0.0)
    im = tf.sqrt(tf.abs(above)) * tf.sqrt(tf.abs(below))
    pad = tf.zeros_like(im[..., :1])
    im_prev = tf.concat([pad, im[..., :-1]], -1)
    ends = tf.concat([tf.zeros_like(starts[..., :1]), starts[..., :-1]], -1)
    return ComplexPair(diag, tf.where(starts, im, tf.where(ends, -im_prev, tf.zeros_like(im))))


def _solve(aug, m: int):
    """Gaussian elimination with partial pivoting on augmented systems (..., m, m + 1)."""
    row = tf.constant(index(m, 0))
    for j in range(m):
        column = aug[..., :, j]                                          # (..., m)
        size = tf.where(tf.squeeze(row, -1) >= j, tf.abs(column), -tf.ones_like(column))
        largest = tf.equal(size, tf.reduce_max(size, axis=-1, keepdims=True))
        candidates = tf.where(largest, tf.zeros_like(size, tf.int32) + tf.constant(np.arange(m, dtype=np.int32)), m)
        aug = _swap_rows(aug, j, tf.reduce_min(candidates, axis=-1), m)
        pivot = aug[..., j:j + 1, j:j + 1]
        tiny = tf.constant(float(np.finfo(np.float32).tiny), aug.dtype)
        pivot = tf.where(tf.abs(pivot) < tiny, tiny + tf.zeros_like(pivot), pivot)
        factor = tf.where(row > j, aug[..., :, j:j + 1] / pivot, tf.zeros_like(aug[..., :, j:j + 1]))
        aug = aug - factor * aug[..., j:j + 1, :]
    solution = [None] * m
    for i in reversed(range(m)):
        value = aug[..., i, m]
        for k in range(i + 1, m):
            value = value - aug[..., i, k] * solution[k]
        pivot = aug[..., i, i]
        tiny = tf.constant(float(np.finfo(np.float32).tiny), aug.dtype)
        solution[i] = value / tf.where(tf.abs(pivot) < tiny, tiny + tf.zeros_like(pivot), pivot)
    return tf.stack(solution, -1)                                         # (..., m)


def _swap_rows(x, j: int, p, m: int):
    """Rows j and p (int32, the batch shape) of x swapped, by selection."""
    i = tf.constant(index(m, 0))
    p = p[..., None, None]
    at_p = tf.equal(i, p)
    row_p = tf.reduce_sum(tf.where(at_p, x, tf.zeros_like(x)), axis=-2, keepdims=True)
    row_j = x[..., j:j + 1, :]
    return tf.where(tf.equal(i, j), row_p + tf.zeros_like(x), tf.where(at_p, row_j + tf.zeros_like(x), x))


def _eigenvectors(a, w: ComplexPair, n: int) -> ComplexPair:
    """Unit right eigenvectors (columns) for the eigenvalues w, by two steps of inverse iteration on
    the real form [[A - Re w, Im w], [-Im w, A - Re w]] of A - w I, its shift nudged off the
    eigenvalue by 1e-5 |A|; then, as LAPACK's geev, each scaled to unit 2-norm and rotated so that
    its largest component is real (here: positive)."""
    eye = tf.constant(np.eye(n, dtype=np.float32))
    scale = tf.reduce_max(tf.abs(a), axis=[-2, -1], keepdims=True)[..., None]     # (..., 1, 1, 1)
    scale = tf.where(scale > 0, scale, tf.ones_like(scale))
    re = w.re[..., :, None, None] + 1e-5 * scale                                  # (..., n, 1, 1)
    im = w.im[..., :, None, None]
    m = tf.expand_dims(a, -3) - re * eye                                            # (..., n, n, n)
    big = tf.concat([tf.concat([m, im * eye], -1), tf.concat([-im * eye, m], -1)], -2)   # (..., n, 2n, 2n)
    b = tf.ones_like(big[..., :, :1])
    for _ in range(2):
        x = _solve(tf.concat([big, b], -1), 2 * n)                                   # (..., n, 2n)
        x = x / tf.sqrt(tf.reduce_sum(x * x, axis=-1, keepdims=True))
        b = tf.expand_dims(x, -1)
    vr, vi = x[..., :n], x[..., n:]                                                 # (..., eig, comp)
    size = vr * vr + vi * vi
    largest = tf.equal(size, tf.reduce_max(size, axis=-1, keepdims=True))
    position = tf.zeros_like(size, tf.int32) + tf.constant(np.arange(n, dtype=np.int32))
    first = tf.reduce_min(tf.where(largest, position, tf.zeros_like(position) + n), axis=-1, keepdims=True)
    pick = tf.equal(position, first)   # the first largest (no cumsum: TF.js's is wrong on these ranks)
    pr = tf.reduce_sum(tf.where(pick, vr, tf.zeros_like(vr)), axis=-1, keepdims=True)
    pi = tf.reduce_sum(tf.where(pick, vi, tf.zeros_like(vi)), axis=-1, keepdims=True)
    modulus = tf.sqrt(pr * pr + pi * pi)
    cr, ci = pr / modulus, -pi / modulus                                            # conj(v_k) / |v_k|
    vr, vi = vr * cr - vi * ci, vr * ci + vi * cr
    return ComplexPair(swap_last(vr), swap_last(vi))


def _power_sums(x):
    """sum_i w_i^k for k = 1..n: they fix the eigenvalues w whatever their order."""
    w = jnp.linalg.eigvals(x)
    sums = jnp.stack([jnp.sum(w ** k, axis=-1) for k in range(1, x.shape[-1] + 1)], -1)
    return jnp.real(sums), jnp.imag(sums)


def _rotation_spectrum(x):
    """Eigenvalues 1 +- 2i and 3 (complex pair and a real one), eigenvectors from x."""
    p = x + 3 * jnp.eye(3, dtype=x.dtype)
    d = jnp.array([[1.0, 2.0, 0.0], [-2.0, 1.0, 0.0], [0.0, 0.0, 3.0]], x.dtype)
    w = jnp.linalg.eigvals(p @ d @ jnp.linalg.inv(p))
    return jnp.sort(jnp.imag(w)), jnp.sort(jnp.abs(w))


def _eigenpair_invariants(x):
    """A V - V diag(w) (= 0) and the columns' norms (= 1): they hold whatever the order and phases."""
    w, v = jnp.linalg.eig(x)
    residual = x.astype(v.dtype) @ v - v * w[..., None, :]
    return jnp.abs(residual), jnp.sqrt(jnp.sum(jnp.abs(v) ** 2, axis=-2))


def _vectors_by_eigenvalue(x):
    """|V| with columns ordered by the (real, distinct) eigenvalues: sign and order set aside."""
    w, v = jnp.linalg.eig(_real_spectrum(x))
    return jnp.abs(v)[..., jnp.argsort(jnp.real(w))]


def _vector_limitation(side: str) -> Limitation:
    param = f"compute_{side}_eigenvectors"
    return Limitation(ALL_TARGETS, f"{param}=True", f"only eigenvalues are lowered; {side} eigenvectors "
                      "(LAPACK's dtrevc back substitution in complex arithmetic) are not", param=param,
                      when=lambda eqn: eqn.params.get(param),
                      workaround="use jnp.linalg.eigvals; for a symmetric matrix, jnp.linalg.eigh gives vectors")


@lowering(lax.linalg.eig_p, dtypes=_FLOAT32_ITERATION, limitations=[WEBGPU_LINALG,
    _size_limit("eig"), _vector_limitation("left"),
    Limitation(ALL_TARGETS, "the matrix is complex", "the Schur iteration is real (complex QR steps are "
               "not lowered)", when=lambda eqn: is_complex(eqn.avals_in[0]),
               workaround="split a complex matrix M = A + iB into the real [[A, -B], [B, A]], whose "
               "eigenvalues are M's and their conjugates'"),
], cases=[
    case("power_sums", _power_sums, f32(4, 4)),
    case("real_spectrum", lambda x: jnp.sort(jnp.real(jnp.linalg.eigvals(_real_spectrum(x)))), f32(3, 3)),
    case("complex_pair", _rotation_spectrum, f32(3, 3)),
    case("batched", _power_sums, f32(2, 3, 3)),
    case("one", lambda x: jnp.real(jnp.linalg.eigvals(x)), f32(1, 1)),
    case("too_large", lambda x: jnp.real(jnp.linalg.eigvals(x)), f32(9, 9)),
    case("eigenpairs", _eigenpair_invariants, f32(4, 4)),
    case("eigenpairs_batched", _eigenpair_invariants, f32(2, 3, 3)),
    case("vectors_real_spectrum", _vectors_by_eigenvalue, f32(3, 3)),
    case("left_vectors", lambda x: jnp.real(lax.linalg.eig(x, compute_right_eigenvectors=False)[1]), f32(2, 2)),
    case("complex_matrix", lambda x: jnp.real(jnp.linalg.eigvals(x)), c64(2, 2)),
    case("empty", lambda x, y: jnp.concatenate([jnp.real(c).reshape(-1) for c in lax.linalg.eig(
        x[:, :0, :0], compute_left_eigenvectors=False)] + [y]), f32(2, 3, 3), f32(3)),
])
def lower_eig(ctx, x, *, compute_left_eigenvectors, compute_right_eigenvectors, enable_eigvec_derivs=False,
              implementation=None):  # lax.linalg.eig's defaults
    # enable_eigvec_derivs only changes JAX's derivative; implementation picks a library.
    n = ctx.avals_in[0].shape[-1]
    if compute_left_eigenvectors or isinstance(x, ComplexPair) or n > MAX_SIZE:
        raise ValueError("eig is lowered for real matrices up to 8x8, without left eigenvectors")
    if n == 0:  # empty results, reshaped from the empty input (no Schur form to build)
        values = tf.reshape(x, ctx.shape(ctx.avals_out[0].shape))
        pairs = [ComplexPair(values, values), ComplexPair(x, x)]
        return pairs if compute_right_eigenvectors else pairs[:1]
    t, _ = real_schur(x, n)
    w = _eigenvalues(t, n)
    return [w, _eigenvectors(x, w, n)] if compute_right_eigenvectors else [w]


add_complex(lax.linalg.eig_p, lower_eig)   # its result is complex whatever the input
