"""Tending a brain over time: similar memories, their review, mental models.
The top of the engine: may import `format`, `recall` and `writes`."""
