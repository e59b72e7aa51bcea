"""Files as the tools that make them write them (from their public documentation), for import tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def obsidian_vault(root: Path) -> Path:
    """An Obsidian vault: notes in folders, YAML front matter (list and string tags), a note with
    none, an empty note, the app's .obsidian folder and an attachment."""
    vault = root / "Vault"
    (vault / ".obsidian").mkdir(parents=True)
    (vault / ".obsidian" / "app.json").write_text('{"promptDelete": false}')
    (vault / "Projects" / "Garden").mkdir(parents=True)
    (vault / "Daily").mkdir()
    (vault / "Projects" / "Garden" / "Tomatoes.md").write_text(
        "---\ntags:\n  - garden\n  - \"#plants\"\naliases: [toms]\ncreated: 2024-03-01\n---\n"
        "# Tomato plan\n\nTomatoes go in the south bed; water them at dawn. See [[Compost]].\n")
    (vault / "Compost.md").write_text("---\ntags: garden, soil\n---\nThe compost bin is turned every second Sunday.\n")
    (vault / "Daily" / "2024-05-02.md").write_text("Call the plumber about the boiler's pressure valve.\n")
    (vault / "Empty.md").write_text("---\ntags: [todo]\n---\n\n")
    (vault / "Projects" / "diagram.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    return vault


def basic_memory_note(root: Path) -> Path:
    """A Basic Memory note: title, type note, permalink and tags in the front matter, observations."""
    folder = root / "basic-memory" / "coffee"
    folder.mkdir(parents=True)
    note = folder / "coffee-brewing-methods.md"
    note.write_text(
        "---\ntitle: Coffee Brewing Methods\ntype: note\npermalink: coffee/coffee-brewing-methods\n"
        "tags:\n- '#coffee'\n- brewing\n---\n\n# Coffee Brewing Methods\n\n## Observations\n"
        "- [method] Pour over gives a cleaner cup than the French press #brewing\n"
        "- [preference] Medium roast beans, ground just before brewing\n")
    return root / "basic-memory"


MEM0_RESULTS: dict[str, Any] = {"results": [
    {"id": "892db2ae-06d9-49e5-8b3e-585ef9b85b8e", "memory": "Is a vegetarian and allergic to nuts",
     "hash": "814ed6a9d5d1b1d7e1d5a4ef8e2a1e7e", "metadata": {"source": "onboarding"}, "categories": ["food"],
     "created_at": "2024-07-20T01:30:21.154915-07:00", "updated_at": "2024-07-25T04:12:09.447815-07:00",
     "user_id": "alex", "agent_id": None},
    {"id": "c1d7f0a2-7a0e-4b6f-9f43-1f2f0b3b6a11", "memory": "Plays tennis on Saturday mornings",
     "hash": "2b1e", "metadata": None, "created_at": "2024-07-21T09:00:00-07:00", "updated_at": None,
     "user_id": "alex", "agent_id": "travel-assistant"},
]}
MEM0_LIST: list[dict[str, Any]] = [
    {"id": "f00d", "memory": "Prefers window seats on long flights", "user_id": "sam",
     "created_at": "2024-08-01T10:00:00Z", "updated_at": "2024-08-02T10:00:00Z"},
]


def write_json(path: Path, document: Any) -> Path:
    path.write_text(json.dumps(document, indent=1))
    return path


def chatgpt_conversations() -> list[dict[str, Any]]:
    """ChatGPT's conversations.json: message nodes linked by parent, the shown thread ending at current_node
    (an edited-away branch and a hidden system message included)."""
    def node(node_id: str, parent: str | None, children: list[str], role: str | None, text: str | None,
             hidden: bool = False) -> dict[str, Any]:
        message = None if role is None else {
            "id": node_id, "author": {"role": role, "name": None, "metadata": {}}, "create_time": 1714000000.0,
            "content": {"content_type": "text", "parts": [text]}, "status": "finished_successfully",
            "metadata": {"is_visually_hidden_from_conversation": True} if hidden else {}}
        return {"id": node_id, "message": message, "parent": parent, "children": children}

    return [{
        "title": "Moving to Lisbon", "create_time": 1714000000.0, "update_time": 1714000300.0,
        "conversation_id": "6630a1b2-0000-4000-8000-000000000001", "current_node": "n4",
        "mapping": {
            "root": node("root", None, ["n0"], None, None),
            "n0": node("n0", "root", ["n1"], "system", "You are ChatGPT.", hidden=True),
            "n1": node("n1", "n0", ["n2", "n2b"], "user", "I'm moving to Lisbon in March with my dog Bruno."),
            "n2b": node("n2b", "n1", [], "assistant", "EDITED AWAY BRANCH"),
            "n2": node("n2", "n1", ["n3"], "assistant", "Congratulations! Do you need help with the dog's papers?"),
            "n3": node("n3", "n2", ["n4"], "user", "Yes, Bruno needs an EU pet passport."),
            "n4": node("n4", "n3", [], "assistant", "You can get one from an authorised vet."),
        },
    }]


def claude_conversations() -> list[dict[str, Any]]:
    """Claude's conversations.json (its data export): uuid, name, chat_messages with sender and text."""
    return [{
        "uuid": "2f6c7c8e-1111-4a8b-9c1d-222222222222", "name": "Standing desk setup",
        "created_at": "2024-06-10T08:00:00.000000+00:00", "updated_at": "2024-06-10T08:10:00.000000+00:00",
        "account": {"uuid": "acct"},
        "chat_messages": [
            {"uuid": "m1", "sender": "human", "text": "My desk is 72 cm high and I am 1.80 m tall.",
             "content": [{"type": "text", "text": "My desk is 72 cm high and I am 1.80 m tall."}],
             "created_at": "2024-06-10T08:00:00.000000+00:00", "attachments": [], "files": []},
            {"uuid": "m2", "sender": "assistant", "text": "",
             "content": [{"type": "text", "text": "For your height a standing desk at about 110 cm suits."}],
             "created_at": "2024-06-10T08:00:05.000000+00:00", "attachments": [], "files": []},
        ],
    }]


def extraction(*memories: tuple[str, str, str]) -> str:
    """A model's extraction answer (brain_extract's strict JSON) with (title, type, content) memories."""
    return json.dumps({"memories": [{"title": title, "type": kind, "content": content, "tags": ["imported"]}
                                    for title, kind, content in memories]})
