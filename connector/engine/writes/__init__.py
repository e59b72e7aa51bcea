"""Writes: operations, the write transaction, memorize, restore, quarantine and credential checks.
Imports `format` and `recall` only (never `tending`)."""
