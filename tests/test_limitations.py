"""The limitations engine: the generated table, the declared limitations and the up-front check.

- the committed LIMITATIONS.md is the one the registry generates;
- every declared limitation is triggered by a case of its rule and the check rejects that case
  with the limitation's reason;
- (slow) no declared limitation is unnecessary: forced past the check, its cases fail somewhere
  in the target's runtimes;
- the TF.js op-list backstop stays silent on every case the declarations accept, and catches an
  emitted op TF.js lacks;
- one report names every unsupported use of a program at the user's own line.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow as tf
from jax import lax
from jax.core import ShapedArray
from jax.extend import core
from jax.interpreters import mlir

import noxla
from limitations import table
from limitations.engine import check_jaxpr, iter_eqns, op_violations
from limitations.targets import ALL_TARGETS, Target
from lowering_rules import RULES
from lowering_rules.core.cases import case, f32
from lowering_rules.core.registry import Limitation, register
from noxla.writers.tfjs import ops as tfjs_ops
from noxla.writers.tfjs.ops import TFJS_BACKSTOP
from tests.differential import FORCED_RUNTIMES, forced_failure, traced
from tools import gen_limitations

# Each limitation on each target it names; not again on a narrowed target (TF.js on WebGL) when it also
# names that target's base: the narrowed one inherits it, and the base's runtimes prove it.
DECLARED = [(name, i, target) for name in sorted(RULES) for i, lim in enumerate(RULES[name].limitations)
            for target in ALL_TARGETS if target in lim.targets and target.base not in lim.targets]


def _declared_id(param) -> str:
    name, i, target = param
    return f"{name}[{i}]-{target.value}"


def _line(tag: str) -> int:
    """The line of this file holding ``# <tag>``: sources in reports point at the user's lines."""
    lines = inspect.getsource(inspect.getmodule(_line)).splitlines()
    hits = [n for n, text in enumerate(lines, start=1) if text.rstrip().endswith(f"# {tag}")]
    assert len(hits) == 1, f"tag {tag} found {len(hits)} times"
    return hits[0]


def _at(source: str, tag: str) -> bool:
    return source.startswith(f"{__file__}:{_line(tag)} ")


# --------------------------------------------------------------------------- the table

def test_committed_table_is_fresh():
    # The table measures the installed JAX (which cases it can run, which primitives it defines)
    # and names its version: it is compared under that JAX only.
    generated_under = re.search(r"do not edit by hand\. JAX (\S+)\.", table.read(table.TABLE_PATH) or "")
    if generated_under and generated_under.group(1) != jax.__version__:
        pytest.skip(f"{table.TABLE_PATH} was generated under JAX {generated_under.group(1)}, this is "
                    f"JAX {jax.__version__}; check it under that JAX")
    assert table.is_fresh(), (
        f"{table.TABLE_PATH} is stale: the rule registry changed. Regenerate it with "
        f"`{table.REGENERATE}` and commit the result.")


def test_gen_limitations_check_flags_a_stale_table(tmp_path, capsys):
    path = tmp_path / "LIMITATIONS.md"
    path.write_text("# an old table\n")
    assert gen_limitations.main(["--check", "--output", str(path)]) == 1
    assert table.REGENERATE in capsys.readouterr().err
    assert gen_limitations.main(["--output", str(path)]) == 0
    assert gen_limitations.main(["--check", "--output", str(path)]) == 0


def test_table_lists_every_rule_and_the_primitives_without_one():
    text = table.render()
    for name in RULES:
        assert f"| `{name}` | {len(RULES[name].cases)} |" in text
    missing = table.missing_primitives()
    assert "pure_callback" in missing and "add" not in missing
    assert not set(missing) & set(RULES)
    for name in missing:
        assert f"| `{name}` |" in text


def test_every_primitive_without_a_rule_needs_none():
    """Each is a collective, a callback, a ref or a token, or JAX never stages it: a primitive a new
    JAX adds, or one that appears in traced programs, fails here until it gets a rule or a reason."""
    needing = [name for name, module in table.missing_primitives().items() if table.why_no_rule(name, module) is None]
    assert not needing, f"these JAX primitives have no rule and no reason to need none: {needing}"


def _stages(fun, *args) -> set[str]:
    try:
        return {e.primitive.name for e in jax.make_jaxpr(fun)(*args).jaxpr.eqns}
    except (NotImplementedError, TypeError, ValueError):  # JAX refuses to stage it at all
        return set()


def test_primitives_said_never_staged_are_not():
    from lowering_rules.core.jax_compat import ad_util, custom_derivatives, lax_internal
    x, key = np.float32([1.0, 2.0]), jax.random.key(0)
    attempts = {
        "custom_jvp_call_jaxpr": _stages(lambda a: custom_derivatives.custom_jvp_call_jaxpr_p.bind(a), x),
        "zeros_like": _stages(lambda a: ad_util.zeros_like_p.bind(a), x),
        "stage": _stages(lambda a: lax_internal.stage_p.bind(a) * 2, x),
        "to_edtype": _stages(lambda a: lax_internal.to_edtype_p.bind(a, edtype=key.dtype), np.uint32([1, 2])),
        "from_edtype": _stages(lambda k: lax_internal.from_edtype_p.bind(k, dtype=np.dtype(np.uint32)), key),
    }
    assert set(attempts) == set(table.NEVER_STAGED)
    staged = [name for name, prims in attempts.items() if name in prims]
    assert not staged, f"JAX stages these after all; give them rules: {staged}"


# --------------------------------------------------------------------------- declared limitations

@pytest.mark.parametrize("declared", DECLARED, ids=_declared_id)
def test_declared_limitation_is_triggered_and_enforced(declared):
    name, index, target = declared
    rule, lim = RULES[name], RULES[name].limitations[index]
    what = f"{name}'s limitation '{lim.condition}' for {target.label}"
    triggering = table.triggering_cases(rule, lim, target)
    assert triggering, f"{what}: no case of the rule triggers it; add one beside the rule"
    reporting = []
    for c in triggering:
        report = check_jaxpr(traced(c)[0].closed_jaxpr, target)
        assert not report.ok, f"{what}: the check accepts case {c.id}, which triggers it"
        if any(v.primitive == name and v.declared and lim.reason in v.reason for v in report.violations):
            reporting.append(c.id)
    assert reporting, (f"{what}: the check rejects its cases for other reasons (the target's dtype table?) "
                       "and never with this limitation's reason; it is shadowed")


@pytest.mark.slow
@pytest.mark.parametrize("declared", DECLARED, ids=_declared_id)
def test_declared_limitation_is_necessary(declared, runtimes):
    name, index, target = declared
    rule, lim = RULES[name], RULES[name].limitations[index]
    message = unnecessary_limitation(rule, lim, target, runtimes)
    assert message is None, message


def unnecessary_limitation(rule, lim, target: Target, runtimes) -> str | None:
    """A message when every case triggering ``lim`` runs and matches JAX on ``target`` past the check."""
    triggering = table.triggering_cases(rule, lim, target)
    assert triggering, f"{rule.primitive}: limitation '{lim.condition}' has no triggering case"
    for c in triggering:
        for runtime in FORCED_RUNTIMES[target]:
            if forced_failure(c, runtime, runtimes) is not None:
                return None
    runtimes_text = ", ".join(FORCED_RUNTIMES[target])
    return (f"unnecessary limitation: {rule.primitive}'s '{lim.condition}' ({lim.reason}) on {target.label}: "
            f"every case that triggers it ({', '.join(c.id for c in triggering)}) converts, runs and matches "
            f"JAX in {runtimes_text} when forced past the check. Drop {target.label} from its targets or "
            "narrow its condition.")


# --------------------------------------------------------------------------- throwaway rules

@contextlib.contextmanager
def throwaway_rule(name, lower, jax_impl, limitations=(), cases=()):
    """A primitive and its rule, registered for one test and removed afterwards."""
    primitive = core.Primitive(name)
    primitive.def_abstract_eval(lambda x, **params: ShapedArray(x.shape, x.dtype))
    primitive.def_impl(lambda x, **params: jax_impl(x, **params))
    mlir.register_lowering(primitive, mlir.lower_fun(jax_impl, multiple_results=False))
    register(primitive, lower, limitations=limitations, cases=cases)
    try:
        yield primitive
    finally:
        del RULES[name]


def lower_scale(ctx, x, *, factor):
    return x * tf.constant(factor, ctx.out_dtype)


def jax_scale(x, *, factor):
    return x * factor


def lower_lgamma(ctx, x):
    return tf.math.lgamma(x)


def jax_lgamma(x):
    return lax.lgamma(x)


NEGATIVE_FACTOR = Limitation((Target.TFJS,), "factor is negative", "throwaway reason: negative factors",
                             when=lambda eqn: eqn.params["factor"] < 0, param="factor",
                             workaround="throwaway workaround")


def test_table_status_follows_the_declared_limitations():
    big = Limitation((Target.TFJS,), "operand has more than 4 elements", "probe reason",
                     when=lambda eqn: eqn.avals_in[0].size > 4, param="shape")
    always = Limitation((Target.TFLITE,), "always", "probe reason", when=lambda eqn: True)
    cases = [case("small", lambda x: scale_p.bind(x, factor=2.0), f32(3)),
             case("large", lambda x: scale_p.bind(x, factor=2.0), f32(6))]
    with throwaway_rule("noxla_test_scale", lower_scale, jax_scale, [big, always], cases) as scale_p:
        rules = {"noxla_test_scale": RULES["noxla_test_scale"]}
        row, = table.rows(rules)
        text = table.render(rules)
    assert row.cases == 2
    assert row.support[Target.TF] == table.TargetSupport(table.FULL, 2, ())
    assert row.support[Target.TFJS] == table.TargetSupport(table.PARTIAL, 1, (big,))
    assert row.support[Target.TFLITE] == table.TargetSupport(table.UNSUPPORTED, 0, (always,))
    assert row.support[Target.TFLITE_FLEX] == table.TargetSupport(table.FULL, 0, ())
    assert "operand has more than 4 elements" in text and "probe reason" in text


def test_one_report_names_every_unsupported_use_at_the_users_line():
    with throwaway_rule("noxla_test_scale", lower_scale, jax_scale, [NEGATIVE_FACTOR]) as scale_p:
        def f(x, h):
            y = h * h  # mixed:dtype
            w = jax.pure_callback(np.sin, jax.ShapeDtypeStruct((3, 3), np.float32), x)  # mixed:no-rule
            z = scale_p.bind(x, factor=-2.0)  # mixed:limitation
            return y, w, z

        report = noxla.check(f, np.ones((3, 3), np.float32), np.ones((3, 3), np.int16), target="tfjs")
    assert len(report.violations) == 3, report.format()
    by_param = {v.param: v for v in report.violations}
    assert set(by_param) == {"dtype", "primitive", "factor"}, report.format()
    dtype, no_rule, limit = by_param["dtype"], by_param["primitive"], by_param["factor"]
    assert (dtype.primitive, dtype.value) == ("mul", "int16") and _at(dtype.source, "mixed:dtype")
    assert no_rule.primitive == "pure_callback" and _at(no_rule.source, "mixed:no-rule")
    assert limit.primitive == "noxla_test_scale" and limit.value == "-2.0" and limit.declared
    assert _at(limit.source, "mixed:limitation")
    text = report.format()
    for v in report.violations:
        assert v.source in text and v.primitive in text and v.reason in text
    assert "throwaway reason: negative factors" in text and "throwaway workaround" in text
    assert "noxla_test_scale" not in RULES


def test_a_parameter_the_rule_does_not_know_is_reported():
    def lower_without_factor(ctx, x):
        return x

    with throwaway_rule("noxla_test_scale", lower_without_factor, jax_scale) as scale_p:
        report = noxla.check(lambda x: scale_p.bind(x, factor=3.0),  # unknown-param
                             np.ones(3, np.float32), target="tf")
    v, = report.violations
    assert (v.primitive, v.param, v.value, v.declared) == ("noxla_test_scale", "factor", "3.0", False)
    assert _at(v.source, "unknown-param")


def test_a_rule_taking_kwargs_or_placement_parameters_is_refused():
    """A rule names the parameters it understands: ``**kwargs`` would let a new JAX parameter through
    unchecked, and placement parameters are removed before any rule sees them."""
    def with_kwargs(ctx, x, *, factor, **kwargs):
        return x

    @functools.wraps(with_kwargs)
    def wrapped(*args, **kwargs):   # inspect.signature follows __wrapped__ to the rule's own
        return with_kwargs(*args, **kwargs)

    def with_sharding(ctx, x, *, sharding):
        return x

    for lower in (with_kwargs, wrapped):
        with pytest.raises(TypeError, match="kwargs would hide"):
            register("noxla_test_refused", lower)
    with pytest.raises(TypeError, match="never reach a rule"):
        register("noxla_test_refused", with_sharding)
    assert "noxla_test_refused" not in RULES


@pytest.mark.slow
def test_unnecessary_limitation_detection(runtimes):
    """The detector flags a limitation whose cases run fine, and accepts one they need."""
    scale_case = case("negative", lambda x: scale_p.bind(x, factor=-1.5), f32(4))
    lgamma_case = case("positive", lambda x: lgamma_p.bind(x), f32(4, low=0.5, high=3.0))
    lgamma_on_tfjs = Limitation((Target.TFJS,), "always", "TF.js has no Lgamma", when=lambda eqn: True)
    with throwaway_rule("noxla_test_scale", lower_scale, jax_scale, [NEGATIVE_FACTOR], [scale_case]) as scale_p, \
            throwaway_rule("noxla_test_lgamma", lower_lgamma, jax_lgamma, [lgamma_on_tfjs], [lgamma_case]) as lgamma_p:
        unnecessary = unnecessary_limitation(RULES["noxla_test_scale"], NEGATIVE_FACTOR, Target.TFJS, runtimes)
        necessary = unnecessary_limitation(RULES["noxla_test_lgamma"], lgamma_on_tfjs, Target.TFJS, runtimes)
    assert unnecessary is not None and "noxla_test_scale" in unnecessary and "factor is negative" in unnecessary
    assert necessary is None


# --------------------------------------------------------------------------- the TF.js backstop

def test_tfjs_op_list_holds_what_tfjs_runs_and_not_what_it_lacks():
    ops = tfjs_ops.tfjs_supported_ops()
    assert {"MatMul", "ScatterNd", "GatherV2", "TopKV2", "StatelessWhile", "If"} <= ops
    assert not {"Sort", "Erfinv", "Lgamma", "Bitcast", "LeftShift", "UnsortedSegmentSum"} & ops


def test_tfjs_backstop_names_the_emitting_primitive_and_line():
    def lower_lgamma_when_long(ctx, x):
        # Only long operands emit Lgamma, so the backstop must single out that application.
        return tf.math.lgamma(x) if ctx.avals_in[0].shape[0] > 2 else x

    with throwaway_rule("noxla_test_lgamma", lower_lgamma_when_long, jax_lgamma) as lgamma_p:
        def f(x, v):
            y = lgamma_p.bind(jnp.sin(x))  # backstop:long
            w = lgamma_p.bind(v)  # backstop:short
            return y, w

        args = (np.ones(4, np.float32), np.ones(2, np.float32))
        report = noxla.check(f, *args, target="tfjs")
        for target in (Target.TF, Target.TFLITE):
            assert noxla.check(f, *args, target=target).ok
    v, = report.violations
    assert (v.primitive, v.param, v.value, v.declared) == ("noxla_test_lgamma", "tf_op", "Lgamma", False)
    assert _at(v.source, "backstop:long")


def test_tfjs_backstop_reads_noxlas_graph_and_names_the_line(monkeypatch):
    # What TF.js's export writes is noxla's graph after TF.js's passes: the backstop reads those ops,
    # and with no TensorFlow installed they are the verdict (TF's lowering is never asked for).
    from noxla.writers.tfjs import graph as tfjs_graph
    without_sin = tfjs_graph.tfjs_supported_ops() - {"Sin"}
    monkeypatch.setattr(tfjs_graph, "tfjs_supported_ops", lambda: without_sin)
    monkeypatch.setattr(tfjs_ops, "tensorflow_installed", lambda: False)
    monkeypatch.setattr(tfjs_ops, "emitted_ops", lambda *a: pytest.fail("lowered through TensorFlow"))

    def f(x, y):
        a = jnp.cos(x)  # graph:cos
        return jnp.sin(a + 1.0) * y  # graph:sin

    report = noxla.check(f, np.ones(4, np.float32), np.ones(4, np.float32), target="tfjs")
    v, = report.violations
    assert (v.primitive, v.param, v.value, v.declared) == ("sin", "tf_op", "Sin", False)
    assert _at(v.source, "graph:sin")
    assert noxla.check(jnp.cos, np.ones(4, np.float32), target="tfjs").ok


def test_emitted_ops_include_control_flow_bodies():
    # cond's branches are functions in the graph's library, not nodes of the graph itself.
    def f(p, x):
        return lax.cond(p, lambda x: jnp.exp(x) * 2.0, lambda x: x, x)

    program = table.case_program(case("cond", f, np.array(True), f32(3)))
    ops = tfjs_ops.emitted_ops(program)
    exp, = [op for op in ops if op.op_type == "Exp"]
    assert exp.primitive == "exp"
    assert {"If", "StatelessIf"} & {op.op_type for op in ops}


@pytest.mark.slow  # lowers every case for TF.js: 2.5 minutes of CPU, too much for the fast loop
@pytest.mark.parametrize("name", sorted(RULES))
def test_tfjs_backstop_is_silent_where_declarations_accept(name):
    """A rule emitting an op TF.js lacks must declare a limitation (or find another lowering)."""
    found = []
    for c in RULES[name].cases:
        program = table.case_program(c)
        if program is None:  # tests/test_rules.py reports cases that do not trace
            continue
        if check_jaxpr(program.closed_jaxpr, Target.TFJS).ok:
            found += [f"{c.id}: {v.format().strip()}" for v in op_violations(program.closed_jaxpr, TFJS_BACKSTOP)]
    assert not found, "emitted TF ops TF.js does not implement, with no declared limitation:\n" + "\n".join(found)


# --------------------------------------------------------------------------- reports and walking

def test_check_accepts_a_clean_function_on_every_target():
    def clean(x, y):
        return jnp.sin(x) * y + x

    for target in ALL_TARGETS:
        report = noxla.check(clean, np.ones((2, 3), np.float32), np.ones((2, 3), np.float32), target=target)
        assert report.ok, report.format()
        assert target.label in report.format()


def test_report_groups_violations_by_source_line():
    def f(h, x):
        a = h * h + h  # group:two
        b = jax.pure_callback(np.sin, jax.ShapeDtypeStruct((2, 2), np.float32), x)  # group:one
        return a, b

    report = noxla.check(f, np.ones(3, np.int16), np.ones((2, 2), np.float32), target="tfjs")
    two = [v for v in report.violations if _at(v.source, "group:two")]
    one = [v for v in report.violations if _at(v.source, "group:one")]
    assert {v.primitive for v in two} == {"mul", "add"} and [v.primitive for v in one] == ["pure_callback"]
    text = report.format()
    assert text.count(two[0].source) == 1 and text.count(one[0].source) == 1, "one heading per line"
    under_two = text.split(two[0].source)[1].split(one[0].source)[0]
    assert all(v.format() in under_two for v in two)


def test_iter_eqns_walks_cond_and_scan_bodies():
    def f(p, x):
        y = lax.cond(p, jnp.sin, jnp.cos, x)

        def step(carry, xs):
            return carry + jnp.tanh(xs), carry

        return lax.scan(step, y, jnp.stack([x, x]))

    closed = jax.make_jaxpr(f)(True, np.ones(3, np.float32))
    top = {e.primitive.name for e in closed.jaxpr.eqns}
    everywhere = {e.primitive.name for e in iter_eqns(closed)}
    assert {"cond", "scan"} <= top and not {"sin", "cos", "tanh"} & top
    assert {"sin", "cos", "tanh"} <= everywhere


def test_check_reports_uses_inside_sub_jaxprs_at_their_lines():
    def f(x):
        def step(carry, _):
            vals = jax.pure_callback(np.sin, jax.ShapeDtypeStruct((2, 2), np.float32), carry)  # scan-body
            return carry, vals

        return lax.scan(step, x, length=2)

    report = noxla.check(f, np.ones((2, 2), np.float32), target="tf")
    callbacks = [v for v in report.violations if v.primitive == "pure_callback"]
    assert callbacks and all(_at(v.source, "scan-body") for v in callbacks), report.format()


def test_check_looks_inside_a_hijax_primitives_expansion():
    """A hijax primitive lowers as its expansion (lowering_rules/calls.py): the check walks that
    expansion, each use at its own line (the enclosing use's where JAX keeps none). Unchecked, JAX
    0.12.1's jnp.frexp (a float bitcast inside a hi primitive, before it had a rule of its own)
    lowered to zeros."""
    from lowering_rules.core.jax_compat import HiPrimitive

    class BitsOf(HiPrimitive):
        def __init__(self, aval):
            self.in_avals, self.params = (aval,), {}
            self.out_aval = ShapedArray(aval.shape, np.dtype(np.int32))
            super().__init__()

        def expand(self, x):
            return lax.bitcast_convert_type(x, np.int32)  # hi-primitive-expand

    def f(x):
        return BitsOf(jax.typeof(x))(x) + 1

    report = noxla.check(f, np.ones(3, np.float32), target="tflite")
    bitcasts = [v for v in report.violations if v.primitive == "bitcast_convert_type"]
    assert bitcasts and all(_at(v.source, "hi-primitive-expand") for v in bitcasts), report.format()
    with pytest.raises(noxla.UnsupportedError):
        noxla.convert(f)(np.ones(3, np.float32))


def test_webgl_target_inherits_tfjs_and_adds_its_own():
    """TF.js on WebGL rejects what TF.js rejects, plus the rules that compute on whole 32-bit words
    there; a uint32 shifted by a literal amount stays on 16-bit limbs and passes."""
    def f(x, h, u):
        return lax.shift_left(x, np.int32(3)), h * h, lax.shift_right_logical(u, np.uint32(9))  # webgl:uses

    args = (np.ones(3, np.int32), np.ones(3, np.int16), np.ones(3, np.uint32))
    tfjs, webgl = (noxla.check(f, *args, target=t) for t in ("tfjs", "tfjs-webgl"))
    assert [(v.primitive, v.value) for v in tfjs.violations] == [("mul", "int16")], tfjs.format()
    assert webgl.target is Target.TFJS_WEBGL and "TF.js (WebGL)" in webgl.format()
    assert sorted((v.primitive, v.value, v.declared) for v in webgl.violations) == [
        ("mul", "int16", True), ("shift_left", "int32", True)], webgl.format()
    assert all(_at(v.source, "webgl:uses") for v in webgl.violations)
    assert "float32 textures" in webgl.format()
    assert Target.parse("tfjs-webgl").within((Target.TFJS,)) and not Target.TFJS.within((Target.TFJS_WEBGL,))


@pytest.mark.parametrize("dtype, target", [("float16", "tfjs"), ("uint8", "tfjs"), ("bfloat16", "tfjs"),
                                           ("bfloat16", "tflite")])
def test_a_value_passed_through_untouched_is_checked_at_the_boundary(dtype, target):
    # No primitive computes on x, so only the boundary sees its dtype: without this check the TFLite
    # converter refused bfloat16, and TF.js returned uint8/float16 as int32/float32 without a word.
    import ml_dtypes
    x = np.arange(4).astype(ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype)
    report = noxla.check(lambda x: jnp.broadcast_to(x, (4,)), x, target=target)
    assert not report.ok and {v.primitive for v in report.violations} == {"(program input)", "(program output)"}
    assert all(v.value == dtype and v.declared and ("float32" in v.workaround or "int32" in v.workaround)
               for v in report.violations), report.format()
    assert noxla.check(lambda x: jnp.broadcast_to(x, (4,)), x, target="tf").ok


def test_tfjs_keeps_uint32_carried_at_the_boundary_and_one_message_per_dtype():
    assert noxla.check(lambda x: x, np.arange(3, dtype=np.uint32), target="tfjs").ok
    report = noxla.check(lambda x: x * x, np.ones(3, np.int16), target="tfjs")
    assert [v.primitive for v in report.violations] == ["mul"], report.format()
