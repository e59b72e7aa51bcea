"""The brain engine: pure logic over an in-memory brain (no HTTP, no store), in four subpackages from
the bottom up (`LAYERS`): each imports only its own subpackage and those below it, never one above
(tests/test_architecture.py checks it).

- `format`: the reference brain on disk: files, archives, JSON and front matter, the format's rules.
- `recall`: recall as `brain recall` does it, the text and vector channels, embedding models, fusion.
- `writes`: operations and their transaction, memorize, restore, quarantine, credentials.
- `tending`: keeping a brain tidy over time: similar memories, their review, mental models.
"""

LAYERS = ("format", "recall", "writes", "tending")
