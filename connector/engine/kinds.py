"""Every operation kind, registered: read kept operations (pending writes, held writes) back here.

Each module that defines operation kinds registers them with `writes.ops.register_kind` when it
is imported; this module imports them all, so `operation_from_dict` from here knows every kind.
It sits above the engine's layers (connector/engine/__init__.py) and nothing in them imports it.
"""

from __future__ import annotations

from connector.engine.tending import mental, review  # noqa: F401  (imported for the kinds they register)
from connector.engine.writes import restore  # noqa: F401  (likewise)
from connector.engine.writes.ops import operation_from_dict

__all__ = ["operation_from_dict"]

