"""What TensorFlow's TFLite converter is given (GraphDef rewrites) and what is fixed in the file
it writes."""
