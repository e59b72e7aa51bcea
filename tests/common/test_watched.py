"""WatchedDocument (common.docstore.watched): a typed document read by many processes, edited
by CAS, with a last good copy, on a directory, moto and SeaweedFS."""

from __future__ import annotations

import logging
import threading
import time

import msgspec
import pytest

from common.docstore.watched import WatchedDocument
from tests.support.docstores import Backend

log = logging.getLogger("tests.watched")


class Doc(msgspec.Struct):
    items: list[str] = msgspec.field(default_factory=list)


class Reader:
    """One process's view: what was installed, and how often the document went missing."""

    def __init__(self, backend: Backend, *, poll_seconds: float | None = None, fresh: bool = True) -> None:
        self.doc = Doc()
        self.missing = 0
        store = backend.reopen() if fresh else backend.store
        self.watched = WatchedDocument(store, "doc.json", Doc, what="test file", log=log, on_change=self._install,
                                       on_missing=self._missing, poll_seconds=poll_seconds)
        self.watched.check()

    def _install(self, doc: Doc) -> None:
        self.doc = doc

    def _missing(self) -> None:
        self.missing += 1

    def add(self, item: str) -> int:
        def change(doc: Doc) -> int:
            doc.items.append(item)
            return len(doc.items)

        return self.watched.edit(change, RuntimeError)


def test_an_edit_is_seen_by_other_readers(backend: Backend) -> None:
    writer, reader = Reader(backend), Reader(backend)
    assert writer.add("a") == 1
    assert writer.doc.items == ["a"]  # the editor sees its own edit at once
    reader.watched.refresh()  # looks (no poll_seconds)
    assert reader.doc.items == ["a"]
    polled = Reader(backend, poll_seconds=60)
    writer.add("b")
    polled.watched.refresh()  # answers from memory: the poller looks
    assert polled.doc.items == ["a"]
    polled.watched.check()
    assert polled.doc.items == ["a", "b"]
    assert backend.store.get("doc.json.last-good").data == backend.store.get("doc.json").data  # type: ignore[union-attr]


def test_a_damaged_document_serves_its_last_good_copy_and_is_never_written_over(
        backend: Backend, caplog: pytest.LogCaptureFixture) -> None:
    writer, reader = Reader(backend), Reader(backend)
    writer.add("granted")
    writer.add("revoked-later")
    reader.watched.check()

    def revoke(doc: Doc) -> None:
        doc.items.remove("revoked-later")

    writer.watched.edit(revoke, RuntimeError)
    backend.store.put("doc.json", b'{"items": ["gran')  # damaged from outside, before the reader looked
    with caplog.at_level("CRITICAL"):
        reader.watched.check()
        reader.watched.check()  # unchanged since: no second report
    assert reader.doc.items == ["granted"]  # the last good copy, not what the reader had
    assert reader.watched.damaged is not None and "doc.json is unreadable or corrupt" in reader.watched.damaged
    assert "serving its last good copy doc.json.last-good" in reader.watched.damaged
    assert sum("unreadable or corrupt" in r.getMessage() for r in caplog.records) == 1
    starting = Reader(backend)  # a process starting now serves the last good copy too
    assert starting.doc.items == ["granted"] and starting.watched.damaged is not None
    with pytest.raises(RuntimeError, match="corrupt"):
        writer.add("x")
    assert backend.store.get("doc.json").data == b'{"items": ["gran'  # type: ignore[union-attr]
    backend.store.put("doc.json", b'{"items": ["fixed"]}')
    reader.watched.check()
    assert reader.doc.items == ["fixed"] and reader.watched.damaged is None


def test_without_a_last_good_copy_the_process_keeps_what_it_read(backend: Backend) -> None:
    reader = Reader(backend)
    backend.store.put("doc.json", b'{"items": ["mine"]}')
    reader.watched.check()
    backend.store.put("doc.json", b"garbage")
    reader.watched.check()
    assert reader.doc.items == ["mine"]
    assert "no readable last good copy" in (reader.watched.damaged or "")


def test_a_missing_document_is_reported_once(backend: Backend) -> None:
    writer, reader = Reader(backend), Reader(backend)
    writer.add("a")
    reader.watched.check()
    backend.store.delete("doc.json")
    reader.watched.check()
    reader.watched.check()
    assert reader.missing == 1
    writer.add("b")  # starts again from an empty document
    reader.watched.check()
    assert reader.doc.items == ["b"]


def test_racing_editors_lose_no_edit(backend: Backend) -> None:
    editors = [Reader(backend) for _ in range(6)]
    barrier = threading.Barrier(len(editors))
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            barrier.wait(timeout=30)
            for n in range(4):
                editors[i].add(f"{i}-{n}")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(editors))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors
    final = Reader(backend)
    assert sorted(final.doc.items) == sorted(f"{i}-{n}" for i in range(6) for n in range(4))


def test_a_polling_reader_sees_a_change_within_a_poll_interval(backend: Backend) -> None:
    reader = Reader(backend, poll_seconds=0.1)
    reader.watched.start_polling("test-poller")
    try:
        Reader(backend).add("late")
        deadline = time.monotonic() + 10
        while reader.doc.items != ["late"] and time.monotonic() < deadline:
            time.sleep(0.02)
        assert reader.doc.items == ["late"]
    finally:
        reader.watched.stop_polling()
