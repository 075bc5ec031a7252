"""The TensorFlow-only writers' pieces: the graph replayed as TF ops, TF gradients of a
converted function, and large weights as stand-ins through TF's converter."""
