"""Command-line entry points: `brain-store` (operators) and `brain-connector`."""
