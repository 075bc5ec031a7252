"""``.litertlm`` bundles through LiteRT-LM's builder, and its engine."""
