"""What one signature of an LLM .tflite reads per call, and the machine's memory bandwidth: the
bandwidth bound of tools/llm_benchmark.py, and the census that compares two exporters' graphs.

    python3 tools/llm_graph.py A.tflite [B.tflite ...] [--signature decode] [--ops]

Per file: the signature's op histogram; its weight bytes per call (each constant buffer its ops
read counted once, a table read by EMBEDDING_LOOKUP or GATHER counted as the rows it returns,
blockwise scale tensors included); the KV-cache bytes its inputs carry; and, per weight-reading
op, the weight's type and quantization (per-tensor, per-channel, blockwise(N)). Read with the
TFLite schema's lazy accessors, so a file of several GB is not copied into objects.
"""
from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

# The ops whose table input (index) is read one row per id, not whole.
ROW_LOOKUPS = {"EMBEDDING_LOOKUP": 1, "GATHER": 0}
TYPE_BYTES = {"FLOAT32": 4, "FLOAT16": 2, "INT32": 4, "INT8": 1, "UINT8": 1, "INT4": 0.5, "INT16": 2,
              "INT64": 8, "BOOL": 1}


def _names(enum) -> dict:
    return {getattr(enum, n): n for n in dir(enum) if not n.startswith("_")}


def census(path: str, signature: str = "decode") -> dict:
    """The signature's ops, weight bytes per call and weight forms (see the module's docstring)."""
    from noxla.writers.tflite.flatbuffer.schema import schema
    with open(path, "rb") as f:
        data = f.read()
    model = schema.Model.GetRootAs(data, 0)
    op_names, type_names = _names(schema.BuiltinOperator), _names(schema.TensorType)
    keys = {model.SignatureDefs(i).SignatureKey().decode(): model.SignatureDefs(i)
            for i in range(model.SignatureDefsLength())}
    graph = model.Subgraphs(keys[signature].SubgraphIndex())

    def buffer_bytes(tensor) -> int:
        buffer = model.Buffers(tensor.Buffer())
        return int(buffer.Size()) if buffer.Offset() > 1 else buffer.DataLength()

    def form(tensor) -> str:
        q = tensor.Quantization()
        if q is None:
            return "float"
        if q.DetailsType() == schema.QuantizationDetails.BlockwiseQuantization:
            details = schema.BlockwiseQuantization()
            details.Init(q.Details().Bytes, q.Details().Pos)
            return f"blockwise({details.BlockSize()})"
        if q.ScaleLength() > 1:
            return "per-channel"
        return "per-tensor" if q.ScaleLength() == 1 else "float"

    def scale_tensors(tensor) -> list[int]:
        q = tensor.Quantization()
        if q is None or q.DetailsType() != schema.QuantizationDetails.BlockwiseQuantization:
            return []
        details = schema.BlockwiseQuantization()
        details.Init(q.Details().Bytes, q.Details().Pos)
        return [details.Scales()] + ([details.ZeroPoints()] if details.ZeroPoints() > 0 else [])

    ops, forms, seen = collections.Counter(), collections.Counter(), set()
    weight_bytes = lookup_bytes = 0
    for j in range(graph.OperatorsLength()):
        op = graph.Operators(j)
        code = model.OperatorCodes(op.OpcodeIndex())
        name = op_names[max(code.BuiltinCode(), code.DeprecatedBuiltinCode())]
        ops[name] += 1
        inputs = [i for i in op.InputsAsNumpy() if i >= 0]
        for position, index in enumerate(inputs):
            tensor = graph.Tensors(index)
            size = buffer_bytes(tensor)
            if size == 0 or tensor.Buffer() in seen:
                continue
            shape = list(tensor.ShapeAsNumpy()) if tensor.ShapeLength() else []
            if len(shape) < 2:  # shapes, axes, norms' weights: not what the bound is about
                continue
            seen.add(tensor.Buffer())
            kind = f"{name} {type_names[tensor.Type()]} {form(tensor)}"
            if ROW_LOOKUPS.get(name) == position:
                rows = int(graph.Tensors(inputs[1 - position]).ShapeAsNumpy().prod())
                lookup_bytes += size * rows // shape[0]
                kind += " (rows looked up)"
                seen.discard(tensor.Buffer())  # the same table as a FULLY_CONNECTED weight is read whole
            else:
                weight_bytes += size
                for scales in scale_tensors(tensor):
                    weight_bytes += buffer_bytes(graph.Tensors(scales))
            forms[kind] += 1
    cache_bytes = 0
    sig = keys[signature]
    for i in range(sig.InputsLength()):
        item = sig.Inputs(i)
        if item.Name().decode().startswith(("kv_cache", "k_cache", "v_cache")):
            tensor = graph.Tensors(item.TensorIndex())
            cache_bytes += int(TYPE_BYTES[type_names[tensor.Type()]] * tensor.ShapeAsNumpy().prod())
    return {"ops": ops, "op_count": sum(ops.values()), "weight_bytes": weight_bytes + lookup_bytes,
            "lookup_bytes": lookup_bytes, "cache_bytes": cache_bytes, "forms": forms}


BANDWIDTH_SCRIPT = """
import json, sys, time
import numpy as np
mib = int(sys.argv[1])
m = np.ones((mib * 2**20 // 4 // 4096, 4096), np.float32)
v = np.ones(4096, np.float32)
dst = np.empty_like(m)
def best(f, k):
    times = []
    for _ in range(k):
        start = time.perf_counter(); f(); times.append(time.perf_counter() - start)
    return min(times)
print(json.dumps({"read": m.nbytes / best(lambda: m @ v, 9) / 1e9,
                  "copy": 2 * m.nbytes / best(lambda: np.copyto(dst, m), 5) / 1e9}))
"""


def memory_bandwidth(mib: int = 256) -> dict:
    """GB/s of one core, best of several runs on a ``mib`` MiB float32 matrix (far past the caches):
    ``read``, OpenBLAS's matrix-vector product (every byte read once, one multiply-add per 4 bytes:
    the form of a decode step's FULLY_CONNECTED); ``copy``, numpy's copy, bytes read + written.
    In a child with one BLAS thread, as LiteRT-LM's decode runs at 1 thread."""
    import json
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", BANDWIDTH_SCRIPT, str(mib)], env=env, capture_output=True,
                         text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


DECODE_SCRIPT = """
import sys
import numpy as np
from ai_edge_litert.interpreter import Interpreter
path, signature, steps, position = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
runner = Interpreter(model_path=path, num_threads=1).get_signature_runner(signature)
feed = {}
for name, d in runner.get_input_details().items():
    x = np.zeros(d["shape"], d["dtype"])
    if name in ("tokens", "input_pos"):
        x[...] = 7 if name == "tokens" else position
    elif name == "mask":
        x[..., position + 1:] = -np.inf if x.dtype.kind == "f" else 0
        if x.dtype == np.bool_:
            x[..., :position + 1] = True
    feed[name] = x
for _ in range(steps):
    runner(**feed)
"""


def instructions_per_call(path: str, signature: str = "decode", steps: int = 2, position: int = 16,
                          keep: str | None = None) -> float:
    """Instructions one call of ``signature`` executes at 1 thread, counted by valgrind's callgrind
    (a count that the machine's load does not move, unlike a time): the count of a process making
    1 + ``steps`` calls less that of one making 1 (loading, XNNPACK's weight packing and the first
    call's set-up cancel), over ``steps``. The inputs: token 7 at ``position``, zeros in the cache,
    the mask open up to ``position``. ``keep``: a folder to keep callgrind's two files in, for
    callgrind_annotate (which kernels the difference is made of)."""
    import re
    import tempfile
    counts = []
    with tempfile.TemporaryDirectory(prefix="noxla-callgrind-") as scratch:
        scratch = keep or scratch
        for k in (1, 1 + steps):
            out = os.path.join(scratch, f"callgrind.{os.path.basename(path)}.{k}")
            subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, "-c",
                            DECODE_SCRIPT, path, signature, str(k), str(position)],
                           capture_output=True, check=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
            with open(out) as f:
                counts.append(int(re.search(r"^(?:summary|totals):\s*(\d+)", f.read(), re.M).group(1)))
    return (counts[1] - counts[0]) / steps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="+")
    parser.add_argument("--signature", default="decode")
    parser.add_argument("--ops", action="store_true", help="print the op histogram")
    parser.add_argument("--bandwidth", action="store_true", help="measure the memory bandwidth too")
    parser.add_argument("--callgrind", type=int, default=0, metavar="STEPS",
                        help="count the instructions of one call with valgrind, over STEPS calls (slow)")
    parser.add_argument("--keep", help="with --callgrind: keep callgrind's files in this folder")
    args = parser.parse_args()
    for path in args.paths:
        c = census(path, args.signature)
        print(f"{path} [{args.signature}]: {c['op_count']} ops, weights {c['weight_bytes'] / 1e6:.1f} MB per call "
              f"(lookups {c['lookup_bytes'] / 1e3:.1f} kB), KV cache {c['cache_bytes'] / 1e6:.2f} MB")
        for kind, n in sorted(c["forms"].items()):
            print(f"  {n:4d} x {kind}")
        if args.ops:
            print("  " + ", ".join(f"{op} {n}" for op, n in c["ops"].most_common()))
        if args.callgrind:
            count = instructions_per_call(path, args.signature, args.callgrind, keep=args.keep)
            print(f"  instructions per {args.signature} call (callgrind, 1 thread): {count / 1e6:.2f} M", flush=True)
    if args.bandwidth:
        print("memory bandwidth, 1 core (GB/s):", memory_bandwidth())
    return 0


if __name__ == "__main__":
    sys.exit(main())
