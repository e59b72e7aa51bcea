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
    r"(?:T(\d{2}):(\d{2})(?::(\d{2})(?:\.(\d+))?)?)?"
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
    kind = value.__class__
    if kind is float or kind is int:  # what JSON decoding gives: the common case, checked first
        return True
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def number_or_none(value: Any) -> float | None:
    """``value`` as a float when it is a number, else None (counts as missing)."""
    kind = value.__class__
    if kind is float:
        return value  # type: ignore[no-any-return]
    if kind is int:
        return float(value)
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


_DAYS_IN_MONTH = (0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def _days_from_civil(year: int, month: int, day: int) -> int:
    # Days since 1970-01-01 in the proleptic Gregorian calendar (exact integers).
    year -= month <= 2
    era = year // 400
    year_of_era = year - era * 400
    day_of_year = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    day_of_era = year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year
    return era * 146097 + day_of_era - 719468


def _compose(year: int, month: int, day: int, hour: int, minute: int, second: int, millis: int) -> int | None:
    # V8 accepts any day 1..31 whatever the month (rolling over, 2025-02-31 is
    # March 3rd) and 24:00:00.000 as the next midnight; so do we.
    if not (1 <= month <= 12 and 1 <= day <= 31 and minute < 60 and second < 60):
        return None
    if hour > 24 or (hour == 24 and (minute or second or millis)):
        return None
    return ((_days_from_civil(year, month, day) * 24 + hour) * 60 + minute) * 60_000 + second * 1000 + millis


def _parse_canonical(value: str) -> int | None:
    """Fast path for ``YYYY-MM-DDTHH:MM:SS.mmmZ``, the only form brains normally hold."""
    return _compose(
        int(value[0:4]), int(value[5:7]), int(value[8:10]),
        int(value[11:13]), int(value[14:16]), int(value[17:19]), int(value[20:23]),
    )


def parse_iso_ms(value: Any) -> int | None:
    """Milliseconds since the epoch of an ISO 8601 string, like V8's ``Date.parse``.

    No offset means UTC (as recall.md says); fractions beyond milliseconds are
    truncated, as a JavaScript ``Date`` holds whole milliseconds. Anything else
    gives None.
    """
    if not isinstance(value, str):
        return None
    if (
        len(value) == 24 and value[4] == "-" and value[7] == "-" and value[10] == "T" and value[13] == ":"
        and value[16] == ":" and value[19] == "." and value[23] == "Z" and value[:4].isdigit()
        and value[5:7].isdigit() and value[8:10].isdigit() and value[11:13].isdigit()
        and value[14:16].isdigit() and value[17:19].isdigit() and value[20:23].isdigit()
    ):
        return _parse_canonical(value)
    match = _ISO.match(value)
    if match is None:
        return None
    year_s, month_s, day_s, hour_s, minute_s, second_s, frac_s, offset_s = match.groups()
    if year_s == "-000000":
        return None  # invalid in ECMAScript
    millis = _compose(
        int(year_s), int(month_s or 1), int(day_s or 1), int(hour_s or 0), int(minute_s or 0),
        int(second_s or 0), int((frac_s + "00")[:3]) if frac_s else 0,
    )
    if millis is None:
        return None
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
    # Four-digit years, as toISOString writes them (strftime's %Y gives "500" for the year 500).
    return f"{moment.year:04d}" + moment.strftime("-%m-%dT%H:%M:%S.") + f"{millis % 1000:03d}Z"
