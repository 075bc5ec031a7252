"""The TF.js graph model: written from noxla's graph (``from_graph``) or from TF's GraphDef on
TF's path (``graph_def``, ``optimize``, ``fusions``, ``half_floats``), by ``writer`` over the
node interface of ``graph``; ``ops`` is the check's backstop of the ops TF.js runs."""

# Here, not in ``writer``: the export's options take it as a default, and a .tflite export need
# not import the TF.js writer for it.
DEFAULT_SHARD_BYTES = 4 * 1024 * 1024  # 4 MiB, TF.js's converter's default: what browsers cache
