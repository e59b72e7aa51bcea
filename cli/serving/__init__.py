"""Serving from several worker processes, shared by `brain-store serve` and `brain-connector serve`."""
