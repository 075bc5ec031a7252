"""The targets noxla lowers for (defined in ``lowering_rules.vocabulary``), and the runtimes that execute each of
them in tests."""
from __future__ import annotations

from typing import Iterator

from lowering_rules.vocabulary import ALL_TARGETS, Target, dtype_name

# The runtimes a differential case runs in, and the target whose support they prove.
RUNTIMES = {
    "tf_eager": Target.TF,
    "tf_graph": Target.TF,
    "tflite": Target.TFLITE,
    "tfjs_cpu": Target.TFJS,
    "tfjs_wasm": Target.TFJS,
    # TF.js in headless Chromium (tests/differential.py): every zoo model, a sample of rule cases.
    "chromium_webgl": Target.TFJS_WEBGL,
    "chromium_wasm": Target.TFJS,
    "chromium_cpu": Target.TFJS,
    "chromium_webgpu": Target.TFJS,
}
BROWSER_RUNTIMES = tuple(r for r in RUNTIMES if r.startswith("chromium_"))

# LiteRT.js (@litertjs/core 2.5.3) runs .tflite files in the browser; tests/test_litertjs.py proves
# these in headless Chromium. Its kernels are TFLite's, so inside the program TFLite's limits hold;
# at the boundary, its Tensor holds only these dtypes and its compiled model only static shapes.
LITERTJS_TENSOR_DTYPES = ("float32", "int32", "uint8")


def boundary_limits(target: Target, aval) -> Iterator[tuple[str, str, str, str]]:
    """(param, value, reason, workaround) per way a program input or output of ``aval`` cannot
    cross ``target``'s boundary: LiteRT.js's tensor dtypes and static shapes."""
    if not target.within((Target.LITERTJS,)):
        return
    name = dtype_name(aval.dtype)
    if name not in LITERTJS_TENSOR_DTYPES:
        yield ("dtype", name, "LiteRT.js tensors are float32, int32 or uint8 only: a model input or "
               "output of another dtype can be neither given nor read",
               "take and return float32, int32 or uint8, and convert inside the program "
               "(bool as uint8: x.astype(jnp.uint8))")
    if not all(isinstance(d, int) for d in aval.shape):
        yield ("shape", str(aval.shape), "LiteRT.js runs static shapes only: a polymorphic dimension is -1 "
               "in the .tflite, and LiteRT.js refuses every input tensor for it (WebGPU cannot compile it)",
               "export one .tflite per concrete size (without polymorphic_shapes)")


__all__ = ["ALL_TARGETS", "BROWSER_RUNTIMES", "LITERTJS_TENSOR_DTYPES", "RUNTIMES", "Target", "boundary_limits"]
