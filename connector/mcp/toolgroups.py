"""The table of tool groups beyond BrainTools' own tools, which the server assembles.

A module of tools that builds on `BrainTools` (thinking.py, mental.py) registers here how to
build its group; `BrainTools` builds every registered group, in the order registered, and
dispatches their tools. tools.py thereby never imports the modules built on it (no import
circle). server.py imports every such module, so a running connector serves them all.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

__all__ = ["TOOL_GROUPS", "GroupFactory", "ToolGroup", "register_tool_group"]


class ToolGroup(Protocol):
    """A group of tools: its handlers by tool name."""

    def handlers(self) -> Mapping[str, Any]: ...


# (the BrainTools, its model source or None, the groups built before this one) -> the group.
GroupFactory = Callable[[Any, Any, Mapping[str, ToolGroup]], ToolGroup]
TOOL_GROUPS: dict[str, GroupFactory] = {}


def register_tool_group(name: str, factory: GroupFactory) -> None:
    """Have every `BrainTools` built from now on build the group ``name`` with ``factory``."""
    TOOL_GROUPS[name] = factory
