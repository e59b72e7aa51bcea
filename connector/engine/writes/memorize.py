"""What a memorize write is made of, and how one memory is added to a brain.

`MemoryInput` is one memory as the command line's `brain memorize` JSON describes it
(validated when built, so a bad request fails before touching anything);
`add_memory` performs every step of brain-format.md's memorize on a `WriteTxn`.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from common.textsafety import has_lone_surrogate, is_blank, one_line
from connector.engine.format.brain import ASSOCIATIONS, INDEX
from connector.engine.format.frontmatter import ENCODING_CONTEXT_KEYS, render_memory_file
from connector.engine.format.graphemes import boundary_at_or_before
from connector.engine.format.rules import (
    COGNITIVE_TYPES,
    MANUAL_EDGE_WEIGHT,
    MEMORY_TYPES,
    ORIGINS,
    TAG_OVERLAP_EDGE_WEIGHT,
    TAG_OVERLAP_MIN_SHARED,
    initial_decay_rate,
    initial_strength,
    iso_ms,
    not_an_instant,
    parse_iso,
    token_estimate,
)
from connector.engine.format.titles import plain_title
from connector.engine.writes.errors import BrainError
from connector.engine.writes.quarantine import quarantine_mode, quarantine_reasons
from connector.engine.writes.txn import WriteTxn

# What separates the items of a list written as one string: the comma, and the commas a Chinese
# or Japanese keyboard types in its place (full-width ，, ideographic 、, half-width ､).
LIST_SEPARATORS = re.compile("[,\uff0c\u3001\uff64]")
DEFAULT_SALIENCE = 0.5
DEFAULT_CONFIDENCE = 0.8
MAX_PATH_LENGTH = 1024
MAX_SEGMENT_LENGTH = 200
# A part of a path is a file or folder name wherever the brain is unpacked (the `brain` command
# line's directory): at most 255 bytes there (ext4, APFS), so 85 Chinese or Japanese characters.
# A longer one was saved, and every device pulling the brain then failed to unpack it.
MAX_SEGMENT_BYTES = 255
# The longest content and title a memory is written with (brain_memorize, the web app, an import).
MAX_CONTENT_CHARS = 50_000
MAX_TITLE_CHARS = 1000
# The most its other fields hold: what brain_memorize takes (its input schema declares them,
# connector/mcp/definitions.py) and what an import is held to (`over_limit`). A list (tags,
# related, supersedes, the context's topics) MAX_LIST_ITEMS items; a tag, a project, a task, an
# agent or a pin scope MAX_CONTEXT_CHARS; a memory id MAX_ID_CHARS; a source MAX_SOURCE_CHARS (a
# file's path in an archive, MAX_PATH_LENGTH, with the archive's name and who imported it).
MAX_LIST_ITEMS = 200
MAX_CONTEXT_CHARS = 300
MAX_ID_CHARS = 200
MAX_SOURCE_CHARS = 2 * MAX_PATH_LENGTH
SLUG_LENGTH = 48
MEMORY_ID = re.compile(r"^mem_\d{8}_[0-9a-f]{6}$")
_RESERVED_TOP = frozenset({"_archived", ".sync", ".cloud"})


# Kana a romanisation reads with the kana before it: the small ya/yu/yo (キャ is "kya", not
# "kiya"), the small vowels (フィ is "fi", チェ is "che"), and the small tsu, which doubles the
# consonant after it (ッシュ is "sshu"). anyascii reads each kana on its own.
_SMALL_Y = dict(zip("ゃゅょャュョ", "auoauo", strict=True))
_SMALL_VOWEL = dict(zip("ぁぃぅぇぉァィゥェォ", "aiueoaiueo", strict=True))
_SMALL_TSU = frozenset("っッ")
_KANA = re.compile("[\u3040-\u30ff]+")


def _romanised_kana(run: str) -> str:
    """A run of hiragana and katakana in Hepburn-like romaji (``キャッシュ`` -> ``kyasshu``)."""
    from anyascii import anyascii

    syllables: list[str] = []
    double_next = False
    for char in run:
        previous = syllables[-1] if syllables else ""
        if char in _SMALL_Y and previous.endswith("i") and len(previous) > 1:
            consonant = previous[:-1]
            joiner = "" if consonant.endswith(("sh", "ch", "j")) else "y"
            syllables[-1] = consonant + joiner + _SMALL_Y[char]
        elif char in _SMALL_VOWEL and previous[-1:] in ("a", "i", "u", "e", "o"):
            consonant = previous.rstrip("aiueo") or "w"  # ウィ is "wi"
            syllables[-1] = consonant + _SMALL_VOWEL[char]
        elif char in _SMALL_TSU:
            double_next = True
        else:
            syllable = anyascii(char)
            if double_next and syllable[:1].isalpha() and syllable[:1] not in "aiueon":
                syllable = ("t" if syllable.startswith("ch") else syllable[0]) + syllable
            double_next = False
            syllables.append(syllable)
    return "".join(syllables)


def transliterate(text: str) -> str:
    """``text`` in ASCII letters (anyascii: "Müller" -> "Muller", "蓝色花盆" -> "Lan Se Hua Pen",
    each Chinese character a syllable of its own; kana as romaji, "キャッシュ" -> "kyasshu");
    ASCII text is returned as it is."""
    if text.isascii():
        return text
    from anyascii import anyascii

    parts = []
    at = 0
    for run in _KANA.finditer(text):
        parts.append(_other_characters(text[at:run.start()], anyascii))
        parts.append(_romanised_kana(run.group()))
        at = run.end()
    parts.append(_other_characters(text[at:], anyascii))
    return "".join(parts)


def _other_characters(text: str, anyascii: Callable[[str], str]) -> str:
    parts = []
    for char in text:
        if char.isascii():
            parts.append(char)
        elif unicodedata.name(char, "").startswith("CJK"):
            parts.append(f" {anyascii(char)} ")  # ideographs read as separate syllables
        else:
            parts.append(anyascii(char))
    return "".join(parts)


def slugify(text: str, *, length: int = SLUG_LENGTH, fallback: str = "memory") -> str:
    """Lower-case; runs of characters other than a-z and 0-9 become ``-``; trimmed; cut.

    ASCII titles slug exactly as the reference command line slugs them; other titles are
    transliterated first (``Dr. Müller's`` -> ``dr-muller-s``, not ``dr-m-ller-s``; a Chinese
    title gets its pinyin instead of the fallback ``memory``)."""
    # NFKC first: half-width katakana (ｷｬｯｼｭ) and kana with a combining sound mark (macOS's
    # テ + ゛) read as the kana they show; ASCII is unchanged by it.
    slug = re.sub(r"[^a-z0-9]+", "-", transliterate(unicodedata.normalize("NFKC", text)).lower()).strip("-")
    slug = slug[:length].strip("-")
    return slug or fallback


def _text(value: Any, name: str, *, required: bool = False, default: str = "") -> str:
    if value is None:
        if required:
            raise BrainError(f"'{name}' is required")
        return default
    if not isinstance(value, str):
        raise BrainError(f"'{name}' must be a string")
    if has_lone_surrogate(value):
        raise BrainError(_lone_surrogate(name))
    if required and is_blank(value):
        raise BrainError(_empty(name, value))
    return value


def _lone_surrogate(name: str) -> str:
    """The refusal of a text no file can hold: a lone surrogate (a JSON or YAML "\\ud800" escape)
    is no UTF-8 character, and the brain's files are UTF-8 (writing it failed with a 500)."""
    return f"'{name}' holds a lone surrogate (an escape like \\ud800 that is half of a character), which is not text"


def _empty(name: str, value: str) -> str:
    """The refusal of a required text that shows nothing (saying why when it is not plainly empty)."""
    if value.strip():
        return f"'{name}' must not be empty: it holds only invisible or control characters"
    return f"'{name}' must not be empty"


def _string_list(value: Any, name: str) -> tuple[str, ...]:
    """A list of strings (a comma-separated string is accepted too, `LIST_SEPARATORS`), de-duplicated."""
    if value is None:
        return ()
    if isinstance(value, str):
        # Models sometimes send a list as JSON text ('["a", "b"]'); else comma-separated.
        stripped = value.strip()
        decoded = None
        if stripped.startswith("["):
            try:
                decoded = json.loads(stripped)
            except ValueError:
                decoded = None
        value = decoded if isinstance(decoded, list) else LIST_SEPARATORS.split(value)
    if not isinstance(value, (list, tuple)):
        raise BrainError(f"'{name}' must be a list of strings")
    seen: dict[str, None] = {}
    for item in value:
        if not isinstance(item, str):
            raise BrainError(f"'{name}' must be a list of strings")
        if has_lone_surrogate(item):
            raise BrainError(_lone_surrogate(name))
        # One line each: a newline in a tag or id would print as extra lines wherever it is shown.
        item = one_line(item).strip()
        if item:
            seen.setdefault(item, None)
    return tuple(seen)


def _unit(value: Any, name: str, default: float) -> float:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise BrainError(f"'{name}' must be a number between 0 and 1")
    if not 0 <= value <= 1:
        raise BrainError(f"'{name}' must be between 0 and 1")
    return float(value) if isinstance(value, float) else value


def _flag(value: Any, name: str) -> bool:
    if value is None:
        return False
    if not isinstance(value, bool):
        raise BrainError(f"'{name}' must be true or false")
    return value


def _instant(value: Any, name: str) -> str | None:
    if value is None or value == "":
        return None
    parsed = parse_iso(value) if isinstance(value, str) else None
    if parsed is None:
        raise BrainError(not_an_instant(name, value, within=" in the years 1 to 9999"))
    return iso_ms(parsed)


def clean_path(raw: Any) -> str:
    """A safe relative path inside the brain (a ``.md`` file, or a directory ending in ``/``).

    Refused: absolute paths, backslashes, empty, ``.`` or ``..`` segments, hidden
    segments, control characters, the reserved ``_archived/`` tree, over-long paths.
    """
    if not isinstance(raw, str) or not raw.strip():
        raise BrainError("'path' is required")
    path = raw.strip()
    if has_lone_surrogate(path):
        raise BrainError(_lone_surrogate("path"))
    if len(path) > MAX_PATH_LENGTH:
        raise BrainError("'path' is too long")
    if path.startswith("/") or "\\" in path or re.search(r"[\x00-\x1f\x7f]", path):
        raise BrainError("'path' must be a relative path with '/' separators")
    is_directory = path.endswith("/")
    segments = path.rstrip("/").split("/") if is_directory else path.split("/")
    for segment in segments:
        if segment in ("", ".", "..") or segment.startswith("."):
            raise BrainError("'path' must stay inside the brain (no empty, '.', '..' or hidden parts)")
        if len(segment) > MAX_SEGMENT_LENGTH or len(segment.encode("utf-8", "surrogatepass")) > MAX_SEGMENT_BYTES:
            raise BrainError(f"'path' has a part that is too long (at most {MAX_SEGMENT_LENGTH} characters and "
                             f"{MAX_SEGMENT_BYTES} bytes of UTF-8: 85 Chinese or Japanese characters)")
    if segments[0] in _RESERVED_TOP:
        raise BrainError(f"'path' may not be under {segments[0]}/")
    if not is_directory and not segments[-1].endswith(".md"):
        is_directory = True
    if not is_directory and segments[-1] == ".md":
        raise BrainError("'path' needs a file name")
    return "/".join(segments) + ("/" if is_directory else "")


@dataclass
class MemoryInput:
    """One memory to write, validated when built (bad input raises `BrainError`).

    ``path`` is the memory's file (``a/b/name.md``) or a directory (anything not
    ending in ``.md``), in which case the file is named from the title's slug.
    ``origin`` None (older clients) writes no origin field and is treated as the
    user's own write: no caps, no automatic quarantine.
    """

    title: str
    type: str
    content: str
    path: str
    cognitive_type: str = "semantic"
    tags: tuple[str, ...] = ()
    related: tuple[str, ...] = ()
    salience: float = DEFAULT_SALIENCE
    confidence: float = DEFAULT_CONFIDENCE
    source: str = ""
    encoding_context: dict[str, Any] = field(default_factory=dict)
    pinned: bool = False
    pin_scope: str = "global"
    pin_priority: int = 0
    stable: bool = False
    origin: str | None = None
    valid_from: str | None = None
    valid_until: str | None = None
    supersedes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # Single-line fields are normalised (controls, line breaks and bidi overrides become
        # spaces): shown among other lines, they must not pose as more than one.
        self.title = one_line(_text(self.title, "title", required=True)).strip()
        if not self.title:
            raise BrainError("'title' must not be empty")
        if len(self.title) > MAX_TITLE_CHARS:
            raise BrainError("'title' is too long")
        self.content = _text(self.content, "content", required=True)
        if not isinstance(self.type, str) or self.type not in MEMORY_TYPES:
            raise BrainError(f"'type' must be one of {', '.join(MEMORY_TYPES)}")
        if not isinstance(self.cognitive_type, str) or self.cognitive_type not in COGNITIVE_TYPES:
            raise BrainError(f"'cognitive_type' must be one of {', '.join(COGNITIVE_TYPES)}")
        self.path = clean_path(self.path)
        self.tags = _string_list(self.tags, "tags")
        self.related = _string_list(self.related, "related")
        self.supersedes = _string_list(self.supersedes, "supersedes")
        self.salience = _unit(self.salience, "salience", DEFAULT_SALIENCE)
        self.confidence = _unit(self.confidence, "confidence", DEFAULT_CONFIDENCE)
        self.source = one_line(_text(self.source, "source"))
        self.pinned = _flag(self.pinned, "pinned")
        self.stable = _flag(self.stable, "stable")
        self.pin_scope = one_line(_text(self.pin_scope, "pin_scope", default="global")) or "global"
        if isinstance(self.pin_priority, bool) or not isinstance(self.pin_priority, int):
            raise BrainError("'pin_priority' must be an integer")
        if self.origin is not None and (not isinstance(self.origin, str) or self.origin not in ORIGINS):
            raise BrainError(f"'origin' must be one of {', '.join(ORIGINS)}")
        self.encoding_context = _encoding_context(self.encoding_context)
        self.valid_from = _instant(self.valid_from, "valid_from")
        self.valid_until = _instant(self.valid_until, "valid_until")
        if self.valid_from and self.valid_until and self.valid_until <= self.valid_from:
            raise BrainError("'valid_until' must be after 'valid_from'")

    @classmethod
    def from_mapping(cls, value: Any) -> MemoryInput:
        """Build from the command line's memorize JSON object (unknown keys ignored)."""
        if not isinstance(value, Mapping):
            raise BrainError("each memory must be a JSON object")
        known = {
            "title", "type", "content", "path", "cognitive_type", "tags", "related",
            "salience", "confidence", "source", "encoding_context", "pinned", "pin_scope",
            "pin_priority", "stable", "origin", "valid_from", "valid_until", "supersedes",
        }
        arguments = {key: value[key] for key in known if key in value and value[key] is not None}
        for required in ("title", "type", "content", "path"):
            arguments.setdefault(required, None)
        return cls(**arguments)

    def to_mapping(self) -> dict[str, Any]:
        """The JSON form `from_mapping` reads back (for keeping pending writes)."""
        return {
            "title": self.title, "type": self.type, "content": self.content, "path": self.path,
            "cognitive_type": self.cognitive_type, "tags": list(self.tags),
            "related": list(self.related), "salience": self.salience,
            "confidence": self.confidence, "source": self.source,
            "encoding_context": dict(self.encoding_context), "pinned": self.pinned,
            "pin_scope": self.pin_scope, "pin_priority": self.pin_priority,
            "stable": self.stable, "origin": self.origin, "valid_from": self.valid_from,
            "valid_until": self.valid_until, "supersedes": list(self.supersedes),
        }


@dataclass(frozen=True)
class OverLimit:
    """A field of a memory holding more than a memory may: ``items`` (too many items), ``chars``
    (too long) or ``item_chars`` (an item of the list too long), past ``count``."""

    field: str
    kind: Literal["items", "chars", "item_chars"]
    count: int

    def message(self) -> str:
        """The refusal in English, naming the field and its limit (the tools' wording)."""
        if self.kind == "items":
            return f"'{self.field}' has more than {self.count} items"
        if self.kind == "item_chars":
            return f"'{self.field}' holds an item longer than {self.count} characters"
        return f"'{self.field}' is longer than {self.count} characters"


class OverLimitError(BrainError):
    """A memory refused for a field past its limit (`over_limit`); ``over`` says which."""

    def __init__(self, over: OverLimit) -> None:
        super().__init__(f"{over.message()}; nothing was saved")
        self.over = over


def over_limit(memory: MemoryInput) -> OverLimit | None:
    """The first field of ``memory`` past its limit (``MAX_CONTENT_CHARS``, ``MAX_TITLE_CHARS``,
    ``MAX_LIST_ITEMS``, ``MAX_CONTEXT_CHARS``, ``MAX_ID_CHARS``, ``MAX_SOURCE_CHARS``), None when
    every one fits. The engine writes what it is given, so every way in asks this first: the
    connector's writes (`connector_memory`: brain_memorize, the web app) and an import's plan."""
    if len(memory.content) > MAX_CONTENT_CHARS:
        return OverLimit("content", "chars", MAX_CONTENT_CHARS)
    if len(memory.title) > MAX_TITLE_CHARS:
        return OverLimit("title", "chars", MAX_TITLE_CHARS)
    context = memory.encoding_context
    lists = (("tags", memory.tags, MAX_CONTEXT_CHARS), ("related", memory.related, MAX_ID_CHARS),
             ("supersedes", memory.supersedes, MAX_ID_CHARS),
             ("encoding_context.topics", context.get("topics") or (), MAX_CONTEXT_CHARS))
    for name, items, longest in lists:
        if len(items) > MAX_LIST_ITEMS:
            return OverLimit(name, "items", MAX_LIST_ITEMS)
        if any(len(item) > longest for item in items):
            return OverLimit(name, "item_chars", longest)
    texts = [("source", memory.source, MAX_SOURCE_CHARS), ("pin_scope", memory.pin_scope, MAX_CONTEXT_CHARS)]
    texts += [(f"encoding_context.{key}", context.get(key) or "", MAX_CONTEXT_CHARS)
              for key in ENCODING_CONTEXT_KEYS if key != "topics"]
    for name, text, longest in texts:
        if len(text) > longest:
            return OverLimit(name, "chars", longest)
    return None


def _encoding_context(value: Any) -> dict[str, Any]:
    if value is None:
        value = {}
    if not isinstance(value, Mapping):
        raise BrainError("'encoding_context' must be an object")
    context: dict[str, Any] = {}
    for key in ENCODING_CONTEXT_KEYS:
        if key == "topics":
            context[key] = list(_string_list(value.get(key), "encoding_context.topics"))
        else:
            context[key] = one_line(_text(value.get(key), f"encoding_context.{key}"))
    return context


def parse_memorize_request(payload: Any) -> list[MemoryInput]:
    """The memories of a memorize request: one object, an array, or ``{"memories": [...]}``."""
    if isinstance(payload, Mapping) and "memories" in payload and "content" not in payload:
        payload = payload["memories"]
    items = payload if isinstance(payload, list) else [payload]
    if not items:
        raise BrainError("no memories given")
    memories = []
    for position, item in enumerate(items, start=1):
        try:
            memories.append(MemoryInput.from_mapping(item))
        except BrainError as error:
            raise BrainError(f"memory {position}: {error}") from None
    return memories


# -- applying one memory ---------------------------------------------------------------


def _free_file_path(txn: WriteTxn, wanted: str) -> str:
    """``wanted`` if nothing is there yet, else ``name-2.md``, ``name-3.md``, ..."""
    parts = wanted.split("/")
    for depth in range(1, len(parts)):
        if txn.is_file("/".join(parts[:depth])):
            raise BrainError("'path' runs through an existing file")
    if not txn.exists(wanted):
        return wanted
    stem = wanted[: -len(".md")]
    for number in range(2, 100_000):
        candidate = f"{stem}-{number}.md"
        if not txn.exists(candidate):
            return candidate
    raise BrainError("no free file name for this memory")


def resolve_file_path(txn: WriteTxn, memory: MemoryInput) -> str:
    """The file this memory goes to: its path, or the title's slug in its directory."""
    path = memory.path
    if path.endswith("/"):
        path = f"{path}{slugify(memory.title)}.md"
    return _free_file_path(txn, path)


def _tags_of(entry: Mapping[str, Any]) -> list[str]:
    tags = entry.get("tags")
    return [tag for tag in tags if isinstance(tag, str)] if isinstance(tags, list) else []


def apply_supersession(txn: WriteTxn, new_id: str, targets: Iterable[str], boundary: str) -> list[str]:
    """Mark each existing target as superseded by ``new_id``; returns the ones done."""
    done: list[str] = []
    for target in targets:
        entry = txn.entry(target)
        if entry is None or target == new_id:
            continue
        updates: dict[str, Any] = {"superseded_by": new_id}
        if not entry.get("valid_until"):
            updates["valid_until"] = boundary
            updates["valid_until_auto"] = True
        txn.update_entry(target, updates)
        txn.edit_memory_file(target, updates)
        txn.link(new_id, target, MANUAL_EDGE_WEIGHT, "manual")
        done.append(target)
    return done


def release_supersessions(txn: WriteTxn, memory_id: str) -> list[str]:
    """Undo what ``memory_id`` imposed: targets lose ``superseded_by`` (and auto validity)."""
    released: list[str] = []
    for target, entry in list(txn.memories().items()):
        if not isinstance(entry, dict) or entry.get("superseded_by") != memory_id:
            continue
        removed: tuple[str, ...] = ("superseded_by",)
        if entry.get("valid_until_auto"):
            removed += ("valid_until", "valid_until_auto")
        txn.update_entry(target, {}, remove=removed)
        txn.edit_memory_file(target, remove=removed)
        released.append(target)
    return released


def add_memory(txn: WriteTxn, memory: MemoryInput, memory_id: str, created: str) -> dict[str, Any]:
    """Every memorize step for one memory; returns what was stored (for the result)."""
    memories = txn.memories()
    notes: list[str] = []
    adjusted: dict[str, Any] = {}
    salience, confidence = memory.salience, memory.confidence
    rule = ORIGINS.get(memory.origin) if memory.origin else None
    if rule is not None:
        if salience > rule.max_salience:
            adjusted["salience"] = {"requested": salience, "stored": rule.max_salience}
            salience = rule.max_salience
        if confidence > rule.max_confidence:
            adjusted["confidence"] = {"requested": confidence, "stored": rule.max_confidence}
            confidence = rule.max_confidence

    reasons: list[str] = []
    if quarantine_mode(txn.config()) != "off":
        reasons = quarantine_reasons(
            origin=memory.origin, title=memory.title, content=memory.content,
            memory_type=memory.type, cognitive_type=memory.cognitive_type,
        )
    pinned, stable = memory.pinned, memory.stable
    if (pinned or stable) and rule is not None and not rule.may_pin:
        notes.append(f"origin {memory.origin} may not be pinned or stable; stored unpinned")
        pinned = stable = False
    if pinned and reasons:
        notes.append("pending verification; not pinned")
        pinned = False

    path = resolve_file_path(txn, memory)
    tokens = token_estimate(memory.content)
    strength = initial_strength(memory.type, memory.cognitive_type)
    decay_rate = initial_decay_rate(memory.type, memory.cognitive_type, memory.origin)
    supersede_targets = [target for target in memory.supersedes if target in memories and target != memory_id]
    unknown_targets = [target for target in memory.supersedes if target not in supersede_targets and target != memory_id]

    entry: dict[str, Any] = {
        "title": memory.title,
        "path": path,
        "type": memory.type,
        "cognitive_type": memory.cognitive_type,
        "created": created,
        "last_accessed": created,
        "access_count": 0,
        "strength": strength,
        "decay_rate": decay_rate,
    }
    if memory.origin:
        entry["origin"] = memory.origin
    entry.update(
        salience=salience,
        confidence=confidence,
        tags=list(memory.tags),
        related=list(memory.related),
        encoding_context=dict(memory.encoding_context),
        token_estimate=tokens,
    )
    optional: dict[str, Any] = {}
    if pinned:
        optional.update(pinned=True, pin_scope=memory.pin_scope, pin_priority=memory.pin_priority)
    if stable:
        optional["stable"] = True
    if reasons:
        optional.update(quarantined=True, quarantine_reasons=reasons, quarantine_flagged=txn.now_iso)
    if memory.supersedes:
        optional["supersedes"] = list(memory.supersedes)
    if reasons and supersede_targets:
        optional["supersede_pending"] = supersede_targets
    if memory.valid_from:
        optional["valid_from"] = memory.valid_from
    if memory.valid_until:
        optional["valid_until"] = memory.valid_until
    entry.update(optional)
    txn.note_numbers(INDEX, strength, decay_rate, salience, confidence)

    file_fields = {
        "id": memory_id, "type": memory.type, "cognitive_type": memory.cognitive_type,
        "created": created, "last_accessed": created, "access_count": 0, "recall_history": [],
        "strength": strength, "decay_rate": decay_rate, "salience": salience,
        "confidence": confidence, "tags": list(memory.tags), "related": list(memory.related),
        "origin": memory.origin, "source": memory.source,
        "encoding_context": memory.encoding_context,
        **{key: value for key, value in optional.items() if key != "supersede_pending"},
    }
    txn.write(path, render_memory_file(file_fields, memory.content).encode("utf-8"))

    # Associations: explicit relations first, then every memory sharing enough tags.
    # The graph file is written on every memorize, even with no edge (as the CLI does).
    txn.edges()
    txn.mark(ASSOCIATIONS)
    linked_related = []
    for other in memory.related:
        if other != memory_id and other in memories:
            txn.link(memory_id, other, MANUAL_EDGE_WEIGHT, "manual")
            linked_related.append(other)
    conflicts = []
    tag_set = set(memory.tags)
    tag_links = 0
    if len(tag_set) >= TAG_OVERLAP_MIN_SHARED:
        for other in txn.tag_overlaps(tag_set, TAG_OVERLAP_MIN_SHARED):
            other_entry = memories[other]
            if other == memory_id:
                continue
            shared = [tag for tag in dict.fromkeys(_tags_of(other_entry)) if tag in tag_set]
            txn.link(memory_id, other, TAG_OVERLAP_EDGE_WEIGHT, "tag_overlap")
            tag_links += 1
            if other_entry.get("pinned") or other_entry.get("stable"):
                conflicts.append({"id": other, "title": other_entry.get("title"), "shared_tags": shared})

    txn.add_entry(memory_id, entry)
    superseded: list[str] = []
    if supersede_targets and not reasons:
        superseded = apply_supersession(txn, memory_id, supersede_targets, memory.valid_from or created)
    txn.index_document(memory_id, memory.title, list(memory.tags), memory.content)
    txn.count_in_directories(path)
    if pinned:
        txn.set_pin(memory_id, memory.pin_scope, memory.pin_priority, tokens)
    txn.touch_index()

    stored: dict[str, Any] = {
        "id": memory_id, "title": memory.title, "path": path, "type": memory.type,
        "cognitive_type": memory.cognitive_type,
    }
    if memory.origin:
        stored["origin"] = memory.origin
    stored.update(
        salience=salience, confidence=confidence, tags=list(memory.tags),
        strength=strength, decay_rate=decay_rate, token_estimate=tokens, created=created,
    )
    if pinned:
        stored["pinned"] = True
    if stable:
        stored["stable"] = True
    if memory.valid_from:
        stored["valid_from"] = memory.valid_from
    if memory.valid_until:
        stored["valid_until"] = memory.valid_until
    if reasons:
        stored["quarantine_pending"] = True
        stored["quarantine_reasons"] = reasons
    if conflicts:
        stored["potential_conflicts"] = conflicts
    if superseded:
        stored["superseded"] = superseded
    if reasons and supersede_targets:
        stored["supersede_pending"] = supersede_targets
    if unknown_targets:
        stored["supersedes_unknown"] = unknown_targets
    if linked_related or tag_links:
        stored["associations"] = {"related": len(linked_related), "tag_overlap": tag_links}
    if adjusted:
        stored["adjusted"] = adjusted
    if notes:
        stored["notes"] = notes
    return stored


def is_memory_id(value: Any) -> bool:
    """True for ``mem_<YYYYMMDD>_<6 hex>``."""
    return isinstance(value, str) and bool(MEMORY_ID.match(value))


def _first_line(content: str) -> str:
    """The content's first line that shows something (a line of a zero-width space does not)."""
    for line in content.splitlines():
        if not is_blank(line):
            return line.strip()
    return ""


TITLE_LENGTH = 80
# A cut closer to the start than this would lose most of the title: look for a later boundary.
_MIN_TITLE_CUT = 20
_SENTENCE_END = re.compile(r"[.!?](?=\s)|[\u3002\uff01\uff1f]")
_WORD_BREAK = re.compile(r"\s|[\u3001\uff0c\uff1b]")
_TRAILING_PUNCTUATION = " \t,;:-\u2013\u2014\u3001\uff0c"


def cut_title(text: str, length: int = TITLE_LENGTH) -> str:
    """``text`` if it fits in ``length`` characters, else cut at a sentence or word boundary.

    The last sentence end in the first ``length`` characters wins; else the last word
    break, with an ellipsis saying the title goes on; text without breaks (Chinese or
    Japanese without punctuation, one long word) is cut hard, with the ellipsis.
    """
    text = text.strip()
    if len(text) <= length:
        return text
    window = text[:length]
    ends = [match.end() for match in _SENTENCE_END.finditer(window) if match.end() >= _MIN_TITLE_CUT]
    if ends:
        return window[: ends[-1]].strip()
    breaks = [match.start() for match in _WORD_BREAK.finditer(text[:length]) if match.start() >= _MIN_TITLE_CUT]
    cut = breaks[-1] if breaks else boundary_at_or_before(text, length - 1)
    return text[:cut].rstrip(_TRAILING_PUNCTUATION) + "\u2026"


def connector_title(content: str, title: str | None = None) -> str:
    """The title given, else the content's first line, cut to 80 characters at a boundary;
    Markdown marks taken out (``**blue flowerpot**`` is titled "blue flowerpot")."""
    chosen = one_line(title or "").strip()
    if is_blank(chosen):  # a title that shows nothing is no title: the first line stands for it
        chosen = _first_line(content)
    chosen = cut_title(plain_title(one_line(chosen)))
    return "Captured note" if is_blank(chosen) else chosen


CONNECTOR_SOURCE = "brain-connector (MCP)"
# What the web app writes itself (a person typing, merging in review): not an assistant's MCP call.
WEB_APP_SOURCE = "brain-connector (web app)"


def attributed(source: str, writer: str, how: str = "written") -> str:
    """``source`` naming who saved the memory (``writer``: the store's name for the user, on a
    store that shares brains, else ""): ``brain-connector (MCP), written by carol``, and for a
    memory brought in from a file ``imported from notes.zip/a.md, imported by carol``."""
    if not writer:
        return source
    return f"{source}, {how} by {writer}" if source else f"{how} by {writer}"


def connector_memory(
    content: str,
    *,
    title: str | None = None,
    type: str = "learning",  # noqa: A002 - the tool's own argument name
    tags: Sequence[str] | str = (),
    origin: str = "agent-inferred",
    valid_from: str | None = None,
    valid_until: str | None = None,
    supersedes: Sequence[str] | str = (),
    agent: str = "",
    project: str = "",
    task: str = "",
    writer: str = "",
    source: str = CONNECTOR_SOURCE,
) -> MemoryInput:
    """The memory a connector `brain_memorize` call writes (connector.md section 6).

    ``project`` and ``task`` fill the encoding context recall matches its own
    ``project`` / ``task`` against (the command line's context fields). ``writer`` (the
    store's name for the user, on a store that shares brains) goes into ``source`` after
    the connector's name, so the members of a shared brain see who said what. ``source``
    names the way in (`CONNECTOR_SOURCE` for MCP, `WEB_APP_SOURCE` for the web app). A field
    past its limit (`over_limit`) raises `OverLimitError`.
    """
    if not isinstance(content, str) or is_blank(content):
        raise BrainError(_empty("content", content if isinstance(content, str) else ""))
    chosen_title = connector_title(content, title)
    tag_list = _string_list(tags, "tags")
    memory = MemoryInput(
        title=chosen_title,
        type=type,
        content=content.strip(),
        path=f"captured/{slugify(chosen_title)}.md",
        cognitive_type="episodic",
        tags=tag_list,
        salience=0.5,
        confidence=0.8,
        source=attributed(source, writer),
        encoding_context={
            "project": project or "",
            "topics": list(tag_list),
            "task_type": task or "capturing",
            "agent": agent or "",
        },
        origin=origin or "agent-inferred",
        valid_from=valid_from,
        valid_until=valid_until,
        supersedes=_string_list(supersedes, "supersedes"),
    )
    over = over_limit(memory)  # what an import is held to: every way in takes the same memories
    if over is not None:
        raise OverLimitError(over)
    return memory
