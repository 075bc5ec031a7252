"""``tf`` for the rules, TensorFlow imported on first use.

Registering the rules and checking a program read only their declarations (parameters, dtypes,
limitations), so ``noxla.check``, the limitations table and ``import lowering_rules`` need no
TensorFlow: its import alone costs about 2 s and 450 MB. A rule's first ``tf.<name>``, when a
program is lowered, imports it. Nothing at a rule module's top level may read ``tf``
(tests/test_architecture.py checks that importing the rules leaves TensorFlow unimported).

A lowering may record its ops instead (``noxla.graph``): it passes its own ``tf`` stand-in to the
interpreter's ``Lowering``, which installs it here (``using``) while it lowers; the rules do not
know which one they speak to.
"""
from __future__ import annotations

import contextlib
import contextvars
import importlib


class _TensorFlow:
    """Forwards attribute reads to the ``tensorflow`` module, importing it on the first."""
    __slots__ = ()

    def __getattr__(self, name: str):
        backend = _BACKEND.get()
        if backend is not None:
            return getattr(backend, name)
        module = _MODULE[0]
        if module is None:
            module = _MODULE[0] = importlib.import_module("tensorflow")
        return getattr(module, name)

    def __repr__(self) -> str:
        return "<tensorflow, imported on first use (lowering_rules.core.lazy_tensorflow)>"


_MODULE: list = [None]
_BACKEND: contextvars.ContextVar = contextvars.ContextVar("noxla_tf_backend", default=None)
tf = _TensorFlow()


@contextlib.contextmanager
def using(backend):
    """``tf`` is ``backend`` inside (None: TensorFlow itself)."""
    token = _BACKEND.set(backend)
    try:
        yield
    finally:
        _BACKEND.reset(token)


def xla_ops():
    """TF's ``gen_xla_ops`` (ops a rule emits only where the TFLite converter alone reads the graph,
    ``LoweringFor.tflite_converter``: their legalization's input form), or the installed backend's
    recording of them (``noxla.graph.converter_ops``)."""
    backend = _BACKEND.get()
    if backend is not None:
        return backend.xla_ops
    from tensorflow.compiler.tf2xla.ops import gen_xla_ops
    return gen_xla_ops


def op(path: str):
    """``tf.<path>`` (``"math.add"``) as a function that looks it up when called: for the rules'
    tables of TF functions, built when the module is imported."""
    parts = path.split(".")

    def call(*args, **kwargs):
        fn = tf
        for part in parts:
            fn = getattr(fn, part)
        return fn(*args, **kwargs)
    call.__name__ = call.__qualname__ = parts[-1]
    return call
