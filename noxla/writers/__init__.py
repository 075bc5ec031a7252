"""The writers of each target: TFLite (``tflite``), TF.js (``tfjs``), TensorFlow's own path
(``tf``), LiteRT-LM bundles (``litertlm``), and what several share (``quantize``,
``half_float_carry``)."""
