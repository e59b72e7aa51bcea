"""The association neighbourhood of a memory, laid out for a picture (an SVG the server draws).

Pure layout, no I/O: the memory in the middle, its strongest neighbours on a circle
around it, the links between them. Line width and a printed number give each link's
weight, so the picture needs no legend; it needs no script either.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from connector.engine.format.graphemes import shortened_to_columns

MAX_NEIGHBOURS = 12
WIDTH, HEIGHT = 640, 420
RADIUS = 150
LABEL_CHARS = 26  # at most, in columns: a Chinese or Japanese character (or an emoji) takes two
# About how wide a column of a label is in the picture's 13 px type, and what is kept clear at
# its edge: a label is cut to the room its side of the picture leaves it. Cut to 26 characters
# only, the right-hand labels ran past the picture's edge and were clipped mid-character (a
# Japanese title of 15 characters ended at 666 px of 640).
COLUMN_PX = 7.0
EDGE_PX = 4.0


@dataclass(frozen=True)
class Node:
    """One memory in the picture."""

    id: str
    label: str
    x: float
    y: float
    anchor: str  # text-anchor of the label: start, middle or end
    label_x: float
    label_y: float
    centre: bool = False


@dataclass(frozen=True)
class Edge:
    """One association between two drawn memories."""

    x1: float
    y1: float
    x2: float
    y2: float
    weight: float
    width: float
    direct: bool  # touches the memory in the middle

    @property
    def mid(self) -> tuple[float, float]:
        """Where the weight is printed."""
        return (self.x1 + self.x2) / 2, (self.y1 + self.y2) / 2


@dataclass(frozen=True)
class Graph:
    """A laid-out neighbourhood."""

    nodes: list[Node]
    edges: list[Edge]
    width: int = WIDTH
    height: int = HEIGHT


def _label(text: str, anchor: str, label_x: float) -> str:
    """``text`` cut to what fits between ``label_x`` and the picture's edge on its ``anchor`` side."""
    if anchor == "start":
        room = WIDTH - label_x
    elif anchor == "end":
        room = label_x
    else:
        room = 2 * min(label_x, WIDTH - label_x)
    return shortened_to_columns(text, max(2, min(LABEL_CHARS, int((room - EDGE_PX) / COLUMN_PX))))


def neighbourhood(centre: str, titles: dict[str, str], edges: dict[str, list[tuple[str, float]]] | None) -> Graph | None:
    """The picture of ``centre`` and its strongest neighbours; None without any link.

    ``titles`` names the memories that exist (others are not drawn); ``edges`` is the
    brain's adjacency (BrainIndex.edges).
    """
    if not edges:
        return None
    direct = [(other, weight) for other, weight in edges.get(centre, []) if other in titles and other != centre]
    direct.sort(key=lambda item: (-item[1], item[0]))
    direct = direct[:MAX_NEIGHBOURS]
    if not direct:
        return None
    cx, cy = WIDTH / 2, HEIGHT / 2
    nodes = [Node(centre, _label(titles.get(centre, centre), "middle", cx), cx, cy, "middle", cx, cy + 32, centre=True)]
    positions = {centre: (cx, cy)}
    for position, (other, _) in enumerate(direct):
        angle = -math.pi / 2 + 2 * math.pi * position / len(direct)
        x, y = cx + RADIUS * 1.45 * math.cos(angle), cy + RADIUS * math.sin(angle)
        positions[other] = (x, y)
        cos = math.cos(angle)
        anchor = "middle" if abs(cos) < 0.3 else ("start" if cos > 0 else "end")
        label_x = x + (0 if anchor == "middle" else (12 if anchor == "start" else -12))
        label_y = y + (-14 if math.sin(angle) < -0.3 else (22 if math.sin(angle) > 0.3 else 5))
        nodes.append(Node(other, _label(titles.get(other, other), anchor, label_x), x, y, anchor, label_x, label_y))
    drawn: list[Edge] = []
    seen: set[tuple[str, str]] = set()
    for node in positions:
        for other, weight in edges.get(node, []):
            if other not in positions or other == node:
                continue
            pair = (min(node, other), max(node, other))
            if pair in seen:
                continue
            seen.add(pair)
            (x1, y1), (x2, y2) = positions[node], positions[other]
            drawn.append(Edge(x1, y1, x2, y2, weight, 1.0 + 8.0 * max(0.0, min(1.0, weight)),
                              direct=centre in pair))
    # Lighter links between neighbours first, so the centre's links are drawn on top.
    drawn.sort(key=lambda edge: edge.direct)
    return Graph(nodes=nodes, edges=drawn)
