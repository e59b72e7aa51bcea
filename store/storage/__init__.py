"""Storage backends: the interface (base), local disk (local), sealing at rest (sealing)."""
