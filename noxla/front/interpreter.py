"""The jaxpr interpreter: walks equations and asks the registry for each primitive's rule.

It knows nothing about particular primitives. Sub-programs (jit, cond, while,
scan, custom_jvp, ...) are lowered by their own rules through
``LoweringContext.sub_program``, which calls back into ``lower_jaxpr``.
"""
from __future__ import annotations

import collections
import contextlib
import mmap
from typing import Callable, Sequence

import numpy as np

from lowering_rules.core import jax_compat, key_types, lazy_tensorflow, registry
from lowering_rules.core.helpers import constant, runtime_infinity, tf_dtype
from lowering_rules.core.jax_compat import core  # jax.extend.core's names, without importing Pallas
from lowering_rules.core.lazy_tensorflow import tf
from lowering_rules.core.vocabulary import DEFAULT_LOWERING, LoweringFor, rule_params
from lowering_rules.values import complex_values, limb_values
from noxla.errors import LoweringError, NoxlaError, source_line
from noxla.front.shapes import Dims

# Arrays from this size on are weights that ``Lowering(weights=...)`` shares; smaller ones stay
# Consts in the graph, where rules may read their values (``tf.get_static_value``).
WEIGHT_BYTES = 1 << 16


# The dtypes TF reads through DLPack as they are (``helpers.constant`` changes none of them).
_DLPACK_DTYPES = {np.dtype(t) for t in (np.float16, np.float32, np.float64, np.int8, np.int16, np.int32,
                                        np.int64, np.uint8)}
_TF_ALIGNMENT = 64  # EIGEN_MAX_ALIGN_BYTES: TF aborts the process on a less aligned DLPack buffer


def weight_constant(array: np.ndarray, unread: bool = False, uint32_as_int32: bool = False) -> tf.Tensor:
    """An eager tensor of a weight, made by DLPack on the array's own memory where TF can use it
    (C-contiguous, writable, 64-byte aligned), else on one aligned copy. ``tf.constant`` copies
    through a second buffer that stays in the heap: measured 2.0x a weight's bytes per constant
    (SmolLM-135M's shapes: 1.25 GB of RSS for 0.62 GB of weights), DLPack 1.0x or 0x. The values,
    dtype and shape are the same; noxla.pipeline.tf_function.frozen_graph_def reads them back without a copy.
    ``unread``: a tensor of the weight's dtype and shape on fresh pages never written (zeros that
    take no memory), standing for a weight whose values are read from ``array`` (``Weights``).
    ``uint32_as_int32``: a uint32 weight in its carrier (``LoweringFor``)."""
    if array.dtype not in _DLPACK_DTYPES or array.size == 0:
        return constant(array, uint32_as_int32)
    if unread:
        pages = mmap.mmap(-1, array.nbytes)  # page-aligned; untouched pages stay out of the RSS
        array = np.frombuffer(pages, array.dtype).reshape(array.shape)
    elif not (array.flags.c_contiguous and array.flags.writeable and array.ctypes.data % _TF_ALIGNMENT == 0):
        raw = np.empty(array.nbytes + _TF_ALIGNMENT, np.uint8)
        start = -raw.ctypes.data % _TF_ALIGNMENT
        aligned = raw[start:start + array.nbytes].view(array.dtype).reshape(array.shape)
        np.copyto(aligned, array)
        array = aligned
    return tf.experimental.dlpack.from_dlpack(array.__dlpack__())


class Weights(dict):
    """The large constants of functions lowered from the same weights (the signatures of one
    model), each held once: id(array) -> (array, the eager tensor the graphs capture; see
    ``Lowering``). ``unread``: the tensors only stand for the arrays (``weight_constant``), so
    the weights are not copied at all; whoever reads the graphs' values must take them from
    ``array_of`` (noxla.pipeline.tf_function.frozen_graph_def does), as the tensors hold zeros."""

    def __init__(self, unread: bool = False):
        super().__init__()
        self.unread = unread
        self._arrays: dict[int, np.ndarray] = {}  # id(tensor) -> array

    def add(self, value, array: np.ndarray, uint32_as_int32: bool = False) -> None:
        tensor = weight_constant(array, self.unread, uint32_as_int32)
        self[id(value)] = (value, tensor)
        self._arrays[id(tensor)] = array

    def array_of(self, tensor) -> np.ndarray | None:
        """The weight ``tensor`` (a captured eager tensor) stands for, if it is one of these."""
        return self._arrays.get(id(tensor))


class Lowering:
    """State shared by one lowering: dimension sizes and the constants emitted so far."""

    def __init__(self, dims: Dims, inputs: Sequence = (), strict: bool = False, weights: Weights | None = None,
                 lowering_for: LoweringFor = DEFAULT_LOWERING, backend=None):
        # ``backend``: the ``tf`` the rules speak to (None: TensorFlow; noxla.graph's recorder records
        # a graph instead). Installed in the seam (lazy_tensorflow) for this lowering's duration.
        self.backend = backend
        self.dims = dims
        self.inputs = list(inputs)
        # strict: IEEE-exact lowerings (NaN/inf as JAX) instead of the fused fast ones.
        self.strict = strict
        # What this lowering is for, where the ops must differ by artifact (``LoweringFor``).
        self.lowering_for = lowering_for
        # Constants live in the graph the lowering started in; loop and branch bodies capture
        # them from there, so a weight first used inside an (unrolled) loop is still emitted once.
        with lazy_tensorflow.using(backend):
            self._graph = None if tf.executing_eagerly() else tf.compat.v1.get_default_graph()
        self._constants: dict[int, tuple[object, tf.Tensor]] = {}
        self._infinity: tf.Tensor | None = None
        self._constant_derived: dict[int, tf.Tensor] = {}   # id -> tensor computed from constants only
        self._folded: dict[tuple, list] = {}
        self._shared: dict[tuple, tuple] = {}
        # ``weights``: id(array) -> (array, eager tensor), shared by lowerings of the same weights
        # (the signatures of one model). A large array is then held once, as an eager tensor the
        # graph captures, instead of as a Const in each graph and each of its function
        # definitions (three copies per graph, measured on TF 2.19); freezing makes it a Const
        # again (``noxla.pipeline.tf_function.frozen_graph_def``).
        self._weights = weights

    def in_root_graph(self):
        return self._graph.as_default() if self._graph is not None else contextlib.nullcontext()

    @contextlib.contextmanager
    def folding(self):
        """The root graph, for an equation folded there. From inside a loop or branch body its ops
        get a scope of their own: they would otherwise take the body's scope (``while/mul``), and
        the TF.js converter, which flattens the bodies' names into one namespace, would read the
        body's op of the same name in their place."""
        inside_body = self._graph is not None and tf.compat.v1.get_default_graph() is not self._graph
        with self.in_root_graph(), (tf.name_scope("folded/") if inside_body else contextlib.nullcontext()):
            yield

    def constant(self, value) -> tf.Tensor:
        """Each weight array becomes one constant, however often and wherever it is used."""
        hit = self._constants.get(id(value))
        if hit is None:
            array = key_types.key_data(value) if key_types.is_key_array(value) else np.asarray(value)
            with self.in_root_graph():
                if complex_values.is_complex_dtype(array.dtype):
                    hit = (value, complex_values.constant(array))
                elif self._weights is not None and self._graph is not None and array.nbytes >= WEIGHT_BYTES:
                    if id(value) not in self._weights:
                        with tf.init_scope():
                            self._weights.add(value, array, self.lowering_for.uint32_as_int32)
                    hit = (value, self._graph.capture(self._weights[id(value)][1]))
                    self._constant_derived[id(hit[1])] = hit[1]
                else:
                    hit = (value, self.make_constant(array))
                    self._constant_derived[id(hit[1])] = hit[1]
            self._constants[id(value)] = hit
        return hit[1]

    def make_constant(self, array) -> tf.Tensor:
        """A new constant of ``array`` in this lowering's carrier of its dtype (``LoweringFor``)."""
        return constant(array, self.lowering_for.uint32_as_int32)

    def tf_dtype(self, dtype) -> tf.DType:
        """The TF dtype values of ``dtype`` have in this lowering (uint32 as int32 for TF.js)."""
        return tf_dtype(dtype, self.lowering_for.uint32_as_int32)

    def constant_expression_key(self, eqn, invals) -> tuple | None:
        """A key for an equation computed from constants (weights, literals) only, else None.

        Such an equation (a weight's transpose or reshape, an iota) is emitted once, in the root
        graph, however often it recurs: an unrolled loop would otherwise repeat it per step, and
        the converters fold each repeat into its own copy of the weight."""
        if any(True for _ in core.jaxprs_in_params(eqn.params)):  # sub-programs are lowered in place
            return None
        operands = []
        for atom, value in zip(eqn.invars, invals):
            if isinstance(atom, core.Literal):
                literal = np.asarray(atom.val, dtype=atom.aval.dtype)
                operands.append(("literal", literal.dtype.str, literal.tobytes()))
            elif id(value) in self._constant_derived:
                operands.append(id(value))
            else:
                return None
        key = (eqn.primitive.name, tuple(operands), tuple(sorted(eqn.params.items())))
        try:
            hash(key)
        except TypeError:  # a parameter holding an array: not worth folding
            return None
        return key

    def folded(self, key) -> list | None:
        return self._folded.get(key)

    def remember_folded(self, key, outs: list) -> None:
        self._folded[key] = outs
        self._constant_derived.update((id(t), t) for t in outs)

    def prepare_constant(self, x, key: tuple, prepare: Callable):
        """``prepare(x)``, made once in the root graph when ``x`` derives from constants only."""
        if id(x) not in self._constant_derived:
            return prepare(x)
        full_key = ("prepared", id(x), key)
        if full_key not in self._folded:
            with self.folding():
                self.remember_folded(full_key, [prepare(x)])
        return self._folded[full_key][0]

    def shared(self, key: tuple, operands: Sequence[tf.Tensor], make: Callable):
        """``make(*operands)``, made once per graph for the same TF tensors and ``key``: tables that
        every decoder layer derives from the same cos and sin (lowering_rules.patterns.rope) are then one set of
        ops. TFLite's converter merges such copies itself; TF.js's keeps each."""
        graph = None if tf.executing_eagerly() else tf.compat.v1.get_default_graph()
        full_key = (key, id(graph), *(id(x) for x in operands))
        if full_key not in self._shared:
            # The graph and operands held with the value: their ids stay theirs while the key lives.
            self._shared[full_key] = (graph, tuple(operands), make(*operands))
        return self._shared[full_key][2]

    def runtime_infinity(self) -> tf.Tensor:
        """+inf (float32) that no converter can fold into a constant (TFLite would store FLT_MAX).

        Computed from the first element of the first non-empty float input, so it stays a run-time
        value even where the tensor needing it is empty (and constant-folded). Without such an
        input the program is constant anyway."""
        if self._infinity is None:
            source = next((x for x in self.inputs if x.shape.num_elements() != 0), None)
            with self.in_root_graph():
                if source is None:
                    value = tf.constant(np.inf, tf.float32)
                else:
                    first = tf.reshape(tf.cast(source, tf.float32), [-1])[:1]
                    value = runtime_infinity(first)
            self._infinity = value
        return self._infinity


class LoweringContext:
    """What a rule sees of one equation: its abstract values, sizes and sub-programs."""

    def __init__(self, lowering: Lowering, eqn, avals_in=None, avals_out=None, scope: "Scope | None" = None):
        self.lowering = lowering
        self.eqn = eqn
        self.scope = scope
        self.avals_in = tuple(v.aval for v in eqn.invars) if avals_in is None else tuple(avals_in)
        self.avals_out = tuple(v.aval for v in eqn.outvars) if avals_out is None else tuple(avals_out)
        # Whether this rule takes uint32 values as Limbs (limb_values.py), so its sub-programs hand
        # them back as they are; other rules' bodies (branches, loops) return words.
        self.keeps_limbs = limb_values.keeps_limbs(eqn.primitive.name)

    def for_parts(self) -> LoweringContext:
        """This equation as a rule sees it when it lowers one part (real or imaginary) of complex values."""
        return LoweringContext(self.lowering, self.eqn, *(
            [complex_values.real_aval(v.aval) for v in vs] for vs in (self.eqn.invars, self.eqn.outvars)))

    @property
    def strict(self) -> bool:
        """True: keep IEEE-exact lowerings; False (default): fused ops that may differ from JAX
        only for NaN/inf inputs, as the rule declares (``Rule.fast``)."""
        return self.lowering.strict

    def producer(self, atom):
        """The equation of the enclosing jaxpr that computed ``atom`` (None for its inputs,
        constants and literals): rules recognise multi-equation patterns (pooling, softmax)."""
        return None if self.scope is None or isinstance(atom, core.Literal) else self.scope.producers.get(atom)

    def uses(self, atom) -> int | None:
        """How many equations (and outputs) of the enclosing jaxpr read ``atom`` (None: not known)."""
        return None if self.scope is None or isinstance(atom, core.Literal) else self.scope.uses[atom]

    def lower_again(self, eqn, operands: Sequence):
        """Another equation of the enclosing jaxpr lowered by its rule on other operands (a rule that
        moves work into that equation's operands, e.g. fusion.scaled_product)."""
        rule = registry.rule_for(eqn.primitive.name)
        return rule.lower(LoweringContext(self.lowering, eqn, scope=self.scope), *operands, **rule_params(eqn.params))

    def value(self, atom) -> tf.Tensor:
        """The TF value of a variable of the enclosing jaxpr that is already lowered."""
        return _read(self.lowering, self.scope.values, atom)

    def is_constant(self, atom) -> bool:
        """Whether an (already lowered) operand derives from weights and literals only: the
        converters fold whatever a rule computes from it. Without the enclosing jaxpr's values (a
        rule applied to an equation's parts, as complex numbers' rules do), only a literal is."""
        if isinstance(atom, core.Literal):
            return True
        return self.scope is not None and id(self.value(atom)) in self.lowering._constant_derived

    @property
    def lowering_for(self) -> LoweringFor:
        """What this lowering is for, where a rule's ops must differ by artifact (``LoweringFor``;
        lowering_rules/README.md lists what a rule may read of it)."""
        return self.lowering.lowering_for

    def tf_dtype(self, dtype) -> tf.DType:
        """The TF dtype that values of the JAX ``dtype`` have in this lowering (uint32 carried as int32
        for TF.js): use it for every tensor a rule makes of an aval's dtype."""
        return self.lowering.tf_dtype(dtype)

    @property
    def aval_out(self):
        return self.avals_out[0]

    @property
    def out_dtype(self) -> tf.DType:
        return self.tf_dtype(self.aval_out.dtype)

    def dim(self, d):
        return self.lowering.dims.dim(d)

    def runtime_infinity(self) -> tf.Tensor:
        return self.lowering.runtime_infinity()

    def prepare_operand(self, x, key: tuple, prepare: Callable):
        """``prepare(x)`` for an operand: when x is a weight (or made from weights only) it is
        prepared once for the whole program. Without this, an unrolled loop re-transposes the
        same weight every step and the converters fold each into a copy of the weight."""
        return self.lowering.prepare_constant(x, key, prepare)

    def shared(self, key: tuple, operands: Sequence[tf.Tensor], make: Callable):
        """``make(*operands)`` made once per graph for these operands (see ``Lowering.shared``)."""
        return self.lowering.shared(key, operands, make)

    def shape(self, shape: Sequence):
        return self.lowering.dims.shape(shape)

    def out_shape(self, i: int = 0):
        return self.shape(self.avals_out[i].shape)

    def sub_program(self, closed_jaxpr) -> Callable[..., list[tf.Tensor]]:
        """A TF function body for a sub-jaxpr. Its constants are made here, outside any branch."""
        closed_jaxpr = jax_compat.closed_jaxpr(closed_jaxpr)
        consts = [self.lowering.constant(c) for c in closed_jaxpr.consts]

        def body(*args):
            outs = lower_jaxpr(self.lowering, closed_jaxpr.jaxpr, consts, args)
            word = self.tf_dtype(np.uint32)
            return outs if self.keeps_limbs else [limb_values.materialize(o, word) for o in outs]
        return body


def _read(lowering: Lowering, values: dict, atom, aval=None):
    if isinstance(atom, core.Literal):
        value = np.asarray(atom.val, dtype=atom.aval.dtype)
        if complex_values.is_complex(atom.aval):
            return complex_values.constant(value)
        if value.dtype.kind == "f" and np.isinf(value).any():
            # Made in the root graph, which a loop or branch body captures it from: the TFLite export
            # hands the root graph's infinite constants to the converter exactly
            # (noxla.writers.tflite.converter.infinities), a body's would be read as the largest finite float.
            with lowering.in_root_graph():
                return lowering.make_constant(value)
        return lowering.make_constant(value)
    return values[atom]


class Scope:
    """One jaxpr being lowered: the TF value of each variable and the equation that made it."""

    def __init__(self, jaxpr: core.Jaxpr | None = None):
        self.values: dict = {}
        self.producers: dict = {}
        # How many times each variable is read (equations and outputs): a rule that recomputes an
        # operand's producer in another form (fusion.scaled_product) must be its only reader.
        self.uses: collections.Counter = collections.Counter(
            v for vs in ([*(e.invars for e in jaxpr.eqns), jaxpr.outvars] if jaxpr is not None else [])
            for v in vs if not isinstance(v, core.Literal))


def lower_jaxpr(lowering: Lowering, jaxpr: core.Jaxpr, consts: Sequence, args: Sequence) -> list:
    with lazy_tensorflow.using(lowering.backend):
        return _lower_jaxpr(lowering, jaxpr, consts, args)


def _lower_jaxpr(lowering: Lowering, jaxpr: core.Jaxpr, consts: Sequence, args: Sequence) -> list:
    scope = Scope(jaxpr)
    values = scope.values
    for var, value in zip(jaxpr.constvars, consts):
        values[var] = value if isinstance(value, (tf.Tensor, tf.Variable)) else lowering.constant(value)
    values.update(zip(jaxpr.invars, args))
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        rule = registry.rule_for(name)
        if rule is None:  # the up-front check reports this with context; here only as a guard
            raise LoweringError(f"no lowering rule for primitive '{name}' at {source_line(eqn.source_info)}")
        invals = [_read(lowering, values, v) for v in eqn.invars]
        key = lowering.constant_expression_key(eqn, invals)
        outs = lowering.folded(key) if key is not None else None
        if outs is None:
            with lowering.folding() if key is not None else contextlib.nullcontext():
                if key is not None:
                    # A literal read above is a constant of the current graph, which may be a loop
                    # or branch body; the folded equation is built in the root graph, so its
                    # literals are made again there (the other operands already live there).
                    invals = [_read(lowering, values, v) if isinstance(v, core.Literal) else x
                              for v, x in zip(eqn.invars, invals)]
                outs = _apply_rule(lowering, rule, eqn, invals, scope)
            if key is not None:
                lowering.remember_folded(key, outs)
        for var, out in zip(eqn.outvars, outs):
            if not isinstance(var, core.DropVar):
                values[var] = out
                scope.producers[var] = eqn
    return [_read(lowering, values, v) for v in jaxpr.outvars]


def _apply_rule(lowering: Lowering, rule, eqn, invals, scope: Scope | None = None) -> list:
    name = eqn.primitive.name
    params = rule_params(eqn.params)  # as the up-front check saw them: no placement parameters

    def lower(avals_in=None, avals_out=None, operands=invals) -> list:
        outs = rule.lower(LoweringContext(lowering, eqn, avals_in, avals_out, scope), *operands, **params)
        return list(outs) if eqn.primitive.multiple_results else [outs]

    def lower_moved(avals_in, avals_out, operands) -> list:
        if key_types.moves_keys(name, eqn.params, avals_in, avals_out):
            return key_types.apply_per_word(lower, avals_in, avals_out, operands)
        return lower(avals_in, avals_out, operands)

    avals_in, avals_out = [v.aval for v in eqn.invars], [v.aval for v in eqn.outvars]
    try:
        with tf.name_scope(name):
            if (limb_values.any_limbs(invals) or limb_values.computes_on_limbs(name, avals_in)) \
                    and not limb_values.keeps_limbs(name):
                outs = _lower_limbs(lowering, lower_moved, eqn, invals, params)
                if outs is not None:
                    return outs
                invals = [limb_values.materialize(v, lowering.tf_dtype(np.uint32)) for v in invals]
            if key_types.moves_keys(name, eqn.params, avals_in, avals_out):
                return key_types.apply_per_word(lower, avals_in, avals_out, invals)
            if _has_complex(eqn):
                return _lower_complex(lowering, lower, rule, eqn, invals, params)
            return lower(operands=invals)
    except NoxlaError:
        raise
    except Exception as e:
        raise LoweringError(
            f"lowering '{name}' failed at {source_line(eqn.source_info)}: {type(e).__name__}: {e}\n"
            f"parameters: {_short_params(eqn.params)}\n"
            "This is a noxla bug; please report it with this message.") from e


def _lower_limbs(lowering: Lowering, lower_moved, eqn, invals, params: dict) -> list | None:
    """A rule applied to uint32 values held as 16-bit limbs (limb_values.py): its Limbs variant, or
    per limb for a rule that only moves values; None when neither applies (the caller then hands
    the rule the words)."""
    name = eqn.primitive.name
    outs = limb_values.lower_with_limbs(name, LoweringContext(lowering, eqn), invals, params)
    if outs is not NotImplemented:
        return list(outs) if eqn.primitive.multiple_results else [outs]
    # Not a gather that fills out-of-range rows: its fill is a word (2^32 - 1), not one per limb.
    fills = "FILL" in str(eqn.params.get("mode", ""))
    if name in key_types.KEY_MOVERS and not fills and not any(True for _ in core.jaxprs_in_params(eqn.params)):
        return limb_values.apply_per_limb(lower_moved, [v.aval for v in eqn.invars],
                                          [v.aval for v in eqn.outvars], invals)
    return None


def _has_complex(eqn) -> bool:
    return any(complex_values.is_complex(v.aval) for v in (*eqn.invars, *eqn.outvars))


def _lower_complex(lowering: Lowering, lower, rule, eqn, invals, params: dict) -> list:
    """A rule applied to (real, imaginary) pairs, as its declared complex support says."""
    how = rule.complex
    if how is None:  # the up-front check rejects this; a guard only
        raise LoweringError(f"'{eqn.primitive.name}' has no complex lowering "
                            f"(at {source_line(eqn.source_info)})")
    if how == registry.PASS_THROUGH:
        return lower()
    if how != registry.COMPONENTWISE:
        outs = how(LoweringContext(lowering, eqn), *invals, **params)
        return list(outs) if eqn.primitive.multiple_results else [outs]
    part_avals = [[complex_values.real_aval(v.aval) for v in vs] for vs in (eqn.invars, eqn.outvars)]
    re, im = (lower(*part_avals, operands=[getattr(v, part, v) for v in invals]) for part in ("re", "im"))
    return [complex_values.ComplexPair(r, i) if _is_complex_var(v) else r
            for v, r, i in zip(eqn.outvars, re, im)]


def _is_complex_var(var) -> bool:
    return complex_values.is_complex(var.aval)


def _short_params(params: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items()
                     if not isinstance(v, jax_compat.JAXPR_TYPES))
