"""Regenerate noxla/writers/tfjs/op_list.json: the TF op types TF.js's graph models run.

TF.js's converter package (@tensorflow/tfjs-converter, in node_modules) compiles its op mapper
lists into ``dist/operations/op_list/<category>.js``, one ``{'tfOpName': ..., ...}`` entry per op;
this reads the op names from there. Run it after upgrading TF.js:

    python3 tools/gen_tfjs_ops.py          # writes the file
    python3 tools/gen_tfjs_ops.py --check  # exits 1 when the file is stale
"""
from __future__ import annotations

import glob
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONVERTER = os.path.join(ROOT, "node_modules", "@tensorflow", "tfjs-converter")
OUTPUT = os.path.join(ROOT, "noxla", "writers", "tfjs", "op_list.json")
_OP_NAME = re.compile(r"""['"]tfOpName['"]\s*:\s*['"]([A-Za-z0-9_]+)['"]""")


def op_list(converter: str = CONVERTER) -> dict:
    """The op names by category file, and the converter version they come from."""
    with open(os.path.join(converter, "package.json")) as f:
        version = json.load(f)["version"]
    files = sorted(glob.glob(os.path.join(converter, "dist", "operations", "op_list", "*.js")))
    if not files:
        raise RuntimeError(f"no op lists under {converter}/dist/operations/op_list (run npm install)")
    categories = {}
    for path in files:
        with open(path) as f:
            names = sorted(set(_OP_NAME.findall(f.read())))
        if names:
            categories[os.path.splitext(os.path.basename(path))[0]] = names
    return {"tfjs_converter_version": version, "ops": categories}


def rendered(converter: str = CONVERTER) -> str:
    return json.dumps(op_list(converter), indent=1, sort_keys=True) + "\n"


def main(argv: list[str]) -> int:
    text = rendered()
    if "--check" in argv:
        with open(OUTPUT) as f:
            stale = f.read() != text
        if stale:
            print(f"{OUTPUT} is stale: run python3 tools/gen_tfjs_ops.py")
        return int(stale)
    with open(OUTPUT, "w") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
