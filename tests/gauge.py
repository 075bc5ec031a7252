"""Comparing a harness's outputs with JAX's where the result is not unique.

A runtime's result equal to JAX's is right. Where the mathematics leaves a choice (a gauge) a
different result is right too when it is a valid answer for the operand, the way JAX's own jax2tf
tests judge them (their ``custom_assert``s): eigenvalues as a set and eigenvectors by their residual
(eig, eigh), singular values exactly and the singular vectors by orthonormality and reconstruction
(svd: the signs, phases and full_matrices' basis of the complement are free), Q and R by Q's
orthonormality, R's triangle and QR = A (qr's signs), LU by P A = L U (lu's pivots among equal
candidates), cholesky's lower triangle only (the upper one is unspecified), approx_top_k by the
values and by the indices pointing at them (the order of ties is free), an unstable sort by its keys
and by the multiset of rows among equal keys.
"""
from __future__ import annotations

import numpy as np


def _wide(x) -> np.ndarray:
    x = np.asarray(x)
    return x.astype(np.complex128) if np.iscomplexobj(x) else x.astype(np.float64)


def _eps(dtype) -> float:
    import jax.numpy as jnp
    return float(jnp.finfo(dtype).eps)


def _mh(x: np.ndarray) -> np.ndarray:
    return np.conj(np.swapaxes(x, -1, -2))


def _close(what: str, actual, expected, tol: float, scale: float = 1.0) -> None:
    err = float(np.max(np.abs(_wide(actual) - _wide(expected)), initial=0.0))
    if not err <= tol * max(scale, 1.0):
        raise AssertionError(f"{what}: off by {err:.3g} (allowed {tol * max(scale, 1.0):.3g})")


def _norm(x) -> float:
    return float(np.max(np.abs(_wide(x)), initial=0.0))


def _orthonormal(what: str, q: np.ndarray, tol: float, columns: bool = True) -> None:
    q = _wide(q)
    gram = _mh(q) @ q if columns else q @ _mh(q)
    _close(f"{what} is not orthonormal", gram, np.broadcast_to(np.eye(gram.shape[-1]), gram.shape), tol)


def _tol(dtype, n: int) -> float:
    return 30 * max(n, 1) * _eps(dtype)


def check_cholesky(hp, actual):
    (expected,), (got,) = hp.expected, actual
    n = expected.shape[-1]
    _close("lower triangle", np.tril(_wide(got)), np.tril(_wide(expected)), _tol(hp.dtype, n), _norm(expected))


def _same_set(what, a, b, tol):
    """Each value of ``a`` is within ``tol`` of some value of ``b`` (per batch), and back."""
    a, b = _wide(a), _wide(b)
    for x, y in ((a, b), (b, a)):
        if x.size:
            gap = np.min(np.abs(x[..., :, None] - y[..., None, :]), axis=-1)
            if not np.max(gap) <= tol:
                raise AssertionError(f"{what}: a value is {np.max(gap):.3g} from all of JAX's (allowed {tol:.3g})")


def _residual(what, a, w, v, tol):
    """A v = w v for each column of v, with unit columns."""
    a, w, v = _wide(a), _wide(w), _wide(v)
    _close(f"{what} residual", a @ v - v * w[..., None, :], np.zeros(v.shape), tol, _norm(a))
    _close(f"{what} norms", np.linalg.norm(v, axis=-2), np.ones(v.shape[:-2] + v.shape[-1:]), tol)


def check_eig(hp, actual):
    operand = hp.args[0]
    n = operand.shape[-1]
    tol = _tol(hp.dtype, n) * 10
    _same_set("eigenvalues", actual[0], hp.expected[0], tol * max(_norm(operand), 1.0))
    vectors = iter(actual[1:])
    if hp.params["compute_left_eigenvectors"]:
        _residual("left eigenvectors", _mh(_wide(operand)), np.conj(_wide(actual[0])), next(vectors), tol)
    if hp.params["compute_right_eigenvectors"]:
        _residual("right eigenvectors", operand, actual[0], next(vectors), tol)


def check_eigh(hp, actual):
    operand = hp.args[0]
    tol = _tol(hp.dtype, operand.shape[-1])
    (v, w), (_, w_jax) = actual, hp.expected
    # Weyl: a backward error E moves each eigenvalue by at most ||E||_2, and a stable solver's is a
    # multiple of eps ||A||_2: the scale is the spectral norm (the largest |eigenvalue|), not the
    # largest element, which is up to n times smaller (3x on a random 20 x 20).
    _close("eigenvalues", w, w_jax, tol, _norm(w_jax))
    _residual("eigenvectors", operand, w, v, tol)
    _orthonormal("eigenvectors", v, tol)


def check_svd(hp, actual):
    operand = hp.args[0]
    tol = _tol(hp.dtype, max(operand.shape[-2:]))
    _close("singular values", actual[0], hp.expected[0], tol, _norm(hp.expected[0]))
    if not hp.params["compute_uv"]:
        assert len(actual) == 1, f"{len(actual)} outputs, JAX has 1"
        return
    s, u, vh = (_wide(x) for x in actual)
    for got, want, what in ((u, hp.expected[1], "U"), (vh, hp.expected[2], "Vh")):
        assert got.shape == want.shape, f"{what} has shape {got.shape}, JAX gives {want.shape}"
    _orthonormal("U", u, tol)
    _orthonormal("Vh", vh, tol, columns=False)
    k = s.shape[-1]
    _close("U S Vh", (u[..., :, :k] * s[..., None, :]) @ vh[..., :k, :], operand, tol, _norm(operand))


def check_qr(hp, actual):
    operand = hp.args[0]
    q, r = (_wide(x) for x in actual)
    for got, want, what in ((q, hp.expected[0], "Q"), (r, hp.expected[1], "R")):
        assert got.shape == want.shape, f"{what} has shape {got.shape}, JAX gives {want.shape}"
    tol = _tol(hp.dtype, max(operand.shape[-2:]))
    _orthonormal("Q", q, tol)
    _close("R's lower triangle", np.tril(r, -1), np.zeros(r.shape), 0.0)
    _close("Q R", q @ r, operand, tol, _norm(operand))


def _permutation(pivots: np.ndarray, m: int) -> np.ndarray:
    perm = np.broadcast_to(np.arange(m), pivots.shape[:-1] + (m,)).copy()
    for idx in np.ndindex(*pivots.shape[:-1]):
        p = perm[idx]
        for i, j in enumerate(pivots[idx]):
            p[i], p[j] = p[j], p[i]
    return perm


def check_lu(hp, actual):
    operand = _wide(hp.args[0])
    lu, pivots, perm = (np.asarray(x) for x in actual)
    m, n = operand.shape[-2:]
    k = min(m, n)
    np.testing.assert_array_equal(_permutation(pivots, m), perm, err_msg="the permutation is not the pivots'")
    lu = _wide(lu)
    lower = np.tril(lu, -1)[..., :, :k] + np.eye(m, k)
    upper = np.triu(lu)[..., :k, :]
    permuted = np.take_along_axis(operand, perm[..., :, None].astype(np.int64), axis=-2)
    _close("P A = L U", lower @ upper, permuted, _tol(hp.dtype, max(m, n)), _norm(operand))


def check_approx_top_k(hp, actual):
    operand = np.asarray(hp.args[0])
    values, indices = actual
    _close("values", values, hp.expected[0], 0.0)
    picked = np.take_along_axis(operand, np.asarray(indices).astype(np.int64), axis=-1)
    _close("the values at the indices", picked, values, 0.0)


def check_sort(hp, actual):
    if hp.params["is_stable"]:
        raise AssertionError("a stable sort has one answer")
    keys = hp.params["num_keys"]
    for i, (got, want) in enumerate(zip(actual[:keys], hp.expected[:keys])):
        np.testing.assert_array_equal(got, want, err_msg=f"sort key {i}")
    axis = hp.params["dimension"]

    def rows(outs):  # each slice's rows, in one canonical order: only their multiset counts
        flat = [np.moveaxis(np.asarray(o), axis, -1).reshape(-1, np.shape(o)[axis]) for o in outs]
        order = [np.lexsort([f[b] for f in reversed(flat)]) for b in range(flat[0].shape[0])]
        return [np.stack([f[b][order[b]] for b in range(f.shape[0])]) for f in flat]
    for i, (got, want) in enumerate(zip(rows(actual), rows(hp.expected))):
        np.testing.assert_array_equal(got, want, err_msg=f"the rows of equal keys (operand {i})")


GAUGES = {"cholesky": check_cholesky, "eig": check_eig, "eigh": check_eigh, "svd": check_svd, "qr": check_qr,
          "lu": check_lu, "approx_top_k": check_approx_top_k, "sort": check_sort}


def mismatch(hp, actual) -> str | None:
    """Why ``actual`` is not a right answer for the harness ``hp`` (None when it is)."""
    from tests.compare import assert_matches
    try:
        assert_matches(hp.expected, actual, hp.program.out_names, where=hp.name)
        return None
    except AssertionError as e:
        plain = " | ".join(line.strip() for line in str(e).splitlines() if line.strip())[:600]
    gauge = GAUGES.get(hp.group)
    if gauge is None:
        return plain
    if len(actual) != len(hp.expected):
        return f"{len(actual)} outputs, JAX has {len(hp.expected)}"
    for got, want in zip(actual, hp.expected):
        if np.shape(got) != np.shape(want):
            return f"an output has shape {np.shape(got)}, JAX gives {np.shape(want)}"
    try:
        gauge(hp, actual)
    except AssertionError as e:
        return f"{hp.group}'s own check fails: {str(e).splitlines()[0][:300]} (and JAX's result differs: {plain})"
    return None
