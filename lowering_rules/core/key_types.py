"""PRNG key types (``key<fry>``) in one place.

A typed key array of shape ``s`` has no TF dtype: it flows through the lowering as its key
data, the ``uint32`` array of shape ``s + key_shape`` that ``jax.random.key_data`` returns
(JAX's "physical" aval). The PRNG rules (``lowering_rules/prng.py``) read and write that data.
Any other primitive that sees keys (slice, squeeze, concatenate, broadcast, select, ...) only
moves whole keys around, so it is applied to each key word (``data[..., j]``) separately, with
the keys' avals replaced by uint32 ones, and the words are stacked back (``apply_per_word``).
"""
from __future__ import annotations

import jax
import numpy as np

from lowering_rules.core.jax_compat import core as jax_core
from lowering_rules.core.lazy_tensorflow import tf
from lowering_rules.core.vocabulary import is_key_dtype, physical_dtype  # noqa: F401  (key_types is where rules look)


def is_key(aval) -> bool:
    return is_key_dtype(getattr(aval, "dtype", None))


def physical_aval(aval):
    """The aval of a key array's data (uint32, shape + key_shape); other avals unchanged."""
    return jax_core.physical_aval(aval) if is_key(aval) else aval


def key_impl(aval):
    return aval.dtype._impl


def is_key_array(value) -> bool:
    return is_key_dtype(getattr(value, "dtype", None))


def key_data(value) -> np.ndarray:
    """A key array constant (closed over by the function) as its uint32 data."""
    return np.asarray(jax.random.key_data(value))


def word_aval(aval):
    """The aval one key word has: the key array's shape, uint32."""
    return jax_core.ShapedArray(aval.shape, np.dtype(np.uint32)) if is_key(aval) else aval


# Rules that read and write key data themselves (lowering_rules/prng.py).
KEY_DATA_PRIMITIVES = frozenset({"random_seed", "random_wrap", "random_unwrap", "random_split",
                                 "random_fold_in", "random_bits", "raw_bits"})


# Rules that only move whole values around, so applying them per key word (``apply_per_word``) is
# exact, and rules whose sub-programs receive the keys as they are. With KEY_DATA_PRIMITIVES, these
# are the rules that take PRNG key arrays; any other rule seeing one is rejected up front (a
# comparison, sort or max applied per word would compare words, not keys).
KEY_MOVERS = frozenset({
    "broadcast_in_dim", "concatenate", "copy", "copy_p", "device_put", "dynamic_slice",
    "dynamic_update_slice", "gather", "optimization_barrier", "pad", "reshape", "rev", "scatter",
    "select_n", "slice", "split", "squeeze", "stack", "tile", "transpose", "unstack",
    "jit", "pjit", "closed_call", "remat2", "checkpoint", "cond", "while", "scan",
    "custom_jvp_call", "custom_vjp_call", "name", "sharding_constraint", "reshard",
    "layout_constraint", "stop_gradient",
})


def takes_keys(primitive: str) -> bool:
    return primitive in KEY_DATA_PRIMITIVES or primitive in KEY_MOVERS


def moves_keys(primitive: str, params: dict, avals_in, avals_out) -> bool:
    """Whether a primitive application only moves keys around, so it is lowered per key word.

    Sub-programs (jit, cond, loops) are not: their values, keys included, flow through as they
    are, and the equations inside them get the same treatment."""
    if primitive in KEY_DATA_PRIMITIVES or not any(map(is_key, (*avals_in, *avals_out))):
        return False
    return not any(True for _ in jax_core.jaxprs_in_params(params))


def apply_per_word(lower_word, avals_in, avals_out, invals):
    """Apply a key-agnostic lowering to each word of the key operands and stack the results.

    ``lower_word(word_avals_in, word_avals_out, operands)`` lowers the primitive once; key operands
    arrive as one word of their data (uint32 of the key array's shape), other operands unchanged.
    Key results are stacked back into key data; any other result is taken from the first word."""
    words = int(np.prod(next(physical_aval(a).shape[len(a.shape):] for a in (*avals_in, *avals_out)
                             if is_key(a))))
    per_word = []
    for j in range(words):
        operands = [x[..., j] if is_key(a) else x for a, x in zip(avals_in, invals)]
        per_word.append(lower_word([word_aval(a) for a in avals_in], [word_aval(a) for a in avals_out],
                                   operands))
    return [tf.stack([outs[i] for outs in per_word], axis=-1) if is_key(a) else per_word[0][i]
            for i, a in enumerate(avals_out)]
