"""bfloat16/float16 cumsum, cumprod and cumlogsumexp rounded where JAX on CPU rounds them.

JAX lowers these scans to one ``reduce_window`` spanning the axis (``cumred_reduce_window_impl``
in jax/_src/lax/control_flow/loops.py). XLA's CPU compiler rewrites a scan longer than 16
(``ReduceWindowRewriter``, base length 16) into a scan inside each block of 16 (the axis padded
at its end with the monoid's identity), a scan of the block totals (rewritten the same way while
longer than 16) and one combine of each element with the total of the blocks before it (after it,
for a reverse scan). A window folds its elements from the lowest index up: output i of a forward
scan folds x[0..i] of its block, output i of a reverse scan folds x[i..] of its block, left to
right. In half precision every combine is computed in float32 and rounded to the dtype, and so is
each op inside the combine (logaddexp's subtract, exp, log1p and add).

Measured (JAX 0.10.2 on CPU): this order gives JAX's results bit for bit, bfloat16 and float16,
forward and reverse, lengths 3 to 1000, NaN and infinities included. Computing in float32 and
rounding once does not: at length 1000 (uniform in [-3, 3]) 3160 of 4000 bfloat16 cumsum elements
differ from JAX's, at length 16 already 26 of 64 (up to 9 units in the last place).

What the tests promise: cumsum and cumprod exactly; cumlogsumexp within one unit in the last place
(``HALF_TRANSCENDENTAL_RTOL``), since TF's (XNNPACK's, TF.js's) float32 exp and log may differ from
XLA's by a float32 ulp, which moves the rounded result where it falls on a tie (not seen yet).
A symbolic axis length keeps the float32 scan (rounded once: within the dtype's default tolerance).

Cost, bfloat16/float16 only (float32 and the integers keep their one-op scans): a window is 15
combines whatever the length, so a scan of length 17 to 256 is two windows; measured (TF ops, not
counting constants) for length 17 / 256: cumsum 67 / 108 forward, 127 / 224 reverse;
cumlogsumexp 441 / 790 forward, 508 / 906 reverse.
"""
from __future__ import annotations

from lowering_rules.core.helpers import HALF_FLOATS, infinity_like, size_vector
from lowering_rules.core.lazy_tensorflow import tf

BLOCK = 16  # XLA CPU's ReduceWindowRewriter base length

# What a half-float cumlogsumexp promises: one unit in the last place of float16 (TF's and
# XLA's float32 exp/log may round a result on either side of a tie); cumsum and cumprod are exact.
HALF_TRANSCENDENTAL_RTOL = 2.0 ** -10


def rounded_to(dtype):
    """float32 -> float32 rounded to ``dtype`` (a half float), as XLA rounds each half-float op."""
    return lambda x: tf.cast(tf.cast(x, dtype), tf.float32)


def _add(r):
    return lambda a, b: r(a + b)


def _mul(r):
    return lambda a, b: r(a * b)


def _log1p_unit(e):
    """log1p(e) for e in [0, 1] (NaN lanes are discarded by the caller): Goldberg's log(u) * e / (u - 1)
    with u = 1 + e, which cancels the rounding of 1 + e. u is finite, so plain Log is right in every
    runtime; float_math.log1p's guards for inf and NaN would double the ops of each combine."""
    u = 1.0 + e
    d = u - 1.0
    zero = tf.equal(d, 0.0)
    return tf.where(zero, e, tf.math.log(u) * (e / tf.where(zero, tf.ones_like(d), d)))


def _logaddexp(r):
    # JAX's logaddexp (lax/other.py), one rounding per op: NaN or same-signed infinities give a + b.
    def combine(a, b):
        delta = r(a - b)
        tail = r(_log1p_unit(r(tf.exp(-tf.abs(delta)))))
        return tf.where(tf.math.not_equal(delta, delta), a + b, r(tf.maximum(a, b) + tail))
    return combine


COMBINES = {"cumsum": _add, "cumprod": _mul, "cumlogsumexp": _logaddexp}


def applies(name: str, x, n) -> bool:
    """Whether ``half_scan`` computes this scan: a half-float operand, a static axis length."""
    return name in COMBINES and x.dtype in HALF_FLOATS and isinstance(n, int) and n > 0


def _window(x, m: int, reverse: bool, combine):
    """A scan of length m <= BLOCK along the last axis, each output folded as XLA's window does."""
    if m == 1:
        return x
    if not reverse:  # output i folds x[0..i]: one running fold
        outs = tf.unstack(x, m, axis=-1)
        for k in range(1, m):
            outs[k] = combine(outs[k - 1], outs[k])
        return tf.stack(outs, axis=-1)
    acc = x  # output i folds x[i], x[i+1], ...: step k adds x[i+k] to every output that has one
    for k in range(1, m):
        acc = tf.concat([combine(acc[..., :m - k], x[..., k:]), acc[..., m - k:]], axis=-1)
    return acc


def _scan(x, lead: list, n: int, reverse: bool, combine, identity: str):
    if n <= BLOCK:
        return _window(x, n, reverse, combine)
    cols = -(-n // BLOCK)
    if cols * BLOCK != n:
        x = tf.pad(x, [[0, 0]] * len(lead) + [[0, cols * BLOCK - n]])
        if reverse and identity != "zero":  # the padding joins the last block's reverse folds
            pad = tf.constant([False] * n + [True] * (cols * BLOCK - n))
            x = tf.where(pad, tf.ones_like(x) if identity == "one" else -infinity_like(x), x)
        # (a forward scan's padding reaches only outputs that are sliced off)
    tiles = _window(tf.reshape(x, size_vector([*lead, cols, BLOCK])), BLOCK, reverse, combine)
    if not reverse:  # block b > 0 combines the inclusive scan of the totals of blocks < b
        totals = tf.expand_dims(_scan(tiles[..., BLOCK - 1], lead, cols, reverse, combine, identity), -1)
        out = tf.concat([tiles[..., :1, :], combine(tiles[..., 1:, :], totals[..., :cols - 1, :])], axis=-2)
    else:  # block b < last combines the reverse scan of the totals of blocks > b
        totals = tf.expand_dims(_scan(tiles[..., 0], lead, cols, reverse, combine, identity), -1)
        out = tf.concat([combine(tiles[..., :cols - 1, :], totals[..., 1:, :]), tiles[..., cols - 1:, :]], axis=-2)
    # (XLA also combines the first (last) block with the identity: the same values, but for -0.0 + 0.0)
    return tf.reshape(out, size_vector([*lead, cols * BLOCK]))[..., :n]


_IDENTITY = {"cumsum": "zero", "cumprod": "one", "cumlogsumexp": "-inf"}


def half_scan(ctx, name: str, x, axis: int, reverse: bool):
    """``name`` (cumsum, cumprod or cumlogsumexp) of half-float ``x`` along ``axis`` (static length)."""
    aval = ctx.avals_in[0]
    rank = aval.ndim
    perm = [d for d in range(rank) if d != axis] + [axis]
    work = tf.cast(x, tf.float32)
    if axis != rank - 1:
        work = tf.transpose(work, perm)
    lead = [ctx.dim(aval.shape[d]) for d in perm[:-1]]
    out = _scan(work, lead, ctx.dim(aval.shape[axis]), reverse, COMBINES[name](rounded_to(x.dtype)), _IDENTITY[name])
    if axis != rank - 1:
        out = tf.transpose(out, [perm.index(d) for d in range(rank)])
    return tf.cast(out, x.dtype)
