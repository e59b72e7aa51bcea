"""JavaScript value semantics the reference's numbers depend on.

Rounding, truthiness, number checks and ``Date.parse`` of ISO 8601 strings,
reproduced so our arithmetic lands on exactly the reference's values.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta
from typing import Any

_ISO = re.compile(
    r"^([+-]\d{6}|\d{4})(?:-(\d{2})(?:-(\d{2}))?)?"
    r"(?:T(\d{2}):(\d{2})(?::(\d{2})(?:[.,](\d+))?)?)?"
    r"(Z|[+-]\d{2}:?\d{2})?$"
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MS = timedelta(milliseconds=1)


def js_round(value: float) -> float:
    """``Math.round``: nearest integer, halves toward +infinity."""
    floor = math.floor(value)
    return float(floor + 1 if value - floor >= 0.5 else floor)


def round3(value: float) -> float:
    """``Math.round(x * 1000) / 1000``; non-finite values become 0 (and -0 becomes 0)."""
    if not math.isfinite(value):
        return 0.0
    scaled = value * 1000
    if not math.isfinite(scaled):
        return 0.0
    return js_round(scaled) / 1000 + 0.0


def is_number(value: Any) -> bool:
    """A JSON number (booleans are not numbers here)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def number_or_none(value: Any) -> float | None:
    """``value`` as a float when it is a number, else None (counts as missing)."""
    return float(value) if is_number(value) else None


def js_truthy(value: Any) -> bool:
    """JavaScript truthiness of a JSON value (empty lists and objects are truthy)."""
    if value is None or value is False:
        return False
    if isinstance(value, (list, dict)) or value is True:
        return True
    if is_number(value):
        return value != 0 and not (isinstance(value, float) and math.isnan(value))
    if isinstance(value, str):
        return value != ""
    return bool(value)


def finite(value: float) -> float:
    """Non-finite results count as 0."""
    return value if math.isfinite(value) else 0.0


def parse_iso_ms(value: Any) -> int | None:
    """Milliseconds since the epoch of an ISO 8601 string, like ``Date.parse``.

    No offset means UTC; fractions beyond milliseconds are truncated, as a
    JavaScript ``Date`` holds whole milliseconds. Anything else gives None.
    """
    if not isinstance(value, str):
        return None
    match = _ISO.match(value.strip())
    if match is None:
        return None
    year_s, month_s, day_s, hour_s, minute_s, second_s, frac_s, offset_s = match.groups()
    try:
        year = int(year_s)
        month = int(month_s or 1)
        day = int(day_s or 1)
        hour = int(hour_s or 0)
        minute = int(minute_s or 0)
        second = int(second_s or 0)
        if year_s.startswith("-") and year == 0:
            return None  # -000000 is invalid in ECMAScript
        extra_day = 0
        if hour == 24 and minute == 0 and second == 0 and not (frac_s and int(frac_s)):
            hour, extra_day = 0, 1
        if not 1 <= year <= 9999:
            return None  # outside Python's calendar; never in real brains
        moment = datetime(year, month, day, hour, minute, second, tzinfo=UTC)
    except ValueError:
        return None
    millis = (moment - _EPOCH) // _ONE_MS + extra_day * 86_400_000
    if frac_s:
        millis += int((frac_s + "00")[:3])
    if offset_s and offset_s != "Z":
        sign = -1 if offset_s[0] == "-" else 1
        digits = offset_s[1:].replace(":", "")
        hours, minutes = int(digits[:2]), int(digits[2:])
        if hours > 23 or minutes > 59:
            return None
        millis -= sign * (hours * 60 + minutes) * 60_000
    return millis


def datetime_ms(moment: datetime) -> int:
    """Milliseconds since the epoch of ``moment`` (naive means UTC), truncated."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - _EPOCH) // _ONE_MS


def iso_ms(millis: int) -> str:
    """``Date.prototype.toISOString`` of an epoch-millisecond value."""
    moment = _EPOCH + millis * _ONE_MS
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{millis % 1000:03d}Z"
