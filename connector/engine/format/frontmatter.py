"""Memory files: YAML frontmatter written in the command line's layout, and line edits.

The reference writes frontmatter values without escaping, so a quote in a tag breaks
its YAML. Here every string is written as a double-quoted scalar with escapes, which
any YAML parser reads back exactly, while the line layout and key order stay the
command line's (brain-format.md, "A memory file").
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any

import yaml

from connector.engine.format.text import js_trim

# Characters that must not appear raw inside a double-quoted YAML scalar: C0 controls
# and DEL, C1 controls (U+0085 is a YAML line break), the Unicode line and paragraph
# separators (also line breaks to YAML 1.1), the BOM and the two non-characters.
_SIMPLE_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "\n": "\\n",
    "\t": "\\t",
    "\r": "\\r",
    "\b": "\\b",
    "\f": "\\f",
}
_FORBIDDEN_EXTRA = {0x7F, 0x2028, 0x2029, 0xFEFF, 0xFFFE, 0xFFFF}


def _needs_code_escape(code: int) -> bool:
    return (
        code < 0x20
        or 0x7F <= code <= 0x9F
        or code in _FORBIDDEN_EXTRA
        or 0xD800 <= code <= 0xDFFF
    )


def yaml_string(value: str) -> str:
    """``value`` as a double-quoted YAML scalar that parses back to exactly ``value``.

    The result is also a valid JSON string; non-ASCII text stays readable UTF-8, and
    it never contains ``---``.
    """
    out = ['"']
    dashes = 0  # raw dashes just written: a third one is escaped (see below)
    for char in value:
        if char == "-":
            dashes += 1
            if dashes == 3:
                # Readers find a memory's body by the second "---" anywhere in the file
                # (recall.md); a raw "---" inside a value would move it.
                out.append("\\u002d")
                dashes = 0
            else:
                out.append(char)
            continue
        dashes = 0
        simple = _SIMPLE_ESCAPES.get(char)
        if simple is not None:
            out.append(simple)
            continue
        code = ord(char)
        out.append(f"\\u{code:04x}" if _needs_code_escape(code) else char)
    out.append('"')
    return "".join(out)


def js_number(value: float | int) -> str:
    """A number printed the way JavaScript's ``String(number)`` prints it.

    Integral values have no ``.0`` (``1``, not ``1.0``); the digits are the shortest
    that round-trip. One deliberate difference: where JavaScript would use exponent
    notation without a dot (``1e-7``), a ``.0`` is added (``1.0e-7``) because YAML 1.1
    parsers read a dot-less exponent as a string.
    """
    if isinstance(value, bool):
        raise TypeError("booleans are not numbers here")
    if isinstance(value, int):
        return str(value)
    if not math.isfinite(value):
        raise ValueError("non-finite numbers cannot be written")
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    digits_tuple, exponent = _shortest_digits(abs(value))
    digits = "".join(map(str, digits_tuple))
    k = len(digits)
    n = exponent + k  # value = 0.<digits> x 10^n
    if k <= n <= 21:
        text = digits + "0" * (n - k)
    elif 0 < n <= 21:
        text = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        text = "0." + "0" * (-n) + digits
    else:
        power = n - 1
        mantissa = digits[0] + "." + (digits[1:] or "0")
        text = f"{mantissa}e{'+' if power >= 0 else '-'}{abs(power)}"
    return sign + text


def _shortest_digits(value: float) -> tuple[tuple[int, ...], int]:
    # repr() gives the shortest round-tripping digits, as JavaScript does.
    parsed = Decimal(repr(value)).normalize().as_tuple()
    return tuple(parsed.digits), int(parsed.exponent)


def yaml_scalar(value: Any) -> str:
    """One flow-style YAML value: booleans, numbers, strings, lists of those."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return js_number(value)
    if isinstance(value, str):
        return yaml_string(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(yaml_scalar(item) for item in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} as a frontmatter value")


# Top-level keys in the command line's order. Optional groups sit after
# `confidence` (pin, stable, quarantine, validity) and after `related` (origin).
_HEAD_KEYS = (
    "id", "type", "cognitive_type", "created", "last_accessed", "access_count",
    "recall_history", "strength", "decay_rate", "salience", "confidence",
)
_AFTER_CONFIDENCE = (
    "pinned", "pin_scope", "pin_priority", "stable",
    "quarantined", "quarantine_reasons", "quarantine_flagged",
    "supersedes", "valid_from", "valid_until",
)
_PLAIN_KEYS = frozenset({"id", "type", "cognitive_type"})
ENCODING_CONTEXT_KEYS = ("project", "topics", "task_type", "agent")


def render_memory_file(fields: Mapping[str, Any], content: str) -> str:
    """The text of a memory file: frontmatter in the CLI's layout, then ``content``.

    ``fields`` holds the frontmatter values by key (``id``, ``type``, ..., ``tags``,
    ``related``, optional ``origin``, ``source``, ``encoding_context``); optional keys
    whose value is None are left out. ``id``, ``type`` and ``cognitive_type`` are
    written plain (the caller validates them); every other string is quoted.
    """
    lines = ["---"]

    def emit(key: str) -> None:
        if key not in fields or fields[key] is None:
            return
        value = fields[key]
        if key in _PLAIN_KEYS:
            lines.append(f"{key}: {value}")
        else:
            lines.append(f"{key}: {yaml_scalar(value)}")

    for key in _HEAD_KEYS:
        emit(key)
    for key in _AFTER_CONFIDENCE:
        emit(key)
    emit("tags")
    emit("related")
    emit("origin")
    emit("source")
    context = fields.get("encoding_context")
    if context is not None:
        lines.append("encoding_context:")
        for key in ENCODING_CONTEXT_KEYS:
            lines.append(f"  {key}: {yaml_scalar(context.get(key, [] if key == 'topics' else ''))}")
    lines.append("---")
    return "\n".join(lines) + "\n" + content + "\n"


_KEY_LINE = re.compile(r"^([A-Za-z_][A-Za-z0-9_-]*):(?:[ \t]|$)")


def _frontmatter_bounds(lines: Sequence[str]) -> tuple[int, int] | None:
    """(first key line, closing marker line) of the frontmatter, or None."""
    if not lines or lines[0].rstrip("\r") != "---":
        return None
    for index in range(1, len(lines)):
        if lines[index].rstrip("\r") == "---":
            return 1, index
    return None


def _block_end(lines: Sequence[str], start: int, stop: int) -> int:
    """Index after the block of the top-level key at ``start`` (its nested lines)."""
    index = start + 1
    while index < stop and (lines[index][:1] in (" ", "\t", "-") or lines[index].strip() == ""):
        if lines[index].startswith("---"):
            break
        index += 1
    return index


def _key_positions(lines: Sequence[str], start: int, stop: int) -> dict[str, int]:
    positions: dict[str, int] = {}
    for index in range(start, stop):
        match = _KEY_LINE.match(lines[index])
        if match and match.group(1) not in positions:
            positions[match.group(1)] = index
    return positions


def edit_frontmatter(
    text: str, set_fields: Mapping[str, Any] | None = None, remove: Iterable[str] = ()
) -> str:
    """``text`` with frontmatter lines replaced, appended or removed.

    A key already present has its line (and any nested lines) replaced in place; a
    new key is appended before the closing ``---``; keys in ``remove`` disappear.
    The body and every other line stay byte-identical. A file without frontmatter is
    returned unchanged (``index.json`` stays the source of truth).
    """
    set_fields = dict(set_fields or {})
    lines = text.split("\n")
    bounds = _frontmatter_bounds(lines)
    if bounds is None:
        return text
    start, stop = bounds
    for key in list(remove) + list(set_fields):
        positions = _key_positions(lines, start, stop)
        if key not in positions:
            continue
        begin = positions[key]
        end = _block_end(lines, begin, stop)
        del lines[begin:end]
        stop -= end - begin
        if key in set_fields:
            lines.insert(begin, f"{key}: {yaml_scalar(set_fields.pop(key))}")
            stop += 1
    for key, value in set_fields.items():
        lines.insert(stop, f"{key}: {yaml_scalar(value)}")
        stop += 1
    return "\n".join(lines)


def frontmatter_text(text: str) -> str | None:
    """The YAML between the opening and closing ``---`` lines, or None."""
    lines = text.split("\n")
    bounds = _frontmatter_bounds(lines)
    if bounds is None:
        return None
    start, stop = bounds
    return "\n".join(lines[start:stop])


def body_text(text: str) -> str:
    """A memory file's content: what follows its front matter block, trimmed.

    Unlike the search body (`text.memory_body`, which counts ``---`` anywhere as the
    reference's search does), this ends the front matter at its closing ``---`` line,
    so a value holding dashes cannot move it. A file without front matter is all content.
    """
    lines = text.split("\n")
    bounds = _frontmatter_bounds(lines)
    if bounds is None:
        return js_trim(text)
    return js_trim("\n".join(lines[bounds[1] + 1 :]))


class FrontMatterLoader(yaml.SafeLoader):
    """PyYAML's safe loader for front matter written by anyone (an editor's upload, an imported
    note). Aliases (``*name``) are refused: a few nested ones expand to a tree too large to walk
    (the "billion laughs"). A date the calendar does not have (``2024-02-30``, a typo) stays the
    text it is: PyYAML raises a bare ValueError for it, which no reader expects. Its constructors
    still raise ValueError (an integer of over 4,300 digits) and RecursionError (collections
    nested thousands deep) past YAMLError: readers catch those too."""

    def compose_node(self, parent: Any, index: Any) -> Any:  # noqa: D102 - PyYAML's hook
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            raise yaml.composer.ComposerError(None, None, "aliases (*name) are not accepted", mark)
        return super().compose_node(parent, index)

    def construct_yaml_timestamp(self, node: Any) -> Any:  # noqa: D102 - PyYAML's hook
        try:
            return super().construct_yaml_timestamp(node)
        except (ValueError, OverflowError):
            return self.construct_scalar(node)


FrontMatterLoader.add_constructor("tag:yaml.org,2002:timestamp", FrontMatterLoader.construct_yaml_timestamp)
