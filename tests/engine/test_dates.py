"""Hybrid recall's date channel: the dates a query names, the dates a memory is of, and the rise
of the memories of a named date among the fusion's first candidates."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connector.engine.recall.dates import (
    CANDIDATES,
    REPORT_LAG_DAYS,
    date_offsets,
    memory_dates,
    named_dates,
    of_date,
    query_dates,
)
from connector.engine.format.brain import Brain
from connector.engine.format.jsvalues import datetime_ms
from connector.engine.recall.hybrid import recall_in_mode
from connector.engine.writes.ops import Memorize
from connector.workcopy.vectors import VectorStore
from tests.engine.hybrid_support import make_brain
from tests.support.processes import REPO_ROOT

CLOCK = datetime(2023, 10, 22, 9, 55, tzinfo=UTC)


def day(year: int, month: int, number: int) -> tuple[date, date]:
    return date(year, month, number), date(year, month, number)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("What movie did Joanna watch on 1 May, 2022?", (day(2022, 5, 1),)),
        ("Which book did Tim recommend on 8th December, 2023?", (day(2023, 12, 8),)),
        ("Nate on 10:58 am on 9 October, 2022: we played Catan", (day(2022, 10, 9),)),
        ("What did John host for the veterans in May 2023?", ((date(2023, 5, 1), date(2023, 5, 31)),)),
        ("How many times has Melanie gone to the beach in 2023?", ((date(2023, 1, 1), date(2023, 12, 31)),)),
        ("What did the teammates give him on Aug 15th?", (day(2023, 8, 15),)),  # the clock's year
        ("What happened on December 24?", (day(2022, 12, 24),)),  # the latest not after the clock
        ("We moved the cluster on 2024-03-05", (day(2024, 3, 5),)),
        ("2023年5月16日我们决定迁移数据库", (day(2023, 5, 16),)),
        ("5月16日の会議で決めた", (day(2023, 5, 16),)),
    ],
)
def test_a_date_named_outright_is_read_as_a_day_month_or_year(text: str, expected: tuple) -> None:
    assert named_dates(text, CLOCK) == expected


@pytest.mark.parametrize(
    "text",
    [
        "postgres 16 on port 5432",  # bare numbers
        "the v1.2 release and 16 GB of RAM",
        "I ran 10 km in 50 minutes",  # relative to now: left to the words
        "should I have an espresso at 4pm",
        "Sato Kenji 1:1 written agenda Thursday",
        "cert-manager DNS-01 challenge expired certificate",
        "benchmark fact 3 kettle",  # a word beside a number: dateparser would read a month
        "fact 32 token",  # ... or a year 1932
        "How long ago was Caroline's 18th birthday?",
        "what did I eat yesterday",  # no digit: nothing is parsed
        "",
        "9" * 5000,
        "\x00 2023年13月45日 \ud7ff 31/31/31",
    ],
)
def test_numbers_times_and_relative_spans_are_no_dates(text: str) -> None:
    assert named_dates(text, CLOCK) == ()


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("what did I save yesterday", (day(2023, 10, 21),)),  # CLOCK is Sunday 22 October 2023
        ("昨天的会议", (day(2023, 10, 21),)),
        ("3 days ago", (day(2023, 10, 19),)),
        ("what did we discuss last week", ((date(2023, 10, 9), date(2023, 10, 15)),)),
        ("上周我做了什么", ((date(2023, 10, 9), date(2023, 10, 15)),)),
        ("上週我做了什麼", ((date(2023, 10, 9), date(2023, 10, 15)),)),  # traditional, read folded
        ("上個月的計劃", ((date(2023, 9, 1), date(2023, 9, 30)),)),
        ("先週の会議", ((date(2023, 10, 9), date(2023, 10, 15)),)),
        ("things from last month", ((date(2023, 9, 1), date(2023, 9, 30)),)),
        ("先月の旅行", ((date(2023, 9, 1), date(2023, 9, 30)),)),
        ("the camping trip last year", ((date(2022, 1, 1), date(2022, 12, 31)),)),
        ("去年的旅行", ((date(2022, 1, 1), date(2022, 12, 31)),)),
        # Not dates: a weekday, a time of day, a month by name alone ("may" is a verb too),
        # characters read as weekdays (金, 水), words that are not about time.
        ("saxophone lessons on Saturday mornings", ()),
        ("dining spot near the workplace at noon", ()),
        ("What may I bring to the March rally?", ()),
        ("k6 load test before the December peak", ()),
        ("稟議が必要な金額", ()),
        ("家里热带鱼的鱼缸换水", ()),
        ("kettle harbour lantern", ()),
    ],
)
def test_a_query_names_days_weeks_months_and_years_relative_to_now(query: str, expected: tuple) -> None:
    assert query_dates(query, CLOCK) == expected


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("0123456789 ,.:-/年月日周週前去昨先上 yesterdaylastweekMayJunDecmonth")) | st.characters(),
               max_size=120))
def test_any_text_gives_dates_or_none_never_an_error(text: str) -> None:
    for found in (named_dates(text, CLOCK), query_dates(text, CLOCK)):
        assert all(first <= last and first.year in range(1900, 2200) for first, last in found)


def test_a_day_named_matches_what_was_reported_up_to_the_lag_after_it() -> None:
    named = named_dates("What movie did Joanna watch on 1 May, 2022?", CLOCK)
    assert of_date(named, [day(2022, 5, 1)])
    assert of_date(named, [day(2022, 5, 1 + REPORT_LAG_DAYS)])  # "I watched it last night"
    assert not of_date(named, [day(2022, 5, 2 + REPORT_LAG_DAYS)])
    assert not of_date(named, [day(2022, 4, 30)])
    month = named_dates("What did we decide in March 2024?", CLOCK)
    assert of_date(month, [day(2024, 3, 31)]) and not of_date(month, [day(2024, 4, 1)])


def test_a_memory_is_of_the_dates_it_names_and_of_the_day_it_was_written() -> None:
    written = datetime_ms(datetime(2022, 5, 2, 11, 54, tzinfo=UTC))
    assert memory_dates("Joanna on 11:54 am on 2 May, 2022: I watched the trilogy last night!", written) == (
        day(2022, 5, 2),)
    assert memory_dates("Deploy freeze starts on 20 December", written) == (day(2021, 12, 20), day(2022, 5, 2))
    assert memory_dates("No date in here", None) == ()


def _texts(count: int, dated: dict[int, str]) -> list[str]:
    return [dated.get(position, f"memory {position} about nothing in particular") for position in range(count)]


def test_the_memories_of_the_date_among_the_first_candidates_rise() -> None:
    texts = _texts(80, {3: "On 1 May, 2022 we watched a film", 70: "On 1 May, 2022 we went out"})
    fused = np.linspace(1.0, 0.0, 80).astype(np.float32)  # position 0 first
    eligible = np.ones(80, dtype=bool)
    named = named_dates("what did we watch on 1 May 2022", CLOCK)
    raised = date_offsets(named, fused, eligible, texts.__getitem__, lambda position: None)
    assert raised is not None and raised[3] > 0
    assert raised[70] == 0  # beyond the first CANDIDATES: never parsed, never raised
    assert CANDIDATES < 70
    assert np.count_nonzero(raised) == 1
    eligible[3] = False  # not eligible (filtered out): not raised
    assert date_offsets(named, fused, eligible, texts.__getitem__, lambda position: None) is None


def test_dates_that_tell_nothing_apart_raise_nothing() -> None:
    fused = np.linspace(1.0, 0.0, 10).astype(np.float32)
    eligible = np.ones(10, dtype=bool)
    named = named_dates("what happened on 1 May 2022", CLOCK)
    same_day = datetime_ms(datetime(2022, 5, 1, tzinfo=UTC))
    texts = _texts(10, {})
    # Every candidate was written that day: the date says nothing about which.
    assert date_offsets(named, fused, eligible, texts.__getitem__, lambda position: same_day) is None
    assert date_offsets(named, fused, eligible, texts.__getitem__, lambda position: None) is None
    assert date_offsets((), fused, eligible, texts.__getitem__, lambda position: None) is None


DIARY = [
    ("Film night", "On 3 June, 2024 we watched a great film at the cinema with friends, the best film this year."),
    ("Film at home", "On 13 March, 2024: last night we watched a film at home, Spirited Away."),
    ("Cinema again", "On 20 August, 2024 we saw a film at the cinema, a long film about the sea."),
    ("Bike ride", "On 12 March, 2024 I rode my bike along the river in the morning."),
    *[(f"Note {number}", f"On {number} July, 2024 I cooked dinner and read a book about gardens.") for number in range(1, 30)],
]


@pytest.fixture(scope="module")
def model_store() -> VectorStore:
    return VectorStore()


def _first_hit(brain: Brain, query: str, store: VectorStore, now: datetime) -> str:
    hits = recall_in_mode(brain, query, mode="hybrid", source=store, top=5, now=now)
    return hits[0]["id"] if hits else ""


def test_hybrid_recall_finds_the_memory_of_the_date_the_query_names(model_store: VectorStore) -> None:
    brain, ids = make_brain([{"title": title, "content": content, "tags": ["diary"], "path": "diary/"}
                             for title, content in DIARY])
    now = datetime(2024, 10, 1, tzinfo=UTC)

    def first(query: str) -> str:
        return _first_hit(brain, query, model_store, now)

    # Without the date the richer film memory wins; the day's words find the bike ride. The film
    # of the day before it was told ("last night", on 13 March) is of that date.
    assert first("what film did we watch") != ids["Film at home"]
    assert first("what film did we watch on 12 March 2024") == ids["Film at home"]
    assert first("what film did we watch on 2024-03-12") == ids["Film at home"]
    assert first("what film did we watch on March 12th") == ids["Film at home"]  # the year of now


def test_hybrid_recall_finds_what_was_written_on_the_day_the_query_names(model_store: VectorStore) -> None:
    brain = Brain()
    now = datetime(2024, 10, 9, 18, 0, tzinfo=UTC)  # a Wednesday
    ids = {}
    for days_ago, title, content in [
        (20, "Flaky test", "The payments test fails now and then when the clock crosses midnight; we pinned the clock."),
        (9, "Flaky retry", "The flaky payments integration test: the retry loop hid a real race."),
        (1, "Flaky CI job", "The flaky payments test failed again in CI, this time a port already in use."),
        *[(days, f"Note {days}", f"Cooked dinner and read a chapter about gardens, day {days}.") for days in range(2, 40, 3)],
    ]:
        stored = Memorize.from_request([{"title": title, "content": content, "type": "learning", "path": "notes/"}]).apply(
            brain, now - timedelta(days=days_ago))["stored"]
        ids[title] = stored[0]["id"]

    def first(query: str) -> str:
        return _first_hit(brain, query, model_store, now)

    assert first("the flaky payments test") != ids["Flaky CI job"]
    assert first("the flaky payments test yesterday") == ids["Flaky CI job"]
    assert first("the flaky payments test last week") == ids["Flaky retry"]


_FIRST_USE_AT_ONCE = """
import datetime, json, threading
from connector.engine.recall.dates import query_dates
now = datetime.datetime(2026, 12, 5, 17)
barrier = threading.Barrier(8)
found = {}
def run(n):
    barrier.wait()  # dateparser is imported by the first of them, from two import paths
    found[n] = query_dates("the 2024 release ships on day 3" if n % 2 else "note 0: ships on day 0", now)
threads = [threading.Thread(target=run, args=(n,)) for n in range(8)]
[thread.start() for thread in threads]
[thread.join() for thread in threads]
print(json.dumps({n: [[str(a), str(b)] for a, b in dates] for n, dates in found.items()}))
"""


def test_queries_reading_dates_at_once_in_a_fresh_process_all_get_them(tmp_path: Path) -> None:
    # Two people's first recalls at the same moment imported dateparser from two threads, which
    # deadlocked in its imports (a failed recall, seen in a test of the connector).
    for _ in range(3):
        done = subprocess.run([sys.executable, "-c", _FIRST_USE_AT_ONCE], capture_output=True, text=True, timeout=120,
                              cwd=REPO_ROOT, env={**os.environ, "HOME": str(tmp_path)}, check=False)
        assert done.returncode == 0, done.stderr
        found = json.loads(done.stdout)
        assert len(found) == 8 and "reading dates failed" not in done.stderr, done.stderr
        assert all(found[str(n)] == ([["2024-01-01", "2024-12-31"]] if n % 2 else []) for n in range(8)), found
