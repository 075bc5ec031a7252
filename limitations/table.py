"""The limitations table, generated from the rule registry (``limitations/LIMITATIONS.md``).

Everything here is read from the registry and decided by the engine: which rules
exist, what limitations they declare, which of their cases the check accepts for
each target. Nothing in this module decides support on its own.
"""
from __future__ import annotations

import dataclasses
import importlib
import os
from collections.abc import Sequence

import jax
import ml_dtypes
import numpy as np
from jax.extend import core

from limitations.engine import check_jaxpr, eqn_view, iter_eqns
from limitations.targets import ALL_TARGETS, RUNTIMES, Target
from lowering_rules.core.dtype_support import (
    KEY,
    ORDER,
    SHORT,
    boundary_lacks,
    supported_dtype_names,
    target_has,
    target_lacks,
    unsupported_dtypes,
)
from lowering_rules.core.jax_compat import PRIMITIVE_MODULES

TABLE_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "LIMITATIONS.md")
REGENERATE = "python tools/gen_limitations.py"

FULL, PARTIAL, UNSUPPORTED = "Full", "Partial", "Unsupported"

# Dtypes the per-target section reports on (JAX runs in 32-bit mode unless x64 is enabled).
DTYPES = tuple(np.dtype(d) for d in (
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
    np.float16, ml_dtypes.bfloat16, np.float32, np.float64, np.complex64, np.complex128))



# --------------------------------------------------------------------------- traced cases

_TRACED: dict[int, tuple] = {}


def case_program(case):
    """The case's traced program, or None when the case does not trace (test_rules reports it).

    Cached per case object: cases may hold numpy arrays, which are not hashable.
    """
    if case.skip:  # the installed JAX cannot run it: listed apart (skipped_cases)
        return None
    hit = _TRACED.get(id(case))
    if hit is None or hit[0] is not case:
        from noxla.front.tracing import trace
        try:
            program = trace(case.fun, tuple(case.concrete_args()), case.polymorphic_shapes)
        except Exception:  # noqa: BLE001 - a broken case proves nothing either way
            program = None
        hit = (case, program)
        _TRACED[id(case)] = hit
    return hit[1]


def untraceable_cases(rules) -> list[str]:
    return sorted(c.id for rule in rules.values() for c in rule.cases if not c.skip and case_program(c) is None)


def skipped_cases(rules) -> list[tuple[str, str]]:
    """(id, reason) of the cases the installed JAX cannot run (e.g. their primitive is newer)."""
    return sorted((c.id, c.skip) for rule in rules.values() for c in rule.cases if c.skip)


def rule_views(rule, case) -> list:
    """The applications of the rule's own primitive in one of its cases."""
    program = case_program(case)
    if program is None:
        return []
    return [eqn_view(e) for e in iter_eqns(program.closed_jaxpr) if e.primitive.name == rule.primitive]


def triggering_cases(rule, limitation, target: Target) -> list:
    """The rule's cases that apply its primitive in the way ``limitation`` excludes on ``target``."""
    return [c for c in rule.cases if any(limitation.applies(v, target) for v in rule_views(rule, c))]


def accepted_cases(rule, target: Target) -> list:
    """The rule's cases the check lets through for ``target``: the tests run them there.

    Uses the declared check only; the TF.js op-list backstop is held silent on every case by
    tests/test_limitations.py, so it would not change these counts.
    """
    return [c for c in rule.cases if case_program(c) is not None
            and check_jaxpr(case_program(c).closed_jaxpr, target).ok]


# --------------------------------------------------------------------------- support per rule

@dataclasses.dataclass(frozen=True)
class TargetSupport:
    status: str
    proving_cases: int
    limitations: tuple


@dataclasses.dataclass(frozen=True)
class Row:
    primitive: str
    cases: int
    support: dict


def target_support(rule, target: Target) -> TargetSupport:
    limitations = tuple(lim for lim in rule.limitations if target.within(lim.targets))
    if any(rule.cases and len(triggering_cases(rule, lim, target)) == len(rule.cases) for lim in limitations):
        status = UNSUPPORTED
    else:
        status = PARTIAL if limitations else FULL
    accepted = accepted_cases(rule, target)
    if target is Target.TFLITE_FLEX:  # no Flex runtime in the tests: its cases run as builtins
        builtins = {id(c) for c in accepted_cases(rule, Target.TFLITE)}
        accepted = [c for c in accepted if id(c) in builtins]
    return TargetSupport(status, len(accepted), limitations)


def rows(rules=None) -> list[Row]:
    if rules is None:
        from lowering_rules import RULES as rules
    return [Row(name, len(rules[name].cases), {t: target_support(rules[name], t) for t in ALL_TARGETS})
            for name in sorted(rules)]


def jax_primitives() -> dict[str, str]:
    """Every primitive JAX defines in ``jax.lax``, ``jax.lax.linalg`` and the known other modules,
    mapped to the module it was found in."""
    found: dict[str, str] = {}
    for module_name in ("jax.lax", "jax.lax.linalg", *PRIMITIVE_MODULES):
        try:
            module = importlib.import_module(module_name)
        except ImportError:  # JAX moves its internals between versions
            continue
        for value in vars(module).values():
            if isinstance(value, core.Primitive):
                found.setdefault(value.name, module_name)
    return found


def missing_primitives(rules=None) -> dict[str, str]:
    if rules is None:
        from lowering_rules import RULES as rules
    return {name: module for name, module in sorted(jax_primitives().items()) if name not in rules}


# Why a JAX primitive has no rule. Each one either means nothing in a program that runs on one
# device (collectives, host callbacks, mutable refs, effect tokens), or JAX 0.10.2 never stages it
# into a jaxpr (tests/test_limitations.py checks each such claim).
NEVER_STAGED = {
    "custom_jvp_call_jaxpr": "a stub JAX keeps for old imports; it has no abstract evaluation, so no traced "
                             "program contains it (custom_jvp functions stage custom_jvp_call)",
    "zeros_like": "it has no abstract evaluation, so no traced program contains it (JAX builds zeros with "
                  "broadcast_in_dim)",
    "stage": "binding it hands its operand to the trace, which stages no equation for it",
    "to_edtype": "it converts to extended dtypes that allow conversion, and none of JAX's public ones "
                 "(PRNG keys) does: keys are made with random_wrap",
    "from_edtype": "it converts from extended dtypes that allow conversion, and none of JAX's public ones "
                   "(PRNG keys) does: key data is read with random_unwrap",
}
_CALLBACKS = {"debug_callback", "debug_print", "io_callback", "pure_callback"}
_TOKENS = {"after_all", "create_token"}
_COLLECTIVES = {"all_gather", "all_to_all", "axis_index", "pmax", "pmin", "ppermute", "psum", "ragged_all_to_all",
                "pvary", "reduced_vary_cast",
                "reduced_vary_cast_p"}  # JAX 0.10 named the primitive reduced_vary_cast_p


def why_no_rule(name: str, module: str) -> str | None:
    """The reason a primitive without a rule needs none, or None when it should have one."""
    if name in NEVER_STAGED:
        return "never staged by JAX " + jax.__version__ + ": " + NEVER_STAGED[name]
    if name in _COLLECTIVES or module == "jax._src.lax.parallel":
        return "collective: communication between devices, meaningless in a program for one device"
    if name in _CALLBACKS:
        return "host callback: calls back into the Python process, which an exported model does not have"
    if name.endswith("_ref") or name == "freeze":
        return "mutable ref: JAX's stateful references, which exported (functional) programs do not contain"
    if name in _TOKENS:
        return "effect token: orders side effects, and an exported program has none"
    return None


# --------------------------------------------------------------------------- rendering

def _cell(support: TargetSupport) -> str:
    return f"{support.status} ({support.proving_cases})"


def _escape(text: str) -> str:
    return " ".join(str(text).replace("|", "\\|").split())


def _support_section(table: Sequence[Row]) -> list[str]:
    header = "| primitive | cases | " + " | ".join(t.label for t in ALL_TARGETS) + " |"
    lines = [header, "|" + " --- |" * (2 + len(ALL_TARGETS))]
    for row in table:
        cells = " | ".join(_cell(row.support[t]) for t in ALL_TARGETS)
        lines.append(f"| `{row.primitive}` | {row.cases} | {cells} |")
    return lines


def _limitation_section(table: Sequence[Row], rules) -> list[str]:
    lines = []
    for row in table:
        declared = rules[row.primitive].limitations
        if not declared:
            continue
        lines += [f"### `{row.primitive}`", ""]
        for lim in sorted(declared, key=lambda lim: (tuple(t.value for t in lim.targets), lim.param, lim.condition)):
            targets = ", ".join(t.label for t in ALL_TARGETS if t in lim.targets)
            triggered = {t: len(triggering_cases(rules[row.primitive], lim, t)) for t in lim.targets}
            lines.append(f"- **{targets}** (`{lim.param}`): {_escape(lim.condition)}")
            lines.append(f"  - reason: {_escape(lim.reason)}")
            if lim.workaround:
                lines.append(f"  - workaround: {_escape(lim.workaround)}")
            counts = ", ".join(f"{t.label}: {n}" for t, n in triggered.items())
            lines.append(f"  - cases rejected up front by it: {counts}")
        lines.append("")
    return lines or ["No rule declares a limitation.", ""]


def _fast_section(table: Sequence[Row], rules) -> list[str]:
    fast = [(row.primitive, rules[row.primitive].fast) for row in table if rules[row.primitive].fast]
    lines = ["| primitive | where the default lowering may differ from JAX |", "| --- | --- |"]
    lines += [f"| `{name}` | {_escape(variant.differs)} |" for name, variant in fast]
    return lines


def _differs_section(table: Sequence[Row], rules) -> list[str]:
    rows = [(row.primitive, targets, text) for row in table for targets, text in rules[row.primitive].differs]
    lines = ["| primitive | targets | what differs from JAX (strict mode too) |", "| --- | --- | --- |"]
    lines += [f"| `{name}` | {', '.join(t.label for t in targets)} | {_escape(text)} |" for name, targets, text in rows]
    return lines if rows else ["None.", ""]


def _dtype_section() -> list[str]:
    lines = []
    for target in ALL_TARGETS:
        supported = supported_dtype_names(target, DTYPES)
        unsupported = unsupported_dtypes(target, DTYPES)
        lines += [f"### {target.label}", "",
                  f"- has: {', '.join(supported) or 'none'}",
                  f"- lacks (every primitive is Unsupported on these): {', '.join(unsupported) or 'none'}"]
        reasons: dict[str, list[str]] = {}
        for name in unsupported:
            reasons.setdefault(target_lacks(target, name), []).append(name)
        lines += [f"  - {', '.join(names)}: {reason}" for reason, names in reasons.items()]
        inside = [(dtype_name, boundary_lacks(target, dtype_name)) for dtype_name in supported
                  if boundary_lacks(target, dtype_name)]
        lines += [f"- computes inside a program only, none taken in or returned: {name}: {reason}"
                  for name, reason in inside] + [""]
    return lines


def _rule_dtype_cell(rule, target: Target) -> str:
    """The dtypes the rule itself rejects on a target that has them (short names), and keys if taken."""
    accepted = set(rule.dtypes.accepted(target))
    if rule.complex is None:  # complex values need a complex lowering (lowering_rules/values/complex_values.py)
        accepted -= {"complex64", "complex128"}
    rejected = [SHORT[n] for n in ORDER if n != KEY and target_has(target, n) and n not in accepted]
    text = ("rejects " + ", ".join(rejected)) if rejected else "all"
    return text + (" + key" if KEY in accepted else "")


def _rule_dtype_section(rules) -> list[str]:
    header = "| primitive | " + " | ".join(t.label for t in ALL_TARGETS) + " |"
    lines = [header, "|" + " --- |" * (1 + len(ALL_TARGETS))]
    plain = []
    for name in sorted(rules):
        cells = [_rule_dtype_cell(rules[name], t) for t in ALL_TARGETS]
        if all(c == "all" for c in cells):
            plain.append(name)
            continue
        lines.append(f"| `{name}` | " + " | ".join(cells) + " |")
    lines += ["", f"Every other rule ({len(plain)}) computes every dtype JAX accepts for it, on every target "
              "that has that dtype, and takes no PRNG keys.", ""]
    return lines


def _missing_section(missing: dict[str, str]) -> list[str]:
    kinds: dict[str, int] = {}
    for name, module in missing.items():
        kind = (why_no_rule(name, module) or "needs a rule").split(":")[0]
        kinds[kind] = kinds.get(kind, 0) + 1
    lines = ["By kind: " + ", ".join(f"{kind} {n}" for kind, n in sorted(kinds.items())) + ".", "",
             "| primitive | defined in | support | why there is no rule |", "| --- | --- | --- | --- |"]
    lines += [f"| `{name}` | `{module}` | {UNSUPPORTED} on every target | "
              f"{_escape(why_no_rule(name, module) or 'needs a rule')} |" for name, module in missing.items()]
    return lines


def _webgpu_fallback_section() -> list[str]:
    from limitations.targets import WEBGPU_FALLBACKS
    lines = ["| TFLite op | the delegate says | why | exact alternative | the litertjs-webgpu export |",
             "|---|---|---|---|---|"]
    return lines + [f"| {'any' if f.op == '*' else f'`{f.op}`'} | {_escape(f.delegate_says)} | {_escape(f.reason)} | "
                    f"{_escape(f.alternative)} | {_escape(f.exported) or '-'} |" for f in WEBGPU_FALLBACKS]


def render(rules=None) -> str:
    """The whole limitations table as Markdown; deterministic for a given registry and JAX."""
    if rules is None:
        from lowering_rules import RULES as rules
    table = rows(rules)
    missing = missing_primitives(rules)
    broken = untraceable_cases(rules)
    skipped = skipped_cases(rules)
    runtimes = ", ".join(f"{t.label}: {', '.join(sorted(r for r, rt in RUNTIMES.items() if rt is t))}"
                         for t in ALL_TARGETS if any(rt is t for rt in RUNTIMES.values()))
    lines = [
        "# noxla limitations",
        "",
        f"Generated from the rule registry by `{REGENERATE}`; do not edit by hand. "
        f"JAX {jax.__version__}.",
        "",
        "Support per primitive and target:",
        "",
        f"- **{FULL}**: the rule declares no limitation for the target; only the target's dtype table "
        "(below) applies.",
        f"- **{PARTIAL}**: the rule declares limitations for the target; their exact conditions, reasons "
        "and workarounds are listed under *Declared limitations*. `noxla check` rejects those uses up "
        "front.",
        f"- **{UNSUPPORTED}**: a declared limitation for the target holds for every case of the rule, "
        "or noxla has no rule for the primitive at all.",
        "",
        "The number in brackets counts the rule's cases that the check accepts for the target; "
        "`tests/test_rules.py` runs each of them in the target's runtimes and compares with JAX "
        f"({runtimes}). TFLite (Flex) has no runtime of its own in the tests: its count is of cases "
        "proven with builtins only.",
        "",
        f"**{Target.TFJS_WEBGL.label}** is TF.js on its WebGL backend, the one browsers pick first: every "
        f"{Target.TFJS.label} limitation holds there too, plus its own (`noxla check --target tfjs-webgl`). "
        "WebGL keeps int32 tensors in float32 textures, so an int32 value (a uint32 carried as its int32 "
        "bits too) is exact there only within +-2^24. The check cannot see values: it rejects the rules that "
        "compute on whole 32-bit words by nature; keeping the program's int32 inputs, outputs and "
        "arithmetic within +-2^24 is up to the program (noxla's PRNG computes on 16-bit limbs, so "
        "`jax.random` samples drawn from a seed below 2^24 are exact). Its count is of the cases the "
        "check accepts for WebGL; Chromium's WebGL runs each rule's first case and every zoo model, "
        "the rest run in TF.js's Node runtimes.",
        "",
        f"**{Target.TFJS_WEBGPU.label}** is the same model.json on TF.js's WebGPU backend: every "
        f"{Target.TFJS.label} limitation holds there too, plus what TF.js 4.22's WebGPU kernels compute "
        "wrong or cannot run in noxla's lowering (`noxla check --target tfjs-webgpu`; the export's demo page "
        "and `--verify-browser` say so instead of running there). Like WebGL it holds int32 exactly within "
        "+-2^24, and its sin and cos are the GPU's approximations (2e-4 off in headless Chromium's "
        "SwiftShader). `tests/browser_sweep.py` runs every rule case there.",
        "",
        f"## Support by primitive ({len(table)} rules, {sum(r.cases for r in table)} cases)",
        "",
        *_support_section(table),
        "",
        "## Declared limitations",
        "",
        *_limitation_section(table, rules),
        "## Default (fast) and strict lowerings",
        "",
        "By default these rules emit fused ops (MaxPool, Softmax, Relu, ...) that compute what JAX "
        "computes for finite operands but may treat NaN/inf operands differently, as listed. "
        "`strict=True` in the API (`--strict` in the CLI) keeps JAX's NaN/inf semantics exactly. "
        "`tests/test_rules.py` runs these rules' cases and every case with NaN/inf inputs in strict "
        "mode, exactly, and every case in the default mode, on finite inputs where a NaN/inf input "
        "could reach one of these rules.",
        "",
        *_fast_section(table, rules),
        "",
        "Beyond the rules, a .tflite export by default folds a constant scale of one factor per input "
        "feature (an RMSNorm's weight, broadcast to [1, in]) into the weights of the projections "
        "(FULLY_CONNECTED) reading the scaled activations, when those weights are large enough to be "
        "stand-ins (`noxla/writers/tf/weight_stubs.py`) and nothing else reads them: x @ (w * c) instead of "
        "(x * c) @ w, so rounding differs, and an inf/NaN factor may give other NaN/inf entries. "
        "TF's converter folds such a scale only when it is rank 1; strict mode keeps the MUL.",
        "",
        "## Known differences in every mode",
        "",
        "Where a target lacks the op that JAX's result needs for some inputs, the rule computes it "
        "exactly on the other targets and lowers otherwise for this one (its own TF.js lowering); "
        "the inputs named below give other results there, in strict mode too.",
        "",
        *_differs_section(table, rules),
        "",
        "## LiteRT.js on WebGPU: ops that leave the GPU",
        "",
        "LiteRT.js's WebGPU delegate runs the ops it refuses on wasm (its JSPI build): the model still "
        "matches JAX, slower. Not rejected by the check (`litertjs-webgpu` rejects only what WebGPU "
        "computes wrong); `--verify-browser` reports the placement. A .tflite exported with "
        "`target=\"litertjs-webgpu\"` (CLI `--tflite-target litertjs-webgpu`) is lowered with the exact "
        "alternatives in the last column; the default .tflite keeps the fused ops LiteRT's CPU runs "
        "faster. `tests/test_litertjs.py` checks every op a zoo model leaves on wasm against this list.",
        "",
        *_webgpu_fallback_section(),
        "",
        "## Dtypes per target",
        "",
        "A program input or output of a dtype its target lacks is rejected too, even when no primitive "
        "computes on it (`lambda x: x` on float16): a converter refuses it, or a TF.js model would return "
        "int32 or float32 values in its place without a word. TF.js's uint32 is the exception: its models "
        "take and return a uint32 as the int32 with the same bits.",
        "",
        *_dtype_section(),
        "## Dtypes per rule",
        "",
        "Beyond the target's own dtypes (above), the dtypes each rule's lowering does not compute "
        "exactly on a target; `noxla check` rejects them up front, with the rule's reason. "
        "\"all\": every dtype JAX accepts for the primitive; \"+ key\": also PRNG key arrays (moved as their "
        "key data). A rule computes complex values only when it declares a complex lowering. "
        "`tests/test_dtype_sweep.py` runs every rule on every dtype (bool, int8-int64, uint8-uint64, "
        "float16, bfloat16, float32, float64, complex64, complex128, PRNG keys) in each target's "
        "runtimes: each one matches JAX or is rejected up front. Dtypes: "
        + ", ".join(f"{SHORT[n]} = {n}" for n in ORDER if SHORT[n] != n) + ".",
        "",
        *_rule_dtype_section(rules),
        f"## JAX primitives without a rule ({len(missing)})",
        "",
        "Found in `jax.lax`, `jax.lax.linalg` and JAX's modules for jit, custom derivatives, "
        "checkpointing, PRNG, collectives and callbacks. `noxla check` reports each use of these as "
        "unsupported on every target.",
        "",
        *_missing_section(missing),
        "",
    ]
    if broken:
        lines += ["## Cases that do not trace", "",
                  "These cases count for no target; `tests/test_rules.py` reports why.", "",
                  *(f"- `{c}`" for c in broken), ""]
    if skipped:
        lines += [f"## Cases JAX {jax.__version__} cannot run", "",
                  "These cases count for no target here; under the JAX each names they run.", "",
                  *(f"- `{c}`: {_escape(why)}" for c, why in skipped), ""]
    return "\n".join(lines)


def write(path: str = TABLE_PATH) -> bool:
    """Write the table; returns whether the file changed."""
    text = render()
    old = read(path)
    if old == text:
        return False
    with open(path, "w") as f:
        f.write(text)
    return True


def read(path: str = TABLE_PATH) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return None


def is_fresh(path: str = TABLE_PATH) -> bool:
    return read(path) == render()


__all__ = [
    "FULL",
    "PARTIAL",
    "REGENERATE",
    "TABLE_PATH",
    "UNSUPPORTED",
    "accepted_cases",
    "case_program",
    "is_fresh",
    "jax_primitives",
    "missing_primitives",
    "render",
    "rows",
    "triggering_cases",
    "write",
]
