"""The export pipeline: the up-front check and the options (``preflight``), then each output
written by noxla's graph (``graph_path``, ``graph_signatures``) or through TensorFlow
(``tf_path``)."""
