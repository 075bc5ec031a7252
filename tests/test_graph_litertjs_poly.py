"""Polymorphic .tflite files are not written for LiteRT.js: its check refuses a symbolic size at the
boundary (limitations/targets.py), and LiteRT.js 2.5.3 refuses every input tensor of the file the
graph's TFLite writer writes for one, at any size, 1 (the size in the file's ``shape``) included.
So the run-time-shape forms (TRANSPOSE_CONV, SPLIT_V, SCATTER_ND reading sizes computed from a
SHAPE, tests/test_graph_tflite_poly.py) run on LiteRT only. When LiteRT.js takes such files this
fails: the forms must then be run there too, and the check's refusal lifted."""
from __future__ import annotations

import numpy as np
import pytest

import noxla
from noxla.front.tracing import trace
from tests.differential import graph_tflite_bytes
from tests.test_graph_tflite_poly import PROGRAMS

pytestmark = pytest.mark.slow   # a browser test, as tests/test_litertjs.py's

# the programs whose builtin reads a size computed at run time, and one at their smallest size
SMALLEST = {"conv_transpose": lambda x: [x[:1]], "split_sizes": lambda x: [x[:1]],
            "split_halves": lambda x: [x[:2]], "scatter_add": lambda x, i: [x[:1], i[:1]]}


@pytest.mark.parametrize("name", sorted(SMALLEST))
def test_litertjs_refuses_the_graphs_polymorphic_file_at_every_size(name, tmp_path):
    from tests.litertjs_harness import runner
    fun, shapes, args, other = PROGRAMS[name]
    report = noxla.check(fun, *args, target="litertjs", polymorphic_shapes=shapes)
    assert ("(program input)", "shape") in {(v.primitive, v.param) for v in report.violations}, report.format()
    program = trace(fun, tuple(args), shapes)
    path = tmp_path / f"{name}.tflite"
    path.write_bytes(graph_tflite_bytes(program))
    for inputs in (args, other, SMALLEST[name](*args)):
        with pytest.raises(RuntimeError, match=r"does not match expected ranked tensor type \w+\[-1"):
            runner().run(str(path), dict(zip(program.in_names, map(np.asarray, inputs))), "wasm")
