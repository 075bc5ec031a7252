"""TF building blocks shared by several rules."""
from __future__ import annotations

import numpy as np
import tensorflow as tf


def tf_dtype(dtype) -> tf.DType:
    return tf.as_dtype(np.dtype(dtype))
