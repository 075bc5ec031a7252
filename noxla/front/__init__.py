"""The front end: a function traced to a ``Program`` (``tracing``), its shapes (``shapes``,
``shape_buckets``), and its lowering by the rules (``interpreter``), into TF ops (``lowering``)
or noxla's graph (``noxla.graph``), in the variant a target needs (``lowering_variants``)."""
