"""The dates a query names, and whether a memory is of that date: hybrid recall's date channel.

"What did Joanna watch on 1 May, 2022?", "what did we decide in March 2024?",
"2023年5月16日の会議": a question that names a calendar date asks about what happened or
was said then. Its words say little about it (every turn of a conversation on that day
carries the same date, and "May" matches every May), so the date is read as a date: the
query's named days, months or years become intervals, a memory is *of* the date when a
date it names in its text, or the day it was written, falls in one, and the memories of
the date among the fusion's first candidates are raised (`date_offsets`).

In a memory's text only dates named outright count (a day with its month's name, digits
with separators, a four-digit year): a bare number ("postgres 16", "port 5432", "v1.2") is
no date. A query may also name a day, week, month or year by where it lies from now
("yesterday", "last week", "上周" or "上週", "先月", "3 days ago": `query_dates`); what a span means
only at a time of day or on a weekday ("in 50 minutes", "at 4pm", "on Saturday") is left to
the words and the models. A day named without its year takes the year of the query's clock
(or of the memory's writing), the most recent such day that is not later.

A memory may report a day after it happened ("I watched it last night", said on 2 May):
a day named in the query also matches memories dated up to ``REPORT_LAG_DAYS`` later.

Parsing is `dateparser`'s (English, Chinese, Japanese). A memory's dates are parsed only
when a dated query ranks it among the first ``CANDIDATES`` and are kept by text, so a
brain is never parsed whole and a memory is parsed once per process.

Pure logic: the same texts and clocks always give the same dates.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, date, datetime, timedelta
from functools import lru_cache
from types import SimpleNamespace
from typing import Any

import numpy as np

from connector.engine.format.text import ascii_width
from connector.engine.recall.textmatch import fold_traditional

log = logging.getLogger("connector.recall")

Interval = tuple[date, date]  # first and last day, inclusive

LANGUAGES = ["en", "zh", "ja"]
# How many of the fusion's first memories a dated query's dates are checked against.
CANDIDATES = 50
# A day named in the query matches memories dated that day and up to this many days later.
REPORT_LAG_DAYS = 2
# Added to the fused score of a memory of the date (the z-scale: about one standard deviation).
DATE_WEIGHT = 1.0
# Years outside this range are numbers that happened to parse (a port, a count).
_YEARS = range(1900, 2200)
# A second clock far from any real one: a span whose date moves with the clock is relative.
_OTHER_CLOCK = datetime(1911, 3, 7, 5, 5)
_DIGIT = re.compile(r"\d")
_DIGITS = re.compile(r"\d+")
_YEAR_DIGITS = re.compile(r"(?<!\d)\d{4}(?!\d)")
_NUMERIC_DATE = re.compile(r"\d{4}-\d{1,2}-\d{1,2}|\d{1,2}[/.]\d{1,2}[/.]\d{2,4}")
# Characters searched on each side of a number (a month's name and its year fit: "on 9 September, 2022").
_REACH = 24
_MAX_WINDOWS = 12  # a memory full of numbers (a table) is searched no further than this
_WORD = re.compile(r"[^\W\d_]")  # a letter or a CJK character
# A query longer than this is searched for relative dates no further (a pasted paragraph).
_RELATIVE_QUERY_CHARS = 300
# A third far clock, on another weekday in another month and year than _OTHER_CLOCK: a weekday's
# or a month name's distance differs between the two, a relative span's does not.
_THIRD_CLOCK = datetime(1912, 8, 23, 23, 5)
_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
           "november", "december")
_MEMORY_TEXT_CACHE = 8192  # texts kept by the process (a dated query parses at most CANDIDATES)


def named_dates(text: str, clock: datetime) -> tuple[Interval, ...]:
    """`_named_dates`, and none where reading them fails: a date missed never fails a recall."""
    try:
        # Digits typed in full width (２０２３年５月１６日, common in Japanese text) as ASCII:
        # dateparser reads only ASCII digits.
        return _named_dates(ascii_width(text), clock)
    except Exception:  # noqa: BLE001 - the date channel is a hint; the recall goes on without it
        log.warning("reading dates failed; recall goes on without them", exc_info=True)
        return ()


def _named_dates(text: str, clock: datetime) -> tuple[Interval, ...]:
    """The calendar dates ``text`` names outright, as intervals (a day, a month, a year).

    A day or month named without its year takes ``clock``'s (the latest not after it). A text
    without a digit names none (nothing is parsed: most queries)."""
    out: list[Interval] = []
    for window in _windows(text):
        if not (_YEAR_DIGITS.search(window) or _NUMERIC_DATE.search(window) or _month_names().search(window)):
            continue  # nothing there could name a date outright (`_names_a_date`): not parsed
        with _DATEPARSER:
            dates = _window_dates(window, clock.replace(tzinfo=None))
        for interval in dates:
            if interval not in out:
                out.append(interval)
    return tuple(out)


def query_dates(query: str, now: datetime) -> tuple[Interval, ...]:
    """The dates a query names: those named outright (`named_dates`) and, relative to ``now``,
    a day, week, month or year named by where it is from now ("yesterday", "last week",
    "上周", "上週", "先月", "two weeks ago").

    A query holding none of the words `dateparser` reads as such (its own month names and
    relative phrases, in our languages) and no digit is not parsed: most queries."""
    query = ascii_width(query)  # ３日前 as 3日前 (named_dates does the same)
    found = list(named_dates(query, now))
    try:
        # dateparser's Chinese is simplified: a query naming none as written is read again with
        # traditional characters folded (上週 as 上周, 上個月 as 上个月). Not first: Japanese reads
        # as written (今週, 先週; folded, 今周 is no date).
        for text in dict.fromkeys((query, fold_traditional(query)) if len(query) <= _RELATIVE_QUERY_CHARS else ()):
            if not _date_words().search(text):
                continue
            with _DATEPARSER:
                relative = _relative_dates(text, now.replace(tzinfo=None))
            for interval in relative:
                if interval not in found:
                    found.append(interval)
            if relative:
                break
    except Exception:  # noqa: BLE001 - as in named_dates
        log.warning("reading relative dates failed; recall goes on without them", exc_info=True)
    return tuple(found)


# Held while dateparser is imported or used: two threads importing it at once deadlock in its
# own imports (seen: two people's first recalls at the same moment), and its lazily filled
# caches are not meant for threads either. A parse takes milliseconds.
_DATEPARSER = threading.RLock()


@lru_cache(maxsize=1)
def _dateparser() -> SimpleNamespace:
    """`dateparser`'s parts, imported on the first dated text (~0.1 s, ~16 MB)."""
    with _DATEPARSER:
        from dateparser import parse
        from dateparser.date import DateDataParser
        from dateparser.languages.loader import default_loader
        from dateparser.search import search_dates

        return SimpleNamespace(parse=parse, DateDataParser=DateDataParser, default_loader=default_loader,
                               search_dates=search_dates)


def _settings(clock: datetime) -> dict[str, Any]:
    # Naive UTC throughout: the host's time zone (tzlocal) is never read.
    return {"RELATIVE_BASE": clock, "PREFER_DATES_FROM": "past", "TIMEZONE": "UTC", "TO_TIMEZONE": "UTC",
            "RETURN_AS_TIMEZONE_AWARE": False}


def _windows(text: str) -> list[str]:
    """The stretches of ``text`` around its numbers (a date names one), merged where they meet:
    searching these instead of the whole text costs a fraction of it, the same dates found."""
    spans: list[list[int]] = []
    for number in _DIGITS.finditer(text):
        start, end = max(0, number.start() - _REACH), min(len(text), number.end() + _REACH)
        if spans and start <= spans[-1][1]:
            spans[-1][1] = end
        else:
            if len(spans) == _MAX_WINDOWS:
                break
            spans.append([start, end])
    return [text[start:end] for start, end in spans]


def _window_dates(text: str, clock: datetime) -> list[Interval]:
    search_dates = _dateparser().search_dates
    try:
        found = search_dates(text, languages=LANGUAGES, settings=_settings(clock)) or []
    except Exception:  # noqa: BLE001 - dateparser failing on odd text means no date there, never a failed recall
        return []
    out = []
    searched = 0
    for span, when in found:
        span, when, searched = _with_year(text, span, when, searched, clock)
        if not (_DIGIT.search(span) and _WORD.search(span)) or when.year not in _YEARS:
            continue
        try:
            data = _parser_at(_OTHER_CLOCK).get_date_data(span)
        except Exception:  # noqa: BLE001 - as above
            continue
        if data is None or data.date_obj is None:
            continue
        period = data.period if data.period in ("day", "month", "year") else "day"
        if _names_a_date(span, period) and _absolute(when, data.date_obj, period):
            out.append(_interval(when.date(), period))
    return out


def _relative_dates(text: str, clock: datetime) -> list[Interval]:
    """The days, weeks, months and years ``text`` names by where they are from ``clock``: a
    span counts when it lies as far before two other clocks (other weekdays, months, years)
    ("last week", "昨天", "3 days ago"). A weekday ("on Saturday", "金" read as Friday), a time of day
    ("at noon"), a month by its name alone ("may" is a verb too) or a bare number does not."""
    search_dates = _dateparser().search_dates
    try:
        found = search_dates(text, languages=LANGUAGES, settings=_settings(clock)) or []
    except Exception:  # noqa: BLE001 - as above
        return []
    out = []
    for span, when in found:
        if not _WORD.search(span):
            continue
        try:
            first, second = (_parser_at(moment, True).get_date_data(span) for moment in (_OTHER_CLOCK, _THIRD_CLOCK))
        except Exception:  # noqa: BLE001 - as above
            continue
        if first is None or second is None or first.date_obj is None or second.date_obj is None:
            continue
        period = first.period
        if period not in ("day", "week", "month", "year"):
            continue  # a time of day
        if _distance(_OTHER_CLOCK, first.date_obj, period) != _distance(_THIRD_CLOCK, second.date_obj, period):
            continue  # absolute (named_dates'), a weekday, or a word that only looks like a date
        out.append(_interval(when.date(), period))
    return out


def _distance(clock: datetime, moment: datetime, period: str) -> int:
    """How far ``moment`` lies before ``clock``, in ``period``s (days for a day or a week)."""
    if period == "year":
        return clock.year - moment.year
    if period == "month":
        return (clock.year * 12 + clock.month) - (moment.year * 12 + moment.month)
    return (clock.date() - moment.date()).days


@lru_cache(maxsize=4)
def _parser_at(clock: datetime, time_as_period: bool = False) -> Any:
    """A dateparser parser reading spans at ``clock`` (``time_as_period``: a time of day is its
    own period, not a day)."""
    DateDataParser = _dateparser().DateDataParser  # noqa: N806 - the library's class
    return DateDataParser(languages=LANGUAGES, settings={**_settings(clock), "RETURN_TIME_AS_PERIOD": time_as_period})


@lru_cache(maxsize=1)
def _date_words() -> re.Pattern[str]:
    """`dateparser`'s own words for months, days, weeks, months and years, and its relative
    phrases for them, in LANGUAGES: the words a query naming a date without a digit holds."""
    words: set[str] = set()
    for info in _locales():
        for key in (*_MONTHS, "year", "month", "week", "day"):
            words.update(word for word in info.get(key, []) if isinstance(word, str))
        for meaning, phrases in (info.get("relative-type") or {}).items():
            if meaning.split()[-2:-1] and meaning.split()[-2] in ("day", "week", "month", "year"):
                words.update(phrase for phrase in phrases if isinstance(phrase, str))
    return _any_of(words)


@lru_cache(maxsize=1)
def _month_names() -> re.Pattern[str]:
    """`dateparser`'s own names of the months in LANGUAGES ("may", "aug", "5月", "一月")."""
    return _any_of({word for info in _locales() for key in _MONTHS for word in info.get(key, []) if isinstance(word, str)})


def _locales() -> list[dict[str, Any]]:
    default_loader = _dateparser().default_loader
    with _DATEPARSER:
        return [default_loader.get_locale(code).info for code in LANGUAGES]


def _any_of(words: set[str]) -> re.Pattern[str]:
    """A pattern matching any of ``words``: Latin ones as whole words, others anywhere."""
    latin = sorted((word for word in words if word.isascii()), key=len, reverse=True)
    other = sorted((word for word in words if not word.isascii()), key=len, reverse=True)
    parts = []
    if latin:
        parts.append(r"\b(?:" + "|".join(re.escape(word) for word in latin) + r")\b")
    if other:
        parts.append("|".join(re.escape(word) for word in other))
    return re.compile("|".join(parts), re.IGNORECASE)


def _names_a_date(span: str, period: str) -> bool:
    """Whether a span names its date outright: a year in four digits ("in 2023"), or a day or
    month with a month's name ("16 June", "Aug 15th", "5月16日") or as digits with separators
    ("2024-03-05", "3/5/2024"). A word beside a number ("fact 1", "the 18th") is no date."""
    if period == "year":
        return bool(_YEAR_DIGITS.search(span))
    return bool(_month_names().search(span) or _NUMERIC_DATE.search(span))


_YEAR_AFTER = re.compile(r",?\s*\d{4}\b")


def _with_year(text: str, span: str, when: datetime, searched: int, clock: datetime) -> tuple[str, datetime, int]:
    """The span with the year right after it, when the search left it out ("on 10:58 am on 9
    October" of "... 9 October, 2022"), read again; and where to look for the next span."""
    start = text.find(span, searched)
    if start < 0:
        return span, when, searched
    end = start + len(span)
    year = _YEAR_AFTER.match(text, end)
    if year is None:
        return span, when, end
    parse = _dateparser().parse
    longer = text[start:year.end()]
    try:
        again = parse(longer, languages=LANGUAGES, settings=_settings(clock))
    except Exception:  # noqa: BLE001 - as above
        again = None
    return (longer, again, year.end()) if again is not None else (span, when, end)


def _absolute(when: datetime, elsewhere: datetime, period: str) -> bool:
    """Whether a span read at two far-apart clocks names the same date (a yearless day or
    month names the same one: only its year follows the clock)."""
    def key(moment: datetime) -> tuple[int, ...]:
        return (moment.year,) if period == "year" else (moment.year, moment.month) if period == "month" else (
            moment.year, moment.month, moment.day)
    if key(when) == key(elsewhere):
        return True
    return period != "year" and key(when)[1:] == key(elsewhere)[1:] and elsewhere.year in (
        _OTHER_CLOCK.year, _OTHER_CLOCK.year - 1)


def _interval(day: date, period: str) -> Interval:
    if period == "week":  # Monday to Sunday
        return day - timedelta(days=day.weekday()), day + timedelta(days=6 - day.weekday())
    if period == "year":
        return date(day.year, 1, 1), date(day.year, 12, 31)
    if period == "month":
        following = date(day.year + day.month // 12, day.month % 12 + 1, 1)
        return date(day.year, day.month, 1), following - timedelta(days=1)
    return day, day


@lru_cache(maxsize=_MEMORY_TEXT_CACHE)
def _text_dates(text: str, written_day: date | None) -> tuple[Interval, ...]:
    # Without a writing day a yearless date lands in _OTHER_CLOCK's year, which no query names.
    clock = datetime.combine(written_day, datetime.max.time()) if written_day else _OTHER_CLOCK
    return named_dates(text, clock)


def memory_dates(text: str, written_ms: int | None) -> tuple[Interval, ...]:
    """The dates a memory is of: those its text names (a yearless one in the year it was
    written), and the day it was written (``written_ms``: the index's creation time, UTC)."""
    written_day = datetime.fromtimestamp(written_ms / 1000, tz=UTC).date() if written_ms is not None else None
    dates = _text_dates(text, written_day)
    if written_day is not None and (written_day, written_day) not in dates:
        dates = (*dates, (written_day, written_day))
    return dates


def of_date(named: Sequence[Interval], dates: Sequence[Interval]) -> bool:
    """Whether a memory with ``dates`` is of a date the query ``named`` (a named day: up to
    REPORT_LAG_DAYS later too)."""
    for first, last in named:
        if first == last:
            last = last + timedelta(days=REPORT_LAG_DAYS)
        if any(start <= last and end >= first for start, end in dates):
            return True
    return False


def date_offsets(
    named: Sequence[Interval],
    fused: np.ndarray,
    eligible: np.ndarray,
    text_of: Callable[[int], str],
    written_of: Callable[[int], int | None],
    weight: float = DATE_WEIGHT,
    candidates: int = CANDIDATES,
) -> np.ndarray | None:
    """``weight`` for each of the first ``candidates`` eligible memories by ``fused`` score
    that is of a date the query named, 0 elsewhere; None when the dates tell them nothing
    apart (no date named, none of them of it, or all of them). ``text_of`` and ``written_of``
    give a memory's text and creation time (ms) by position."""
    if not named or not eligible.any():
        return None
    scores = np.where(eligible, fused, -np.inf)
    count = min(candidates, int(eligible.sum()))
    first = np.argpartition(-scores, count - 1)[:count] if count < len(scores) else np.flatnonzero(eligible)
    matching = [int(position) for position in first
                if np.isfinite(scores[position]) and of_date(named, memory_dates(text_of(int(position)), written_of(int(position))))]
    if not matching or len(matching) == count:
        return None
    offsets = np.zeros(len(fused), dtype=np.float32)
    offsets[matching] = weight
    return offsets
