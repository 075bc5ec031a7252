"""TensorFlow's import without the Keras it loads eagerly.

``tensorflow/__init__.py`` ends by importing ``keras.src.optimizers`` "so that registrations
happen at load time", inside a ``try`` that ignores an ImportError. With Keras 3 installed that
loads all of Keras and, through it, pandas, IPython and h5py: about a fifth of TF's import (1 of 5
CPU s) and 65 MB of the process, none of which noxla uses. While TensorFlow's own ``__init__``
runs, and only then, loading ``keras`` fails here, so TF skips that line; ``tf.keras`` stays a
lazy attribute, and a later ``import keras`` (a user's model) loads it as usual.
"""
from __future__ import annotations

import sys


def _tensorflow_initializing() -> bool:
    spec = getattr(sys.modules.get("tensorflow"), "__spec__", None)
    return bool(spec is not None and getattr(spec, "_initializing", False))


class _Declined:
    """The loader of ``keras`` while TF initializes: the spec is Keras's own (TF's ``find_spec``
    calls read its path), loading it is refused."""

    def create_module(self, spec):
        if _FINDER in sys.meta_path:  # TF loads it once, at the end of its __init__
            sys.meta_path.remove(_FINDER)
        raise ModuleNotFoundError("Keras loads on first use, not in TensorFlow's import (noxla)", name=spec.name)

    def exec_module(self, module):  # never reached: create_module raises
        raise ModuleNotFoundError(module.__name__)


class _DeferKeras:
    """A ``sys.meta_path`` finder: ``keras`` with a refusing loader while TensorFlow initializes."""

    def find_spec(self, name, path=None, target=None):
        if name != "keras" or not _tensorflow_initializing():
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                spec.loader = _Declined()
                return spec
        return None


_FINDER = _DeferKeras()


def install() -> None:
    """Before TensorFlow's first import; a no-op once it is imported (or if Keras already is)."""
    if "tensorflow" in sys.modules or "keras" in sys.modules or _FINDER in sys.meta_path:
        return
    sys.meta_path.insert(0, _FINDER)
