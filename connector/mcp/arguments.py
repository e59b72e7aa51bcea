"""Tolerant reading of tool arguments as models actually send them.

Unknown extra arguments (``explanation``, ``reasoning``) are ignored, and the result
says so (`ignored_note`: a typo such as ``max_token`` would otherwise go unnoticed);
arrays and objects sent as JSON strings (``'["a","b"]'``) are accepted; numbers and
booleans sent as strings are accepted. Anything else wrong raises ArgumentError with
a message meant for the model.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Collection, Mapping
from decimal import Context
from difflib import get_close_matches
from typing import Any

from common.textsafety import escape_one_line
from connector.engine.format.graphemes import shortened
from connector.engine.writes.memorize import LIST_SEPARATORS

# The note about ignored arguments names this many at most (a model may send dozens), each cut
# to this many characters (a name may be as long as the request).
_IGNORED_SHOWN = 5
_IGNORED_NAME_CHARS = 40


class ArgumentError(ValueError):
    """An argument is missing or unusable; the message says which and why."""


def _maybe_json(value: Any, kinds: tuple[type, ...]) -> Any:
    if isinstance(value, str):
        text = value.strip()
        if text[:1] in ("[", "{"):
            try:
                decoded = json.loads(text)
            except (ValueError, RecursionError):  # RecursionError: nested thousands deep
                return value
            if isinstance(decoded, kinds):
                return decoded
    return value


def _shown(number: int) -> str:
    """A whole number as a note repeats it: a huge one (1e300 is 301 digits) in scientific notation."""
    if -10**20 < number < 10**20:
        return str(number)
    # Decimal, not float: JSON may send a whole number past a float's range (10**400), and
    # str() refuses one of more than 4,300 digits.
    return f"{Context(prec=3).create_decimal(number).normalize():g}".lower()


def _python_list(text: str) -> list[Any] | None:
    """``text`` read as a Python list literal (``['a, b', 'c']``, as models write lists), or None when it
    is not one: Python's own parser, so a comma inside a quoted item stays in the item."""
    stripped = text.strip()
    if stripped[:1] != "[" or stripped[-1:] != "]":
        return None
    try:
        value = ast.literal_eval(stripped)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    return value if isinstance(value, list) else None


def _unbracketed(text: str) -> str:
    """A list written in brackets that is not JSON (``['a', 'b']``, as models write Python's lists)
    without its brackets: the items are read as a comma-separated list."""
    stripped = text.strip()
    return stripped[1:-1] if stripped[:1] == "[" and stripped[-1:] == "]" else text


def _unquoted(item: str) -> str:
    """A list item without the quotes around it (``'a'``, ``"a"``) and surrounding spaces."""
    item = item.strip()
    if len(item) >= 2 and item[0] == item[-1] and item[0] in "'\"":
        return item[1:-1].strip()
    return item


class Args:
    """Typed access to one call's arguments."""

    def __init__(self, raw: Mapping[str, Any] | str | None) -> None:
        if isinstance(raw, str):
            decoded = _maybe_json(raw, (dict,))
            raw = decoded if isinstance(decoded, dict) else {}
        self._raw: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}

    def _get(self, name: str) -> Any:
        value = self._raw.get(name)
        return None if value is None else value

    def names(self) -> list[str]:
        """The names of the arguments sent with something in them, in the order sent: null, "" and
        an empty list count as unset (a host may send every key it knows, unset ones empty)."""
        return [str(name) for name, value in self._raw.items() if value not in (None, "", [])]

    def given(self, name: str) -> bool:
        """Whether the caller sent ``name`` with a value (null and "" count as not sent)."""
        return self._get(name) not in (None, "")

    def string(self, name: str, *, required: bool = False, non_empty: bool = False, max_length: int = 100_000) -> str | None:
        """A string argument (numbers are turned into text)."""
        value = self._get(name)
        if value is None or (isinstance(value, str) and not value.strip() and not required and not non_empty):
            if required:
                raise ArgumentError(f"'{name}' is required")
            return None
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise ArgumentError(f"'{name}' must be a string")
        text = value if isinstance(value, str) else str(value)
        if (required or non_empty) and not text.strip():
            raise ArgumentError(f"'{name}' must not be empty")
        if len(text) > max_length:
            raise ArgumentError(f"'{name}' is too long (at most {max_length} characters)")
        return text

    def integer(self, name: str, *, default: int, minimum: int, maximum: int) -> int:
        """An integer argument, clamped into [minimum, maximum]."""
        return self.clamped_integer(name, default=default, minimum=minimum, maximum=maximum)[0]

    def clamped_integer(self, name: str, *, default: int, minimum: int, maximum: int) -> tuple[int, str | None]:
        """An integer argument clamped into [minimum, maximum], and a note saying so when it was."""
        value = self._whole(name)
        if value is None:
            return default, None
        bounded = max(minimum, min(maximum, value))
        if bounded == value:
            return bounded, None
        return bounded, f"'{name}' {_shown(value)} is outside {minimum}-{maximum}; {bounded} was used."

    def _whole(self, name: str) -> int | None:
        value = self._get(name)
        if value is None or value == "":
            return None
        if isinstance(value, bool):
            raise ArgumentError(f"'{name}' must be a whole number")
        if isinstance(value, str):
            try:
                value = float(value.strip())
            except ValueError:
                raise ArgumentError(f"'{name}' must be a whole number") from None
        if not isinstance(value, (int, float)) or value != value or value in (float("inf"), float("-inf")):
            raise ArgumentError(f"'{name}' must be a whole number")
        if isinstance(value, float) and not value.is_integer():
            # Cut silently, a max_chars of 0.5 was 0: titles only, which nobody asked for.
            raise ArgumentError(f"'{name}' must be a whole number, not {value}")
        return int(value)

    def boolean(self, name: str, *, default: bool = False) -> bool:
        """A boolean argument (``"true"``/``"false"``/``1``/``0`` accepted)."""
        value = self._get(name)
        if value is None or value == "":
            return default
        if isinstance(value, bool):
            return value
        if isinstance(value, (int, float)):
            return value != 0
        if isinstance(value, str) and value.strip().lower() in ("true", "yes", "1", "on"):
            return True
        if isinstance(value, str) and value.strip().lower() in ("false", "no", "0", "off"):
            return False
        raise ArgumentError(f"'{name}' must be true or false")

    def string_list(self, name: str, *, max_items: int = 200, max_item_length: int | None = None) -> list[str]:
        """A list of strings: a JSON array, an array sent as a JSON string, or one comma-separated string
        (the full-width and ideographic commas a Chinese or Japanese keyboard types separate too), its
        items quoted or not and the whole in brackets or not (``['a', 'b']``, Python's way); an item
        longer than ``max_item_length`` is refused in the words memorize's limits use."""
        value = _maybe_json(self._get(name), (list,))
        if value is None or value == "":
            return []
        if isinstance(value, str):
            items: list[Any] | None = _python_list(value)
            if items is None:  # not a literal ("[mem_1, 'mem_2']", "a, b"): split at the commas
                items = [_unquoted(part) for part in LIST_SEPARATORS.split(_unbracketed(value))]
        elif isinstance(value, list):
            items = value
        else:
            raise ArgumentError(f"'{name}' must be a list of strings")
        result: list[str] = []
        for item in items:
            if isinstance(item, bool) or not isinstance(item, (str, int, float)):
                raise ArgumentError(f"'{name}' must be a list of strings")
            text = str(item).strip()
            if text:
                result.append(text)
        if len(result) > max_items:
            raise ArgumentError(f"'{name}' has too many items (at most {max_items})")
        if max_item_length is not None and any(len(item) > max_item_length for item in result):
            raise ArgumentError(f"'{name}' holds an item longer than {max_item_length} characters")
        return result

    def choice(self, name: str, options: list[str], *, default: str) -> str:
        """One of ``options`` (case-insensitive)."""
        value = self.string(name)
        if value is None or not value.strip():
            return default
        lowered = value.strip().lower()
        if lowered not in options:
            raise ArgumentError(f"'{name}' must be one of: {', '.join(options)}")
        return lowered


def ignored_note(tool: str, sent: list[str], known: Collection[str]) -> str | None:
    """What a result says about the arguments ``tool`` ignored (those ``sent`` that are not in
    ``known``), each with the argument it probably meant when one is close; None when none was."""
    ignored = [name for name in sent if name not in known]
    if not ignored:
        return None
    # An argument sent too is not what a misspelt one meant ({"query": .., "querry": ..}).
    given = set(sent)
    unsent = [name for name in known if name not in given]
    shown = []
    for name in ignored[:_IGNORED_SHOWN]:
        # A name longer than any argument's is no typo of one (and costs difflib its length).
        close = get_close_matches(name, unsent, n=1) if len(name) <= _IGNORED_NAME_CHARS else []
        meant = f" (did you mean '{close[0]}'?)" if close else ""
        shown.append(f"'{escape_one_line(shortened(name, _IGNORED_NAME_CHARS))}'{meant}")
    more = len(ignored) - len(shown)
    listed = ", ".join(shown) + (f" and {more} more" if more else "")
    counted = "an argument" if len(ignored) == 1 else f"{len(ignored)} arguments"
    return f"Ignored {counted} {tool} does not take: {listed}."


def unused_note(action: str, defaulted: bool, unused: list[str], instead: Mapping[str, str]) -> str | None:
    """What a result says about the arguments (``unused``, in the order sent) its ``action`` does not
    take, then what to call instead for each (``instead``, said once however many share it); None when
    none was sent. ``defaulted``: the action was not sent (the tool's default)."""
    if not unused:
        return None
    names = [f"'{name}'" for name in unused]
    listed = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
    verb, pronoun = ("was", "it") if len(names) == 1 else ("were", "them")
    default = " (the default)" if defaulted else ""
    hints = list(dict.fromkeys(instead[name] for name in unused if name in instead))
    return " ".join([f"{listed} {verb} ignored: action {action}{default} does not take {pronoun}.", *hints])
