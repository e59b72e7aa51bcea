"""Mental models: named standing questions whose answer is kept in the brain (``mental-models.json``).

A mental model ("Team directory", "How I like code reviewed") is a question the person wants a
standing answer to, and that answer: a text in which every claim cites the memory ids it rests
on. The answer is written by a model (the host's or the operator's) or by the host itself, and
rewritten ("refreshed") when newer memories match the question (docs/thinking.md).

The file lives at the brain's top level, beside ``pair-review.json``. The reference ``brain``
command line preserves it as an unknown file and never reads it as a memory (memories are the
entries of ``index.json``), so every device, every connector replica and every store backup
sees the same models. Format (JSON, the command line's layout)::

    {
      "version": 1,
      "models": [
        {"id": "mm_<12 hex>", "name": str, "question": str, "created": ISO, "created_by": str,
         "text": str, "cited": [memory ids], "refreshed_at": ISO | null,
         "written_by": {"source": "host" | "operator" | "host-update", "model": str} | null,
         "updated_by": str}
      ]
    }

Writes are `Operation`s (``to_dict`` / ``from_dict``), so they replay on a newer brain after a lost
push (412) and survive in the held-write journal. Cited ids are checked against the brain's live
memories inside the write: a text citing a memory the brain does not hold is refused whole.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar

from common.textsafety import has_unsafe_chars
from connector.engine.format.brain import Brain
from connector.engine.format.jsvalues import datetime_ms
from connector.engine.format.rules import parse_iso
from connector.engine.writes.errors import BrainError
from connector.engine.writes.memorize import is_memory_id
from connector.engine.writes.ops import IdOperation, Operation, register_kind
from connector.engine.writes.txn import WriteTxn

MENTAL_FILE = "mental-models.json"
MAX_MODELS = 50
MAX_NAME = 100
MAX_QUESTION = 1000
MAX_TEXT = 20_000
MAX_CITED = 200
MAX_BY = 200
SOURCES = ("host", "operator", "host-update")
MODEL_ID = re.compile(r"^mm_[0-9a-f]{12}$")
CITATION = re.compile(r"\bmem_[A-Za-z0-9_-]+")

__all__ = [
    "MENTAL_FILE",
    "CreateModel",
    "DeleteModel",
    "MentalModel",
    "SaveModel",
    "check_name",
    "check_question",
    "find_model",
    "is_model_id",
    "mental_models",
    "new_model_id",
]


@dataclass(frozen=True)
class MentalModel:
    """One model as read from the brain (fields of the file, bad values read as empty)."""

    id: str
    name: str
    question: str
    created: str
    created_by: str
    text: str
    cited: tuple[str, ...]
    refreshed_at: str | None
    written_by: Mapping[str, str] | None
    updated_by: str

    def as_dict(self) -> dict[str, Any]:
        """The model for a tool's structured result."""
        return {"id": self.id, "name": self.name, "question": self.question, "created": self.created,
                "text": self.text, "cited": list(self.cited), "refreshed_at": self.refreshed_at,
                "written_by": dict(self.written_by) if self.written_by else None}


def _empty() -> dict[str, Any]:
    return {"version": 1, "models": []}


def _valid(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("models", []), list)


def _string(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _read(record: Mapping[str, Any]) -> MentalModel:
    cited = record.get("cited")
    written = record.get("written_by")
    refreshed = record.get("refreshed_at")
    return MentalModel(
        id=_string(record.get("id")), name=_string(record.get("name")), question=_string(record.get("question")),
        created=_string(record.get("created")), created_by=_string(record.get("created_by")),
        text=_string(record.get("text")),
        cited=tuple(item for item in cited if is_memory_id(item)) if isinstance(cited, list) else (),
        refreshed_at=refreshed if isinstance(refreshed, str) else None,
        written_by={key: _string(written.get(key)) for key in ("source", "model")} if isinstance(written, dict) else None,
        updated_by=_string(record.get("updated_by")),
    )


def _records(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [item for item in doc.get("models", []) if isinstance(item, dict) and is_model_id(item.get("id"))]


def mental_models(brain: Brain) -> list[MentalModel]:
    """The brain's models in the order they were created (none when the file is missing or unreadable)."""
    if MENTAL_FILE not in brain:
        return []
    value = brain.read_json(MENTAL_FILE)
    return [_read(record) for record in _records(value)] if _valid(value) else []


def find_model(models: list[MentalModel], wanted: str) -> MentalModel | None:
    """The model with id ``wanted``, else the one named so (case-insensitively)."""
    for model in models:
        if model.id == wanted:
            return model
    folded = wanted.strip().casefold()
    return next((model for model in models if model.name.casefold() == folded), None)


def is_model_id(value: Any) -> bool:
    """Whether ``value`` is a mental model id (``mm_`` and 12 lowercase hex digits)."""
    return isinstance(value, str) and MODEL_ID.match(value) is not None


def new_model_id() -> str:
    """A fresh model id from a secure source."""
    return f"mm_{secrets.token_hex(6)}"


def check_name(name: str) -> str:
    """A model's name: one plain line of 1 to `MAX_NAME` characters (else `BrainError`)."""
    name = name.strip()
    if not name or len(name) > MAX_NAME or has_unsafe_chars(name):
        raise BrainError(f"a mental model's name is one plain line of 1 to {MAX_NAME} characters")
    return name


def check_question(question: str) -> str:
    """A model's question: 1 to `MAX_QUESTION` characters (else `BrainError`)."""
    question = question.strip()
    if not question or len(question) > MAX_QUESTION:
        raise BrainError(f"a mental model's question is 1 to {MAX_QUESTION:,} characters; say it in a sentence or two")
    return question


def _txn_document(txn: WriteTxn) -> dict[str, Any]:
    doc = txn.json(MENTAL_FILE, _empty, valid=_valid)
    doc.setdefault("models", [])
    return doc


def _record(doc: Mapping[str, Any], model_id: str) -> dict[str, Any] | None:
    return next((record for record in _records(doc) if record["id"] == model_id), None)


@dataclass
class CreateModel(Operation):
    """Add a model (no text yet): a name no other model has, and its question."""

    id: str
    name: str
    question: str
    by: str = ""
    kind: ClassVar[str] = "mental-create"

    def __post_init__(self) -> None:
        if not is_model_id(self.id):
            raise BrainError("a mental model id looks like mm_0123456789ab")
        self.name, self.question = check_name(self.name), check_question(self.question)

    def apply(self, brain: Brain, now: datetime) -> dict[str, Any]:
        txn = WriteTxn(brain, now)
        doc = _txn_document(txn)
        records = _records(doc)
        present = _record(doc, self.id)
        if present is not None:  # a replay after a lost acknowledgement
            return {"model": _read(present).as_dict(), "already_present": True}
        if any(_string(record.get("name")).casefold() == self.name.casefold() for record in records):
            raise BrainError(f"a mental model named {self.name!r} exists already; choose another name")
        if len(records) >= MAX_MODELS:
            raise BrainError(f"this brain holds {MAX_MODELS} mental models already, the most it keeps; delete one first")
        record = {"id": self.id, "name": self.name, "question": self.question, "created": txn.now_iso,
                  "created_by": self.by[:MAX_BY], "text": "", "cited": [], "refreshed_at": None,
                  "written_by": None, "updated_by": ""}
        doc["models"].append(record)
        txn.mark(MENTAL_FILE)
        txn.commit()
        return {"model": _read(record).as_dict()}

    def to_dict(self) -> dict[str, Any]:
        return {"op": self.kind, "id": self.id, "name": self.name, "question": self.question, "by": self.by}

    @classmethod
    def from_dict(cls, value: Mapping[str, Any]) -> CreateModel:
        """From `to_dict`'s form."""
        return cls(str(value.get("id", "")), str(value.get("name", "")), str(value.get("question", "")),
                   str(value.get("by", "")))


def cited_ids(text: str, cited: tuple[str, ...] | list[str] = ()) -> list[str]:
    """Every memory id ``text`` cites, then those of ``cited`` it does not, in order, once each."""
    return list(dict.fromkeys([*CITATION.findall(text), *cited]))


@dataclass
class SaveModel(Operation):
    """A model's new text (a refresh's answer, or the host's rewrite) with the memories it cites.

    Every cited id (in the text, or listed) must be a live memory of the brain, else nothing is
    written. ``refreshed_at`` is drawn by the first successful apply and kept by replays.
    """

    id: str
    text: str
    cited: list[str]
    source: str
    model: str = ""
    by: str = ""
    refreshed_at: str | None = None
    kind: ClassVar[str] = "mental-save"

    def __post_init__(self) -> None:
        if not is_model_id(self.id):
            raise BrainError("a mental model id looks like mm_0123456789ab")
        self.text = self.text.strip()
        if not self.text:
            raise BrainError("the mental model's text must not be empty")
        if len(self.text) > MAX_TEXT:
            raise BrainError(f"the mental model's text has {len(self.text):,} characters; at most {MAX_TEXT:,} are kept")
        if self.source not in SOURCES:
            raise BrainError(f"'source' must be one of {', '.join(SOURCES)}")
        self.cited = cited_ids(self.text, self.cited)
        malformed = [item for item in self.cited if not is_memory_id(item)]
        if malformed:
            raise BrainError("these are not memory ids: " + ", ".join(item[:40] for item in malformed[:10]))
        if len(self.cited) > MAX_CITED:
            raise BrainError(f"a mental model cites at most {MAX_CITED} memories")

    def apply(self, brain: Brain, now: datetime) -> dict[str, Any]:
        txn = WriteTxn(brain, now)
        doc = _txn_document(txn)
        record = _record(doc, self.id)
        if record is None:
            raise BrainError("no such mental model (it may have been deleted)")
        live = txn.memories() if txn.read("index.json") is not None else {}
        unknown = [memory_id for memory_id in self.cited if memory_id not in live]
        if unknown:
            raise BrainError("the text cites memories this brain does not hold: " + ", ".join(unknown[:10])
                             + ". Cite only ids brain_recall or the refresh's evidence returned; nothing was saved")
        self.refreshed_at = self.refreshed_at or txn.now_iso
        record.update(text=self.text, cited=list(self.cited), refreshed_at=self.refreshed_at,
                      written_by={"source": self.source, "model": self.model[:MAX_BY]}, updated_by=self.by[:MAX_BY])
        txn.mark(MENTAL_FILE)
        txn.commit()
        return {"model": _read(record).as_dict()}

    def to_dict(self) -> dict[str, Any]:
        return {"op": self.kind, "id": self.id, "text": self.text, "cited": list(self.cited), "source": self.source,
                "model": self.model, "by": self.by, "refreshed_at": self.refreshed_at}

    @classmethod
    def from_dict(cls, value: Mapping[str, Any]) -> SaveModel:
        """From `to_dict`'s form."""
        return cls(str(value.get("id", "")), str(value.get("text", "")), list(value.get("cited") or []),
                   str(value.get("source", "")), str(value.get("model", "")), str(value.get("by", "")),
                   value.get("refreshed_at"))


class DeleteModel(IdOperation):
    """Remove a model (its text goes with it; the memories it cited stay)."""

    kind: ClassVar[str] = "mental-delete"

    def apply(self, brain: Brain, now: datetime) -> dict[str, Any]:
        txn = WriteTxn(brain, now)
        doc = _txn_document(txn) if txn.read(MENTAL_FILE) is not None else None
        record = _record(doc, self.id) if doc is not None else None
        if record is None or doc is None:
            return {"deleted": self.id, "already_gone": True}
        doc["models"] = [item for item in doc["models"] if item is not record]
        txn.mark(MENTAL_FILE)
        txn.commit()
        return {"deleted": self.id, "name": _string(record.get("name"))}

    @classmethod
    def from_dict(cls, value: Mapping[str, Any]) -> DeleteModel:
        """From `to_dict`'s form."""
        return cls(str(value.get("id", "")))


def newer_matches(model: MentalModel, hits: list[Mapping[str, Any]], created_ms: Mapping[str, int | None]) -> list[str]:
    """Ids of recalled memories (``hits`` of the model's question) written after its last refresh,
    other than those it cites.

    A model never written has no text to be stale: it reports nothing here (its state is "empty").
    ``created_ms`` maps memory ids to their creation time in milliseconds (the recall index's).
    """
    since = parse_iso(model.refreshed_at) if model.refreshed_at else None
    if since is None:
        return []
    since_ms = datetime_ms(since)
    newer = []
    for hit in hits:
        memory_id = hit.get("id")
        created = created_ms.get(memory_id) if isinstance(memory_id, str) else None
        if isinstance(memory_id, str) and created is not None and created > since_ms and memory_id not in model.cited:
            newer.append(memory_id)
    return newer


register_kind(CreateModel.kind, CreateModel.from_dict)
register_kind(SaveModel.kind, SaveModel.from_dict)
register_kind(DeleteModel.kind, DeleteModel.from_dict)
