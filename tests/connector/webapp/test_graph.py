"""The association picture's layout."""

from __future__ import annotations

from connector.webapp.graph import MAX_NEIGHBOURS, neighbourhood


def test_neighbourhood_puts_the_memory_in_the_middle_and_its_strongest_links_around() -> None:
    edges = {
        "a": [("b", 0.2), ("c", 0.9), ("gone", 1.0)] + [(f"n{i}", 0.1) for i in range(20)],
        "b": [("a", 0.2), ("c", 0.1)],
        "c": [("a", 0.9), ("b", 0.1)],
    }
    titles = {"a": "Centre", "b": "B", "c": "A very long title that will certainly be shortened", **{f"n{i}": f"N{i}" for i in range(20)}}
    graph = neighbourhood("a", titles, edges)
    assert graph is not None
    centre = graph.nodes[0]
    assert centre.id == "a" and centre.centre and (centre.x, centre.y) == (graph.width / 2, graph.height / 2)
    shown = [node.id for node in graph.nodes[1:]]
    assert len(shown) == MAX_NEIGHBOURS and shown[:2] == ["c", "b"] and "gone" not in shown
    assert all(0 <= node.x <= graph.width and 0 <= node.y <= graph.height for node in graph.nodes)
    assert graph.nodes[1].label.endswith("\u2026") and len(graph.nodes[1].label) <= 26
    strongest = max(graph.edges, key=lambda edge: edge.weight)
    assert strongest.direct and strongest.width > min(edge.width for edge in graph.edges)
    # The link between two neighbours is drawn once, and under the centre's own links.
    between = [edge for edge in graph.edges if not edge.direct]
    assert len(between) == 1 and graph.edges[0] is between[0]


def test_no_picture_without_links() -> None:
    assert neighbourhood("a", {"a": "A"}, None) is None
    assert neighbourhood("a", {"a": "A"}, {"a": [("missing", 0.5)]}) is None
