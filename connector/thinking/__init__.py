"""Thinking over the brain: where a language model comes from (the operator's endpoint, or none),
the evidence pack quoted to it, and the checks on what it answers. Pure parts apart from I/O
(`operator.py` and `locality.py` do the network)."""
