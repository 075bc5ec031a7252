"""The code's own shape: one direction of dependencies, no import cycles.

Dependencies point one way: cli -> api, llm -> pipeline -> writers -> runtimes -> graph -> front
-> rules (``NOXLA_RANK``: noxla's packages in the order of its pipeline), and inside the rules:
rule families -> patterns -> values -> core (``RULES_RANK``). The limitations engine reads the
rules and knows no exporter (the exporters hand it the TF.js op-list backstop); the rules and the
engine share the ``lowering_rules.core.vocabulary`` leaf (targets, ``Limitation``, ``EqnView``)
and the rules' dtype data (``lowering_rules.core.dtype_support``). Every ``import`` in the source
counts, function-level ones included: a lazy import hides a cycle, it does not remove it.
"""
from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("lowering_rules", "limitations", "noxla")

# noxla's packages from the top down, the pipeline's order: a module may import only modules of its
# package's rank or below. The command line; the public API and the LLM front door; the export
# pipeline (the up-front check and options, then each output written by the graph or through TF);
# the writers of each target; the runtimes, their pages and the comparison with JAX; noxla's graph;
# the front end (trace, interpreter, lowering into TF).
NOXLA_RANK = {"noxla.cli": 7, "noxla.__main__": 7, "noxla.api": 6, "noxla.llm": 6, "noxla.pipeline": 5,
              "noxla.writers": 4, "noxla.runtimes": 3, "noxla.graph": 2, "noxla.front": 1}
# The modules at noxla's top that every layer may use: the errors, the example, TF's lean import.
NOXLA_LEAVES = {"noxla", "noxla.errors", "noxla.example", "noxla.lean_tensorflow"}


def rank(module: str) -> int | None:
    """The rank of ``module``'s package (None: a leaf, or not noxla's)."""
    parts = module.split(".")
    return next((NOXLA_RANK[".".join(parts[:i])] for i in range(len(parts), 0, -1)
                 if ".".join(parts[:i]) in NOXLA_RANK), None)


# What of noxla the limitations package may read: the user's source line and tracing (for cases).
# Leaves of the rules package that every layer may use: JAX's internals, the shared vocabulary, and
# the ``tf`` seam (TensorFlow or noxla.graph's recorder, whichever the lowering speaks to).
SHARED_LEAVES = {"lowering_rules.core.jax_compat", "lowering_rules.core.vocabulary",
                 "lowering_rules.core.lazy_tensorflow"}
LIMITATIONS_MAY_IMPORT = {"noxla", "noxla.errors", "noxla.front.tracing", "noxla.front.shapes"}


def _modules() -> dict[str, str]:
    found = {}
    for package in PACKAGES:
        for dirpath, _, files in os.walk(os.path.join(ROOT, package)):
            for f in files:
                if f.endswith(".py"):
                    rel = os.path.relpath(os.path.join(dirpath, f), ROOT)[:-3].replace(os.sep, ".")
                    found[rel.removesuffix(".__init__")] = os.path.join(dirpath, f)
    return found


MODULES = _modules()


def _imports(name: str, path: str) -> set[str]:
    """Our modules that ``name`` imports anywhere in its source."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against this module's package
                package = name.split(".") if path.endswith("__init__.py") else name.split(".")[:-1]
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        else:
            continue
        out.update(t for t in targets if t in MODULES and t != name)
    return out


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def test_the_graph_sees_the_packages():
    assert {"lowering_rules.core.vocabulary", "lowering_rules.core.registry", "limitations.engine",
            "noxla.front.interpreter",
            "noxla.pipeline.tf_path", "noxla.cli"} <= set(GRAPH)
    assert "lowering_rules.core.registry" in GRAPH["noxla.front.interpreter"]


def _cycle() -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node):
        state[node] = 1
        stack.append(node)
        for nxt in sorted(GRAPH[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(GRAPH):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_no_import_cycles():
    cycle = _cycle()
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def _edges(from_prefix: str):
    return [(a, b) for a, bs in sorted(GRAPH.items()) if a == from_prefix or a.startswith(from_prefix + ".")
            for b in sorted(bs)]


def test_vocabulary_is_a_leaf():
    assert not GRAPH["lowering_rules.core.jax_compat"]
    assert GRAPH["lowering_rules.core.vocabulary"] <= {"lowering_rules.core.jax_compat"}
    assert GRAPH["lowering_rules.core.dtype_support"] <= {"lowering_rules.core.vocabulary",
                                                          "lowering_rules.core.jax_compat"}


def test_rules_import_only_rules():
    bad = [(a, b) for a, b in _edges("lowering_rules") if not b.startswith("lowering_rules")]
    assert not bad, f"rules must not import the engine or noxla: {bad}"


# lowering_rules' packages from the bottom up: what every rule reads (the registry, the shared
# vocabulary, the ``tf`` seam, JAX's internals, dtype and PRNG key data, helpers, the cases'
# vocabulary); values and arithmetic a target lacks, in other forms; patterns of several equations
# lowered whole. Every other module (the rule families at the package's top, and the package,
# which imports them all) ranks above them.
RULES_RANK = {"lowering_rules.core": 1, "lowering_rules.values": 2, "lowering_rules.patterns": 3}
FAMILY_RANK = 4
# Modules at lowering_rules' top that the package does not import (so no rule family), and why
# they sit there and not in a support package.
TOP_NOT_FAMILIES = {"lowering_rules.transposed_operand_cases": "elementwise's and quotients' own cases of sub and div"}


def rules_rank(module: str) -> int:
    parts = module.split(".")
    return next((RULES_RANK[".".join(parts[:i])] for i in range(len(parts), 1, -1)
                 if ".".join(parts[:i]) in RULES_RANK), FAMILY_RANK)


@pytest.mark.parametrize("module", sorted(m for m in GRAPH if m.startswith("lowering_rules")))
def test_rules_dependencies_point_down(module):
    up = [b for b in sorted(GRAPH[module]) if b.startswith("lowering_rules") and rules_rank(b) > rules_rank(module)]
    assert not up, f"{module} imports {up}, which sit above it (rule families -> patterns -> values -> core)"


def test_the_top_of_lowering_rules_holds_the_rule_families():
    """A module the package does not import registers no rule: it belongs in core, values or patterns."""
    top = {m for m in GRAPH if m.count(".") == 1 and m.startswith("lowering_rules.") and m not in RULES_RANK}
    stray = sorted(top - GRAPH["lowering_rules"] - set(TOP_NOT_FAMILIES))
    assert not stray, f"move these support modules into one of {sorted(RULES_RANK)}: {stray}"
    assert set(TOP_NOT_FAMILIES) <= top



# Hidden per-lowering state: a context variable (or a thread-local) set by an exporter and read deep
# inside a rule made the target invisible at the rule's signature (the TF.js, WebGPU and TFLite
# lowerings were three such variables). What a lowering is for is ``ctx.lowering_for``, a field the
# pipeline sets (lowering_rules/README.md); targets otherwise differ in their writers' passes.
def _hidden_state_uses(path: str) -> list[str]:
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name == "contextvars"]
        elif isinstance(node, ast.ImportFrom) and node.module in ("contextvars", "threading"):
            found += [f"from {node.module} import {a.name}" for a in node.names
                      if node.module == "contextvars" or a.name == "local"]
        elif isinstance(node, ast.Attribute) and node.attr in ("ContextVar", "local") and \
                isinstance(node.value, ast.Name) and node.value.id in ("contextvars", "threading"):
            found.append(f"{node.value.id}.{node.attr}")
    return [f"{os.path.relpath(path, ROOT)}: {f}" for f in found]


# The seam is the one exception: its context variable says which ``tf`` the rules speak to
# (TensorFlow, or noxla.graph's recorder), set by the Lowering around the rules; it tells a rule
# nothing of the target, and no rule reads it.
@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("lowering_rules")
                                          and m != "lowering_rules.core.lazy_tensorflow"
                                          or m in ("noxla.front.interpreter", "noxla.front.lowering")))
def test_no_rule_reads_a_context_variable(module):
    uses = _hidden_state_uses(MODULES[module])
    assert not uses, f"a lowering reads hidden state; make it a field of LoweringFor (ctx.lowering_for): {uses}"

def test_limitations_engine_knows_no_exporter():
    bad = [(a, b) for a, b in _edges("limitations") if b.startswith("noxla") and b not in LIMITATIONS_MAY_IMPORT]
    assert not bad, f"the limitations package imports noxla's lowering or export side: {bad}"


def test_every_noxla_module_has_a_rank_or_is_a_leaf():
    unplaced = [m for m in GRAPH if (m == "noxla" or m.startswith("noxla.")) and rank(m) is None
                and m not in NOXLA_LEAVES]
    assert not unplaced, f"put these in a ranked package (NOXLA_RANK) or make them leaves: {unplaced}"


@pytest.mark.parametrize("module", sorted(m for m in GRAPH if rank(m) is not None))
def test_noxla_dependencies_point_down(module):
    up = [b for b in sorted(GRAPH[module]) if (rank(b) or 0) > rank(module)]
    assert not up, (f"{module} imports {up}, which sit above it "
                    "(cli -> api, llm -> pipeline -> writers -> runtimes -> graph -> front -> rules)")


def test_leaves_of_noxla_import_no_layer():
    bad = [(m, b) for m in sorted(NOXLA_LEAVES) for b in sorted(GRAPH[m])
           if rank(b) is not None or b.startswith(("limitations", "lowering_rules")) and b not in SHARED_LEAVES]
    assert not bad, f"noxla's leaf modules import a layer: {bad}"


def _source_files():
    for package in (*PACKAGES, "tests", "tools"):
        for dirpath, _, files in os.walk(os.path.join(ROOT, package)):
            yield from (os.path.join(dirpath, f) for f in files if f.endswith(".py"))


def test_no_source_file_over_45_kb():
    big = {os.path.relpath(p, ROOT): os.path.getsize(p) for p in _source_files() if os.path.getsize(p) > 45_000}
    assert not big, f"split these files: {big}"


def test_jax_internals_are_imported_in_one_place():
    compat = os.path.join(ROOT, "lowering_rules", "core", "jax_compat.py")
    users = []
    for path in _source_files():
        if path == compat:
            continue
        with open(path) as f:
            tree = ast.parse(f.read(), path)
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            users += [f"{os.path.relpath(path, ROOT)}:{node.lineno}" for n in names if n.startswith("jax._src")]
    assert not users, f"import JAX internals through lowering_rules/core/jax_compat.py: {users}"


def test_importing_noxla_loads_no_test_library(tmp_path):
    """flax is a test extra: the rules import it inside case functions only. A default .tflite export
    (noxla's graph and its TFLite writer), first in a fresh process, imports none either, nor what
    only other paths need: TF, Pallas (through ``jax.extend``: 0.03 CPU s), the TF.js
    writer, LiteRT's interpreter."""
    code = ("import sys, numpy as np, jax.numpy as jnp, noxla\n"
            "noxla.export_tflite(lambda v: jnp.tanh(v @ v.T), np.ones((2, 3), np.float32), path=sys.argv[1])\n"
            "print(sorted(m for m in sys.modules if m in {'tensorflow', 'jax.extend', 'jax._src.pallas',\n"
            "      'noxla.writers.tfjs.writer', 'ai_edge_litert.interpreter'}))\n"
            "import noxla.api, noxla.pipeline.tf_path, noxla.cli\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in {'flax', 'pytest'}))")
    env = {**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "3"}
    result = subprocess.run([sys.executable, "-c", code, str(tmp_path / "f.tflite")], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["[]", "[]"], result.stdout


def test_checking_for_tflite_imports_no_tensorflow():
    """The rules' declarations and the check need no TF (``lowering_rules.core.lazy_tensorflow``), and an
    export the check refuses is refused before TF is imported (``noxla.pipeline.preflight``): a rule module
    reading ``tf`` at its top level, a check that lowers, or an exporter imported before the
    preflight fails here. Lowering then imports it on first use."""
    code = ("import sys, jax, numpy as np, jax.numpy as jnp, noxla, lowering_rules, limitations.table\n"
            "x = np.ones((2, 3), np.float32)\n"
            "for target in ('tflite', 'tf', 'litertjs'):\n"
            "    assert noxla.check(lambda v: jnp.tanh(v @ v.T).max(), x, target=target).ok\n"
            "def printing(v):\n"
            "    jax.debug.print('{}', v)\n"
            "    return v\n"
            "for export in (noxla.export_tflite, noxla.export_tfjs, noxla.export_saved_model):\n"
            "    try:\n"
            "        export(printing, x, path='/nonexistent/refused')\n"
            "    except noxla.UnsupportedError as e:\n"
            "        assert 'debug_print' in str(e)\n"
            "    else:\n"
            "        raise AssertionError(f'{export.__name__} did not refuse the program')\n"
            "print('tensorflow' in sys.modules)\n"
            "print(noxla.convert(lambda v: jnp.tanh(v) * 2)(x).numpy().sum() > 0, 'tensorflow' in sys.modules)")
    env = {**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "3"}
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["False", "True", "True"], result.stdout


def test_our_deprecation_warnings_fail_and_others_do_not():
    """pyproject's filterwarnings: a deprecated API used from noxla's code fails the tests."""
    import warnings
    with pytest.raises(DeprecationWarning):
        warnings.warn_explicit("old API", DeprecationWarning, "noxla/x.py", 1, module="noxla.pipeline.tf_path")
    with pytest.raises(DeprecationWarning):
        warnings.warn_explicit("old API", DeprecationWarning, "lowering_rules/x.py", 1, module="lowering_rules")
    warnings.warn_explicit("old API", DeprecationWarning, "site-packages/jax/x.py", 1, module="jax._src.core")
