"""Runs traced programs on LiteRT.js in headless Chromium for the differential tests: one browser per
test process, started by the first program that needs it (LiteRtJsRunner closes it at exit)."""
from __future__ import annotations

import os
import tempfile
from typing import Sequence

import numpy as np

from noxla.front.tracing import Program
from noxla.pipeline.tf_path import serving_function
from noxla.pipeline.tf_tflite import tflite_bytes
from noxla.runtimes.litertjs import LiteRtJsRunner

_RUNNER: list[LiteRtJsRunner] = []
_SCRATCH: list[tempfile.TemporaryDirectory] = []  # made on first use, removed at exit


def runner() -> LiteRtJsRunner:
    if not _RUNNER:
        _RUNNER.append(LiteRtJsRunner())
    return _RUNNER[0]


def write_program(program: Program, strict: bool = False, webgpu: bool = False) -> str:
    if not _SCRATCH:
        _SCRATCH.append(tempfile.TemporaryDirectory(prefix="noxla-litertjs-"))
    scratch = _SCRATCH[0].name
    path = os.path.join(scratch, f"program_{len(os.listdir(scratch))}.tflite")
    with open(path, "wb") as f:
        f.write(tflite_bytes(serving_function(program, strict=strict, webgpu=webgpu, tflite=True), webgpu=webgpu))
    return path


def run_program(program: Program, args: Sequence[np.ndarray], accelerator: str,
                strict: bool = False) -> list[np.ndarray]:
    """The program's outputs on LiteRT.js ``accelerator`` (inputs by signature name), WebGPU's from
    the .tflite exported for it (``target="litertjs-webgpu"``)."""
    path = write_program(program, strict, webgpu=accelerator == "webgpu")
    outs = runner().run(path, dict(zip(program.in_names, args)), accelerator)
    return [outs[n] for n in program.out_names]
