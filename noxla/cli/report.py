"""What the commands print: each step as it runs (``Progress``, the pipeline's ``on_step``) and the
export's summary (shapes, sizes, operators and the error of each written model against JAX, a
browser backend's refusal as one line)."""
from __future__ import annotations

import os


class Progress:
    """The pipeline's ``on_step``: prints each step as it starts, then how long it took."""

    def __init__(self, out):
        self.out = out
        self.open = None  # the step whose start was printed and whose time was not

    def __call__(self, name: str, seconds: float | None) -> None:
        if seconds is None:
            print(f"[{name}] ...", end="", flush=True, file=self.out)
            self.open = name
        elif name == self.open:
            print(f" done in {seconds:.2f}s", file=self.out, flush=True)
            self.open = None
        else:  # a note with no start of its own (the graph tflite writer's reason to take TF's path)
            print(f"{chr(10) if self.open else ''}[{name}]", file=self.out, flush=True)


def browser_errors(results) -> dict:
    """verify_in_browser's answer as summary rows: the max error per Chromium backend, or why not."""
    if isinstance(results, str):
        return {"chromium": results}
    return {f"chromium_{backend}": r.get("error") or rejected(r.get("rejected")) or r["max_error"]
            for backend, r in results.items()}


def rejected(report: str | None) -> str | None:
    """A backend noxla's check rejects (WebGL: whole 32-bit words): what the page said, one line per use."""
    if not report:
        return None
    uses = [line.strip()[2:] for line in report.splitlines() if line.strip().startswith("- ")]
    return "not run, rejected up front: " + "; ".join(uses)


def summary(program, written: dict, errors: dict, out) -> None:
    from noxla.runtimes import tflite_op_names
    print("\nsummary", file=out)
    print(f"  inputs:  {', '.join(f'{n}: {a.str_short()}' for n, a in zip(program.in_names, program.in_avals))}",
          file=out)
    print(f"  outputs: {', '.join(f'{n}: {a.str_short()}' for n, a in zip(program.out_names, program.out_avals))}",
          file=out)
    print(f"  jaxpr equations: {sum(1 for _ in _eqns(program))}", file=out)
    for kind, path in written.items():
        size = _size(path)
        line = f"  {kind:12s} {path}  {size / 1024:.1f} KiB"
        if kind == "tflite":
            ops = tflite_op_names(path)
            line += f"  {len(ops)} ops ({', '.join(sorted(set(ops)))})"
        print(line, file=out)
    for runtime, error in errors.items():
        shown = error if isinstance(error, str) else f"{error:.2e} (relative to output scale)"
        print(f"  max error vs JAX on random inputs [{runtime}]: {shown}", file=out)


def _eqns(program):
    from limitations.engine import iter_eqns
    return iter_eqns(program.closed_jaxpr)


def _size(path: str) -> int:
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)
