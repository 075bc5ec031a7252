"""`noxla export ... --shape-buckets b=1,8,32`: a polymorphic .tflite as one signature per size, and
with --verify-browser each signature run on LiteRT.js (wasm and WebGPU) in headless Chromium."""
from __future__ import annotations

from typing import Callable, Sequence


def parse_buckets(specs: Sequence[str]) -> dict[str, list[int]]:
    """["b=1,8,32", "t=16"] -> {"b": [1, 8, 32], "t": [16]}."""
    buckets = {}
    for spec in specs:
        name, _, sizes = spec.partition("=")
        try:
            buckets[name.strip()] = [int(s) for s in sizes.split(",") if s.strip()]
        except ValueError:
            raise SystemExit(f"noxla: --shape-buckets takes VAR=SIZE,SIZE,... (got {spec!r})") from None
        if not name.strip() or not buckets[name.strip()]:
            raise SystemExit(f"noxla: --shape-buckets takes VAR=SIZE,SIZE,... (got {spec!r})")
    return buckets


def verify_buckets(path: str, fun: Callable, signatures: dict, repeats: int = 5) -> list[str]:
    """One line per signature and accelerator: the max error against JAX on example inputs of that
    size, the median latency and WebGPU's op placement; or why it did not run."""
    import jax

    from noxla import runtimes
    from noxla.front.tracing import trace
    from noxla.runtimes import litertjs
    from noxla.runtimes.demo import example_inputs
    from noxla.runtimes.litertjs_page import placement_text
    from noxla.runtimes.verify import jax_outputs, relative_error

    try:
        runner = litertjs.LiteRtJsRunner()
    except runtimes.BrowserUnavailable as e:
        return [f"LiteRT.js not verified: {e}"]
    lines = []
    try:
        for key, (_, specs) in signatures.items():
            program = trace(fun, tuple(specs))
            leaves, tree = jax.tree_util.tree_flatten(list(specs))
            inputs = example_inputs(leaves)
            expected = jax_outputs(fun, jax.tree_util.tree_unflatten(tree, inputs))
            for accelerator in runner.accelerators():
                try:
                    outs, info = runner.run_timed(path, dict(zip(program.in_names, inputs)), accelerator, repeats,
                                                  signature=key)
                except RuntimeError as e:
                    lines.append(f"LiteRT.js {accelerator} [{key}]: {e}")
                    continue
                error = max(relative_error(e, outs[n]) for n, e in zip(program.out_names, expected))
                ok = "ok" if error <= litertjs.TOLERANCE[accelerator] else "MISMATCH"
                where = f"; {placement_text(info['placement'])}" if accelerator == "webgpu" else ""
                lines.append(f"LiteRT.js {accelerator} [{key}]: max error {error:.1e} ({ok}), "
                             f"median {info['ms']:.2f} ms{where}")
    finally:
        runner.close()
    return lines
