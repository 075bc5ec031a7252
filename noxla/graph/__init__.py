"""noxla's own graph of TF ops (issue 41): the rules' ops recorded without TensorFlow
(``lower.record_program``); its writers are in ``noxla.writers`` and the choice between them
and TF's path in ``noxla.pipeline.graph_path``. See docs/graph.md."""
