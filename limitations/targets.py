"""The targets noxla lowers for (defined in ``lowering_rules.core.vocabulary``), and the runtimes that execute each of
them in tests."""
from __future__ import annotations

import dataclasses
from typing import Iterator

from lowering_rules.core.vocabulary import ALL_TARGETS, Target, dtype_name

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
    "chromium_webgpu": Target.TFJS_WEBGPU,
}
BROWSER_RUNTIMES = tuple(r for r in RUNTIMES if r.startswith("chromium_"))

# LiteRT.js (@litertjs/core 2.5.3) runs .tflite files in the browser; tests/test_litertjs.py proves
# these in headless Chromium. Its kernels are TFLite's, so inside the program TFLite's limits hold;
# at the boundary, its Tensor holds only these dtypes and its compiled model only static shapes.
LITERTJS_TENSOR_DTYPES = ("float32", "int32", "uint8")


def boundary_limits(target: Target, aval) -> Iterator[tuple[str, str, str, str]]:
    """(param, value, reason, workaround) per way a program input or output of ``aval`` cannot
    cross ``target``'s boundary: LiteRT.js's tensor dtypes, static shapes, no empty tensors."""
    if not target.within((Target.LITERTJS,)):
        return
    name = dtype_name(aval.dtype)
    if name not in LITERTJS_TENSOR_DTYPES:
        yield ("dtype", name, "LiteRT.js tensors are float32, int32 or uint8 only: a model input or "
               "output of another dtype can be neither given nor read",
               "take and return float32, int32 or uint8, and convert inside the program "
               "(bool as uint8: x.astype(jnp.uint8))")
    if any(isinstance(d, int) and d == 0 for d in aval.shape):
        yield ("shape", str(aval.shape), "LiteRT.js cannot hold an empty tensor: it refuses to make an input "
               "buffer of no bytes, and leaves an empty output out of the model's results",
               "return no empty arrays (drop them from the outputs) and take no empty inputs")
    if not all(isinstance(d, int) for d in aval.shape):
        yield ("shape", str(aval.shape), "LiteRT.js runs static shapes only: a polymorphic dimension is -1 "
               "in the .tflite, and LiteRT.js refuses every input tensor for it (WebGPU cannot compile it)",
               "export one .tflite per concrete size (without polymorphic_shapes)")


@dataclasses.dataclass(frozen=True)
class WebGpuFallback:
    """An op LiteRT.js's WebGPU delegate refuses: it runs on wasm instead (the JSPI build), so the
    model still matches JAX, slower. Not a rejection: a placement, which tests/test_litertjs.py checks
    every zoo model's refusals against (``op`` and ``delegate_says`` match what the delegate printed)."""
    op: str              # the TFLite builtin
    delegate_says: str   # part of the delegate's console message for it
    reason: str
    alternative: str     # an exact way to stay on the GPU
    exported: str = ""   # what a .tflite exported with target="litertjs-webgpu" does about it itself


# Measured with LiteRT.js 2.5.3 in headless Chromium 156 (SwiftShader WebGPU) on the zoo (tests/zoo.py).
WEBGPU_FALLBACKS = (
    WebGpuFallback("LOG_SOFTMAX", "Operation is not supported", "the delegate has no LOG_SOFTMAX kernel",
                   "x - max - log(sum(exp(x - max))), jax.nn.log_softmax's own spelling (7 ops)",
                   exported="lowered so (the cnn: 7 ops, 6 on the GPU -> 13 ops, all on the GPU)"),
    WebGpuFallback("STRIDED_SLICE", "shrink_axis_mask", "the delegate's slice cannot drop the indexed axis "
                   "(x[i], as an unrolled scan reads each step's row)",
                   "a slice keeping the axis, then a reshape; for a scan's rows one UNPACK of the stacked input",
                   exported="an unrolled scan's rows come from one UNPACK (the LSTM: 226 ops, 202 on the GPU "
                   "-> 215, all)"),
    WebGpuFallback("GATHER", "Only support 1D indices", "the delegate gathers with a vector of indices only",
                   "table rows (an embedding lookup): one GATHER of the flattened indices between RESHAPEs. "
                   "A signal's frames (x[hop * i + j]): the flattened gather of its samples does not compile "
                   "there either (\"Unable to parse bc coord for BATCH axis\"); frame with slices instead, "
                   "frames = concatenate([reshape(x[k*hop : k*hop + n*hop], (n, hop)) for k in "
                   "range(window // hop)], axis=1) when hop divides the window",
                   exported="table rows lowered so (the transformer's and LSTM's embeddings)"),
    WebGpuFallback("TRANSPOSE_CONV", "Max version supported: 3", "the converter fuses a following activation "
                   "into the op, which makes it version 4; the delegate takes up to version 3",
                   "the activation as its own op after the transposed convolution",
                   exported="unfused so (the VAE decoder: 6 ops, 2 on the GPU -> 8, all)"),
    WebGpuFallback("*", "Tensor dimensions must be less than 5", "the delegate's tensors have at most 4 "
                   "dimensions (Flax's attention groups query heads in a 5-D [batch, length, kv_heads, "
                   "groups, head_dim] view, an interleaved rotary embedding stacks to 5-D, jnp.repeat of "
                   "key/value heads broadcasts in 5-D)",
                   "keep every intermediate at 4 dimensions or fewer: attention as [batch, heads, length, "
                   "head_dim] einsums, rotary embeddings by rotating halves (concatenate) instead of "
                   "interleaving (stack), key/value heads repeated by concatenating 4-D slices"),
    WebGpuFallback("TRANSPOSE", "Permutation for transpose is invalid", "a 5-D transpose (see the 4-D limit)",
                   "as for the 4-D limit"),
    WebGpuFallback("PACK", "Unknown layout", "a stack whose result is 5-D (see the 4-D limit)",
                   "as for the 4-D limit"),
    WebGpuFallback("BROADCAST_TO", "Operation is not supported", "the delegate has no BROADCAST_TO kernel",
                   "x * ones(shape) (MUL broadcasts; x * 1 is x exactly, NaN, infinities and -0 too)"),
    WebGpuFallback("*", "No support of few identical inputs in the same operation", "an op reading the same "
                   "tensor twice (x - x, x != x for isnan) is refused",
                   "feed one of the two through an op that copies it on the GPU, or compute the value otherwise "
                   "(isnan(x) is not(x <= inf))"),
    WebGpuFallback("*", "Tensor type(INT32) is not supported", "some int32 kernels (UNPACK) are float-only "
                   "on the delegate; noxla's PRNG computes on int32 words",
                   "none on the GPU: integer bit arithmetic stays on wasm"),
)


def declared_fallback(op: str, delegate_says: str) -> WebGpuFallback | None:
    """The declared fallback matching an op the delegate refused with ``delegate_says``, or None."""
    return next((f for f in WEBGPU_FALLBACKS if f.op in ("*", op) and f.delegate_says in delegate_says), None)


__all__ = ["ALL_TARGETS", "BROWSER_RUNTIMES", "LITERTJS_TENSOR_DTYPES", "RUNTIMES", "WEBGPU_FALLBACKS", "Target",
           "WebGpuFallback", "boundary_limits", "declared_fallback"]
