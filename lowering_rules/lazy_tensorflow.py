"""``tf`` for the rules, TensorFlow imported on first use.

Registering the rules and checking a program read only their declarations (parameters, dtypes,
limitations), so ``noxla.check``, the limitations table and ``import lowering_rules`` need no
TensorFlow: its import alone costs about 2 s and 450 MB. A rule's first ``tf.<name>``, when a
program is lowered, imports it. Nothing at a rule module's top level may read ``tf``
(tests/test_architecture.py checks that importing the rules leaves TensorFlow unimported).
"""
from __future__ import annotations

import importlib


class _TensorFlow:
    """Forwards attribute reads to the ``tensorflow`` module, importing it on the first."""
    __slots__ = ()

    def __getattr__(self, name: str):
        module = _MODULE[0]
        if module is None:
            module = _MODULE[0] = importlib.import_module("tensorflow")
        return getattr(module, name)

    def __repr__(self) -> str:
        return "<tensorflow, imported on first use (lowering_rules.lazy_tensorflow)>"


_MODULE: list = [None]
tf = _TensorFlow()


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
