"""Passes over an unpacked .tflite flatbuffer (``ModelT``; flatbuffer objects in, flatbuffer
objects out), its schema, and the form of a file past 2 GB."""
