"""The reference brain on disk: the in-memory brain, archives, JSON, front matter, the format's rules.
The bottom of the engine: imports nothing from the other engine subpackages."""
