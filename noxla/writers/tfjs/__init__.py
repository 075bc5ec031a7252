"""The TF.js graph model: written from noxla's graph (``from_graph``) or from TF's GraphDef on
TF's path (``graph_def``, ``optimize``, ``fusions``, ``half_floats``), by ``writer`` over the
node interface of ``graph``; ``ops`` is the check's backstop of the ops TF.js runs."""
