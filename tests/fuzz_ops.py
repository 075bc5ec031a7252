"""The fuzzer's second half (tests/fuzz.py draws from it too): elementwise ops and their chains,
reductions and scans, shape ops and conversions, and control flow whose bodies close over
constants.

Programs that take NaN, infinities or signed zeros run in strict mode, whose lowerings promise
JAX's IEEE results (the default's fused ops may differ there, as each rule declares); the others
run in the default mode, the one users get.
"""
from __future__ import annotations

import numpy as np

from tests.fuzz import FLOATS, INTS, Program, shapes, values

# The ops per operand kind, by lax name. Each program chains one to three of them.
FLOAT_UNARY = ("abs", "neg", "sign", "floor", "ceil", "round", "round_even", "exp", "exp2", "expm1", "log",
               "log1p", "tanh", "logistic", "sqrt", "rsqrt", "cbrt", "sin", "cos", "tan", "asin", "acos",
               "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "erf", "erfc", "erf_inv", "lgamma",
               "digamma", "square", "integer_pow")
FLOAT_BINARY = ("add", "sub", "mul", "div", "rem", "pow", "max", "min", "atan2", "nextafter")
INT_UNARY = ("abs", "neg", "sign", "not", "population_count", "clz", "square", "integer_pow")
INT_BINARY = ("add", "sub", "mul", "div", "rem", "max", "min", "and", "or", "xor", "shift_left",
              "shift_right_arithmetic", "shift_right_logical")
BOOL_UNARY = ("not",)
BOOL_BINARY = ("and", "or", "xor", "max", "min")
COMPARISONS = ("eq", "ne", "lt", "le", "gt", "ge")
# The correctly rounded float ops. A chain takes at most one other (transcendental) op, as its last:
# after one, every result is within a tolerance of JAX's, and another op, a comparison or a
# sign would magnify that tolerance past any bound.
EXACT_FLOAT = ("abs", "neg", "sign", "floor", "ceil", "round", "round_even", "square", "integer_pow",
               "add", "sub", "mul", "div", "rem", "max", "min", "nextafter", "sqrt")


LAX_NAMES = {"and": "bitwise_and", "or": "bitwise_or", "xor": "bitwise_xor", "not": "bitwise_not"}


def _unary(lax, name: str, draw, st, negative_powers: bool):
    if name == "round":
        return lambda x: lax.round(x, lax.RoundingMethod.AWAY_FROM_ZERO)
    if name == "round_even":
        return lambda x: lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN)
    if name == "integer_pow":
        n = draw(st.integers(-2 if negative_powers else 0, 4))
        return lambda x: lax.integer_pow(x, n)
    return getattr(lax, LAX_NAMES.get(name, name))


def strategies():
    from hypothesis import strategies as st

    seeds = st.integers(0, 2 ** 31 - 1)

    @st.composite
    def elementwise(draw):
        """A chain of one to three elementwise ops on two broadcast operands; the last may compare."""
        from jax import lax
        kind = draw(st.sampled_from(["float", "float", "int", "bool"]))
        dtype = draw(st.sampled_from({"float": FLOATS, "int": INTS + ("uint32",), "bool": ("bool",)}[kind]))
        unary, binary = {"float": (FLOAT_UNARY, FLOAT_BINARY), "int": (INT_UNARY, INT_BINARY),
                         "bool": (BOOL_UNARY, BOOL_BINARY)}[kind]
        exact = [o for o in unary + binary if kind != "float" or o in EXACT_FLOAT]
        names = [draw(st.sampled_from(exact)) for _ in range(draw(st.integers(0, 2)))]
        inexact = [o for o in unary + binary if o not in exact]
        if inexact and (not names or draw(st.booleans())):
            names.append(draw(st.sampled_from(inexact)))
        elif kind != "bool" and draw(st.booleans()):  # ops that end a chain: their result is bool
            names.append(draw(st.sampled_from(COMPARISONS + (("is_finite",) if kind == "float" else ()))))
        if not names:
            names.append(draw(st.sampled_from(exact)))
        shape = draw(shapes(min_rank=0, max_rank=3, min_size=1, max_size=4))
        # The second operand broadcasts against the first along any subset of its axes.
        other = [size if draw(st.booleans()) else 1 for size in shape]
        special = kind == "float" and draw(st.booleans())
        wide = kind == "int" and draw(st.booleans())
        rng = np.random.RandomState(draw(seeds))
        x, y = values(rng, shape, dtype, special, wide), values(rng, other, dtype, special, wide)
        if kind == "int" and draw(st.booleans()):
            # Shift amounts and divisors at and past the edges: negative, zero, the bit width.
            bits = np.iinfo(np.dtype(dtype)).bits
            y = np.asarray(rng.choice([0, 1, bits - 1, bits, bits + 1] + ([-1] if dtype[0] == "i" else []),
                                      size=other)).astype(dtype)
        fns = [(n, _unary(lax, n, draw, st, kind == "float")) for n in names]

        def fun(a, b):
            for name, fn in fns:
                a = fn(a, b) if name in binary or name in COMPARISONS else fn(a)
            return a
        return Program(names[0], " -> ".join(names), fun, (x, y), strict=special)

    @st.composite
    def reduction(draw):
        """A monoid reduction (or one with another init), an arg-reduction or a cumulative op."""
        from jax import lax
        # Only identity inits: XLA applies another init any number of times (once, or not at all
        # over unit axes), so JAX's own result for it is an accident of its compiler.
        name = draw(st.sampled_from(["sum", "prod", "max", "min", "and", "or", "xor", "argmax",
                                     "argmin", "cumsum", "cumprod", "cummax", "cummin", "cumlogsumexp",
                                     "reduce_precision"]))
        logical = name in ("and", "or", "xor")
        float_only = name in ("cumlogsumexp", "reduce_precision")
        dtype = draw(st.sampled_from(("bool",) + INTS if logical else FLOATS if float_only
                                     else FLOATS + INTS + (("bool",) if name in ("max", "min") else ())))
        shape = draw(shapes(min_rank=1, max_rank=4))
        rank = len(shape)
        axis = draw(st.integers(0, rank - 1))
        if name in ("argmax", "argmin"):  # over an empty axis JAX has no answer; other axes may be empty
            shape[axis] = max(1, shape[axis])
        special = dtype in FLOATS and name not in ("prod", "cumprod") and draw(st.booleans())
        wide = dtype in INTS and name not in ("prod", "cumprod") and draw(st.booleans())
        rng = np.random.RandomState(draw(seeds))
        x = values(rng, shape, dtype, special, wide)
        if name in ("prod", "cumprod") and dtype in INTS:
            x = np.clip(x, -2, 2).astype(dtype)  # products that stay in range
        if name in ("sum", "prod") and dtype in ("float16", "bfloat16"):
            # Values whose every partial sum and product is exact: JAX on CPU rounds half-precision
            # sums and products at each step, noxla once (a difference the rules declare).
            x = np.clip(np.round(x), -1, 1).astype(dtype)
        axes = tuple(sorted(draw(st.sets(st.integers(0, rank - 1)))))
        detail = f"axes={axes}"
        if name in ("sum", "prod", "max", "min", "and", "or", "xor"):
            op = {"sum": lax.add, "prod": lax.mul, "max": lax.max, "min": lax.min,
                  "and": lax.bitwise_and, "or": lax.bitwise_or, "xor": lax.bitwise_xor}[name]
            ident = {"sum": 0, "prod": 1, "and": -1 if dtype != "bool" else True, "or": 0, "xor": 0,
                     "max": -np.inf if dtype in FLOATS else False if dtype == "bool" else np.iinfo(dtype).min,
                     "min": np.inf if dtype in FLOATS else True if dtype == "bool" else np.iinfo(dtype).max}[name]
            init = np.array(ident).astype(dtype)

            def fun(v):
                return lax.reduce(v, init, op, axes)
        elif name in ("argmax", "argmin"):
            index_dtype = draw(st.sampled_from([np.int32, np.int32, np.int16, np.uint8]))
            detail = f"axis={axis} index_dtype={np.dtype(index_dtype).name}"

            def fun(v):
                return getattr(lax, name)(v, axis, index_dtype)
        elif name == "reduce_precision":
            exponent, mantissa = draw(st.sampled_from([(5, 10), (8, 7), (4, 3), (5, 2), (8, 23)]))
            detail = f"exponent_bits={exponent} mantissa_bits={mantissa}"
            x = (x * 1.37).astype(dtype)  # values with bits to round away

            def fun(v):
                return lax.reduce_precision(v, exponent, mantissa)
        else:
            reverse = draw(st.booleans())
            detail = f"axis={axis} reverse={reverse}"

            def fun(v):
                return getattr(lax, name)(v, axis, reverse=reverse)
        return Program(name, detail, fun, (x,), strict=special)

    @st.composite
    def shape_op(draw):
        """A chain of shape ops, or a conversion, clamp, select, iota, top_k or dynamic_update_slice."""
        import jax.numpy as jnp
        from jax import lax
        name = draw(st.sampled_from(["layout", "concatenate", "dynamic_update_slice", "convert_element_type",
                                     "clamp", "select_n", "iota", "top_k"]))
        dtype = draw(st.sampled_from(FLOATS + INTS + ("bool",)))
        shape = draw(shapes(min_rank=1, max_rank=4, min_size=1, max_size=4))
        rank = len(shape)
        rng = np.random.RandomState(draw(seeds))
        x = values(rng, shape, dtype)
        if name == "layout":
            steps, now = [], np.zeros(shape, np.int8)  # the shape so far, to draw each step for
            for _ in range(draw(st.integers(1, 4))):
                step = draw(st.sampled_from(["transpose", "reshape", "rev", "expand", "squeeze", "broadcast"]))
                if step == "transpose":
                    arg = tuple(draw(st.permutations(range(now.ndim))))
                elif step == "rev":
                    arg = tuple(sorted(draw(st.sets(st.integers(0, now.ndim - 1))))) if now.ndim else ()
                elif step == "expand":
                    arg = (draw(st.integers(0, now.ndim)),)
                elif step == "squeeze":
                    arg = tuple(d for d in range(now.ndim) if now.shape[d] == 1 and draw(st.booleans()))
                elif step == "broadcast":
                    arg = (draw(st.integers(1, 3)), *now.shape)
                else:
                    arg = tuple(draw(st.permutations(_factors(now.size))))
                steps.append((step, arg))
                now = LAYOUT[step](np, now, arg)

            def fun(v):
                for step, arg in steps:
                    v = LAYOUT[step](lax, v, arg)
                return v
            return Program("layout", " -> ".join(f"{s}{a}" for s, a in steps), fun, (x,))
        if name == "concatenate":
            axis = draw(st.integers(0, rank - 1))
            parts = [x] + [values(rng, [draw(st.integers(0, 3)) if d == axis else s for d, s in enumerate(shape)],
                                  dtype) for _ in range(draw(st.integers(1, 3)))]
            return Program("concatenate", f"dimension={axis}", lambda *vs: lax.concatenate(vs, axis), tuple(parts))
        if name == "dynamic_update_slice":
            update = values(rng, [draw(st.integers(0, s)) for s in shape], dtype)
            starts = np.array([draw(st.integers(-3, s + 2)) for s in shape], np.int32)

            def fun(v, u, idx):
                return lax.dynamic_update_slice(v, u, [idx[i] for i in range(rank)])
            return Program("dynamic_update_slice", f"starts={starts.tolist()}", fun, (x, update, starts))
        if name == "convert_element_type":
            to = draw(st.sampled_from(FLOATS + INTS + ("bool", "uint32")))
            if np.issubdtype(jnp.dtype(to), np.unsignedinteger) and dtype in FLOATS:
                x = np.abs(x)  # a negative float to an unsigned type has no defined result
            if dtype in FLOATS and to in INTS:
                x = (x * 1.3).astype(dtype)  # fractions to truncate
            return Program("convert_element_type", f"{dtype} -> {to}", lambda v: lax.convert_element_type(v, to),
                           (x,))
        if name == "clamp":
            low, high = values(rng, draw(st.sampled_from([(), shape])), dtype), values(rng, (), dtype)
            return Program("clamp", f"bounds {list(low.shape)}, []", lambda lo, v, hi: lax.clamp(lo, v, hi),
                           (low, x, high))
        if name == "select_n":
            cases = draw(st.integers(1, 3))
            which = rng.randint(0, cases, size=shape).astype(np.int32 if cases > 2 else np.bool_)
            if cases == 1:
                which = which.astype(np.bool_)
            operands = [x] + [values(rng, shape, dtype) for _ in range(cases - 1)]
            return Program("select_n", f"{cases} cases", lambda w, *vs: lax.select_n(w, *vs), (which, *operands))
        if name == "iota":
            iota_dtype = draw(st.sampled_from(FLOATS + INTS))
            dimension = draw(st.integers(0, rank - 1))
            return Program("iota", f"{iota_dtype} {shape} dimension={dimension}",
                           lambda v: v + lax.broadcasted_iota(v.dtype, v.shape, dimension),
                           (values(rng, shape, iota_dtype),))
        dtype = draw(st.sampled_from(FLOATS + INTS))
        k = draw(st.integers(0, shape[-1]))
        # Ties are ordered by index in JAX: the values are drawn with ties on purpose.
        return Program("top_k", f"k={k}", lambda v: lax.top_k(v, k), (values(rng, shape, dtype),))

    @st.composite
    def control(draw):
        """while, fori, cond/switch and scan, their bodies closing over constant arrays."""
        import jax.numpy as jnp
        from jax import lax
        name = draw(st.sampled_from(["while", "fori", "cond", "switch", "scan", "while_of_cond"]))
        dtype = draw(st.sampled_from(("float32", "float32", "int32", "float16")))
        shape = draw(shapes(min_rank=1, max_rank=2, min_size=1, max_size=4))
        rng = np.random.RandomState(draw(seeds))
        x = values(rng, shape, dtype)
        consts = [values(rng, draw(st.sampled_from([(), shape[-1:], shape])), dtype) for _ in range(3)]
        scale = np.asarray(draw(st.sampled_from([1, 2, -1])), dtype)

        def step(v, c):
            # Keeps the shape and the type; bounded, so a few steps stay in range for every dtype.
            v = v * scale + c
            return jnp.clip(v, -16, 16).astype(v.dtype)

        steps = draw(st.integers(0, 4))
        if name == "while":
            def fun(v):
                return lax.while_loop(lambda s: s[0] < steps, lambda s: (s[0] + 1, step(s[1], consts[0])), (0, v))[1]
        elif name == "fori":
            def fun(v):
                return lax.fori_loop(0, steps, lambda i, s: step(s, consts[1]) + i.astype(s.dtype), v)
        elif name == "cond":
            def fun(v):
                return lax.cond(jnp.sum(v) > 0, lambda s: step(s, consts[0]), lambda s: step(s, consts[1]), v)
        elif name == "switch":
            index = np.int32(draw(st.integers(-2, 4)))  # clamped into range by switch

            def fun(v, i):
                return lax.switch(i, [lambda s, c=c: step(s, c) for c in consts], v)
            return Program("switch", f"index={int(index)} over {len(consts)} branches", fun, (x, index))
        elif name == "scan":
            reverse = draw(st.booleans())

            def fun(v):
                def body(carry, row):
                    new = step(carry + row, consts[0][0] if consts[0].ndim == len(shape) else consts[0])
                    return new, new * scale
                return lax.scan(body, jnp.zeros(shape[1:], v.dtype), v, reverse=reverse)
        else:
            def fun(v):
                def body(s):
                    return s[0] + 1, lax.cond(s[0] % 2 == 0, lambda t: step(t, consts[0]),
                                              lambda t: step(t, consts[2]), s[1])
                return lax.while_loop(lambda s: s[0] < steps, body, (0, v))[1]
        return Program(name, f"steps={steps} constants {[list(c.shape) for c in consts]} scale={scale}", fun, (x,))

    return {"elementwise": elementwise(), "reduction": reduction(), "shape_op": shape_op(), "control": control()}


# Each layout step for numpy (to draw the next step for the shape so far) and for lax.
LAYOUT = {
    "transpose": lambda m, v, perm: m.transpose(v, perm),
    "rev": lambda m, v, dims: m.flip(v, dims) if m is np else m.rev(v, dims),
    "expand": lambda m, v, dims: m.expand_dims(v, dims),
    "squeeze": lambda m, v, dims: m.squeeze(v, dims),
    "broadcast": lambda m, v, shape: (np.broadcast_to(v, shape) if m is np
                                      else m.broadcast_in_dim(v, shape, tuple(range(1, len(shape))))),
    "reshape": lambda m, v, shape: m.reshape(v, shape),
}


def _factors(n: int) -> list[int]:
    """n's prime factors (at least one element): a reshape target drawn as their permutation."""
    out, p = [], 2
    while n > 1 and p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    return out + ([n] if n > 1 or not out else [])
