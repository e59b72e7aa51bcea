"""Recall: exact recall as `brain recall` does it, its index, the text and vector channels, fusion.
Imports `format` only (never `writes` or `tending`)."""
