"""The review queue's check of memories other devices wrote, after a pull brought them.

A memory written through this connector is checked for duplicates and updates as it is
written (`connector.engine.tending.review.MemorizeFlagged`). One written elsewhere (the
``brain`` command line, another connector) arrives with a pull; the working-copy
manager tells `PullReview` of every pull that brought a newer archive
(``manager.pull_listeners``), and it checks the memories no check has looked at yet
(`connector.engine.tending.review.unchecked_ms`), oldest first, at most `PULL_CHECK_LIMIT` per pull.

Where and when it runs, and what it writes:

- in a background task after the pull (the listener is called with the copy's lock
  held, so it only schedules), one check per brain at a time, a newer pull replacing
  a queued one;
- only when this process already uses the embedding model (it has built a hybrid
  index: a hybrid recall or a memorize's check), so a pull never loads the model
  just for this;
- pairs found are queued through the normal write path (`FlagPairs` via
  ``manager.write``: pushed with If-Match, replayed on a 412, held when the store is
  away), together with the ids checked, which moves the brain's ``checked_until`` so no
  process checks them again;
- never for a sign-in that may only read (``brain.read``): the manager tells of such a
  pull when a sign-in that may write next uses the copy; a viewer's write is refused before
  anything is attempted, and the brain's owners' connectors find the pairs on their pulls;
- when nothing is found nothing is written (no push of a new brain version just to
  say so): the ids checked are remembered in this process, and another process may
  check them once more, finding nothing again.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from dataclasses import replace
from typing import Any

from connector.engine.format.brain import Brain
from connector.engine.format.text import memory_body
from connector.engine.recall.indexcache import index_for
from connector.engine.tending.review import Flag, FlagPairs, recorded, unchecked_ms
from connector.engine.tending.similar import Incoming, find_similar
from connector.engine.writes.errors import BrainError
from connector.mcp.tools import BrainTools
from connector.workcopy.accounts import UnknownBrain
from connector.workcopy.core import BrainUnavailable
from connector.workcopy.manager import WorkingCopyManager
from connector.workcopy.model import Account
from connector.workcopy.store_client import StoreError

log = logging.getLogger("connector.review")

PULL_CHECK_LIMIT = 20  # memories checked per pull, at most
MEMO_BRAINS = 256
MEMO_IDS = 2000
SIMILAR_LIMIT = 6  # one more than find_similar's default: the memory itself is among them


def _string(value: Any) -> str:
    return value if isinstance(value, str) else ""


class PullReview:
    """Checks memories a pull brought for duplicates and updates, and queues the pairs found."""

    def __init__(self, manager: WorkingCopyManager, tools: BrainTools, *, limit: int = PULL_CHECK_LIMIT) -> None:
        self.manager = manager
        self.tools = tools
        self.limit = limit
        self._done: OrderedDict[str, set[str]] = OrderedDict()  # brain id -> ids checked, nothing found
        self._running: dict[str, asyncio.Task[None]] = {}
        self._next: dict[str, tuple[Account, str, Brain]] = {}
        manager.pull_listeners.append(self.pulled)

    def pulled(self, account: Account, brain_id: str, old_key: str, new_key: str, brain: Brain) -> None:
        """A pull brought ``brain`` (content ``new_key``): schedule its check when the model is in use.

        In use: this process has built a hybrid index (recall in hybrid mode, or the memorize
        check). Asked of the cache's size, not of a key, so it holds whatever the cache keys by.
        """
        if len(self.tools.hybrid_cache) == 0 or "index.json" not in brain:
            return
        self._next[brain_id] = (account, new_key, brain)
        if brain_id not in self._running:
            self._start(brain_id)

    def _start(self, brain_id: str) -> None:
        account, key, brain = self._next.pop(brain_id)
        task = asyncio.get_running_loop().create_task(self._check(account, brain_id, key, brain))
        self._running[brain_id] = task

        def done(_: asyncio.Task[None]) -> None:
            self._running.pop(brain_id, None)
            if brain_id in self._next:
                self._start(brain_id)

        task.add_done_callback(done)

    async def _check(self, account: Account, brain_id: str, key: str, brain: Brain) -> None:
        try:
            flags, checked = await asyncio.to_thread(self.find, brain_id, key, brain)
        except Exception:  # a brain the index cannot read: recall reports it; nothing to queue
            log.warning("could not check pulled memories for duplicates", exc_info=True)
            return
        if not flags:
            self._remember(brain_id, checked)
            return
        try:
            # To the brain pulled, by id: not to whichever brain the account uses by then.
            outcome = await self.manager.write(replace(account, brain=brain_id), FlagPairs(flags, checked), "review-flag")
        except (BrainError, BrainUnavailable, UnknownBrain, StoreError) as exc:
            # E.g. a viewer of a shared brain: the pairs are found again by a sign-in that may write.
            log.info("pulled duplicates not queued: %s", exc)
            return
        except Exception:  # a background task: never dies unseen
            log.warning("pulled duplicates not queued", exc_info=True)
            return
        log.info("queued pulled duplicates for review", extra={"pairs": outcome.result.get("count", 0)})

    def _remember(self, brain_id: str, ids: list[str]) -> None:
        done = self._done.setdefault(brain_id, set())
        self._done.move_to_end(brain_id)
        done.update(ids)
        if len(done) > MEMO_IDS:
            self._done[brain_id] = set(list(done)[-MEMO_IDS:])
        while len(self._done) > MEMO_BRAINS:
            self._done.popitem(last=False)

    def find(self, brain_id: str, key: str, brain: Brain) -> tuple[list[Flag], list[str]]:
        """(pairs found, ids checked) among the memories of ``brain`` not checked yet (worker thread).

        Reads the recall index the pull just followed (a cache hit), not index.json: parsing
        that takes a few hundred ms at 10,000 memories; only the memories checked are decoded.
        """
        index = index_for(brain, key, self.tools.index_cache)
        created = {record.id: record.created_ms for record in index.memories}
        known = self._done.get(brain_id, set())
        waiting = [memory_id for memory_id in unchecked_ms(brain, created, self.limit + len(known))
                   if memory_id not in known][: self.limit]
        if not waiting:
            return [], []
        hybrid = self.tools.hybrid_index(brain, key, index, brain_id)  # this brain's own vectors
        seen = recorded(brain)  # pairs queued before (e.g. by the memorize that wrote one of them)
        flags: list[Flag] = []
        for memory_id in waiting:
            entry = index.memories[index.positions[memory_id]].entry
            text = brain.read_text(_string(entry.get("path"))) or ""
            tags = [tag for tag in entry.get("tags", []) if isinstance(tag, str)] \
                if isinstance(entry.get("tags"), list) else []
            incoming = Incoming(memory_body(text), _string(entry.get("title")) or None, tags,
                                _string(entry.get("type")) or None)
            found = find_similar(brain, incoming, index=index, hybrid=hybrid, embed=self.tools.vectors.embed_query,
                                 limit=SIMILAR_LIMIT)
            context = entry.get("encoding_context")
            by = (_string(context.get("agent")) if isinstance(context, dict) else "") or "another device"
            mine = created[memory_id] or -1
            for similar in found:
                if not similar.flagged or similar.id == memory_id or similar.id not in created \
                        or frozenset((similar.id, memory_id)) in seen:
                    continue
                # The newer of the two is the one asked about ("keep new" / "keep old").
                if (created[similar.id] or -1) > mine:
                    flags.append(Flag(similar.id, memory_id, similar.relation, similar.score, "pull", by))
                else:
                    flags.append(Flag(memory_id, similar.id, similar.relation, similar.score, "pull", by))
        return flags, waiting

