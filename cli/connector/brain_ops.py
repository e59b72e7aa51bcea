"""`brain-connector memorize|pin|unpin|forget|restore|verify`: the engine's writes on a brain directory.

Each command loads the directory into memory, applies one operation, and writes back
only the files that changed (each atomically). On an error nothing is written, an
``{"error": ...}`` object goes to stderr and the exit status is 1.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

import click

from connector.engine.format.archive import ArchiveError, load_directory, save_directory
from connector.engine.format.brain import Brain, dump_json
from connector.engine.format.rules import parse_iso
from connector.engine.writes.credentials import credential_refusal, credentials_in_memories
from connector.engine.writes.errors import ArchivedMemory, BrainError
from connector.engine.writes.ops import Forget, Memorize, Operation, Pin, Unpin, Verify
from connector.engine.writes.restore import Restore

_BRAIN_ARGUMENT = click.argument(
    "brain", type=click.Path(file_okay=False, dir_okay=True, path_type=Path)
)
_NOW_OPTION = click.option(
    "--now", default=None, help="Clock for timestamps and new ids (ISO 8601); default: the current time."
)


def _clock(value: str | None) -> datetime:
    if value is None:
        return datetime.now(UTC)
    parsed = parse_iso(value)
    if parsed is None:
        raise click.BadParameter(f"not an ISO 8601 instant: {value!r}", param_hint="--now")
    return parsed


def _fail(message: str) -> NoReturn:
    sys.stderr.write(json.dumps({"error": message}, ensure_ascii=False) + "\n")
    sys.exit(1)


def _print_json(value: Any) -> None:
    """``value`` as the command's JSON answer on standard output."""
    sys.stdout.buffer.write(dump_json(value))
    sys.stdout.buffer.flush()


def _similar_before(brain: Brain, operation: Memorize) -> list[list[dict[str, Any]]]:
    """What the similar check finds for each memory of ``operation`` in the brain before it is written."""
    from connector.engine.recall.hybrid import HybridIndex
    from connector.engine.recall.index import BrainIndex
    from connector.engine.tending.similar import Incoming, find_similar
    from connector.workcopy.vectors import VectorStore

    if "index.json" not in brain:
        return [[] for _ in operation.memories]
    index = BrainIndex.build(brain)
    if not index.memories:
        return [[] for _ in operation.memories]
    store = VectorStore()  # this run only: the command keeps no state
    hybrid = HybridIndex.build(brain, index, store)
    return [
        [item.to_json(detail=True) for item in find_similar(
            brain, Incoming(memory.content, memory.title, memory.tags, memory.type),
            index=index, hybrid=hybrid, embed=store.embed_query)]
        for memory in operation.memories
    ]


def _run(
    brain_dir: Path, make: Any, now: str | None, *, create: bool = False, writes: bool = True, similar: bool = False
) -> dict[str, Any]:
    """Build the operation, apply it to the directory's brain, save, print the result (and return it).

    With ``similar`` (memorize), each stored memory also lists what the similar check
    found in the brain before the write (connector/engine/tending/similar.py)."""
    clock = _clock(now)
    try:
        operation: Operation = make()
        if not (brain_dir / "index.json").is_file() and not create:
            raise BrainError(f"brain not initialized: no index.json in {brain_dir}, so it is not a brain directory "
                             "(the `brain` command line's directory holds index.json and the memory folders)")
        brain = load_directory(brain_dir) if brain_dir.is_dir() else Brain()
        before = dict(brain.files)
        found = _similar_before(brain, operation) if similar and isinstance(operation, Memorize) else None
        result = operation.apply(brain, clock)
        if found is not None:
            for entry, items in zip(result["stored"], found, strict=False):
                entry["similar"] = items
        if writes and brain.files != before:
            save_directory(brain, brain_dir)
    except ArchivedMemory as exc:  # its message points to the web app, which a brain directory has not
        _fail(f"{exc.memory_id} is archived (forgotten), not a live memory; restore it first: "
              f"brain-connector restore {brain_dir} {exc.memory_id}")
    except (BrainError, ArchiveError) as exc:
        _fail(str(exc))
    except OSError as exc:
        _fail(f"cannot access {brain_dir}: {exc.strerror or exc}")
    _print_json(result)
    return result


@click.command()
@_BRAIN_ARGUMENT
@_NOW_OPTION
@click.option("--allow-secrets", is_flag=True,
              help="Store memories even when their text looks like it holds a credential (refused without it).")
@click.option("--similar/--no-similar", "check_similar", default=True, show_default=True,
              help="List, for each memory written, the existing memories it duplicates or updates "
              "(embeds the brain's memories first: seconds per thousand memories).")
def memorize(brain: Path, now: str | None, allow_secrets: bool, check_similar: bool) -> None:
    """Write memories into BRAIN (a directory) from JSON on stdin.

    The JSON is what `brain memorize` takes: one memory object, an array of them, or
    {"memories": [...]}. Each memory needs title, type, path and content; optional:
    cognitive_type, tags, related, salience, confidence, source, encoding_context,
    pinned, pin_scope, pin_priority, stable, origin, valid_from, valid_until,
    supersedes. A path not ending in .md is a directory (the file is named from the
    title). A missing BRAIN directory is created. Prints the stored memories as JSON;
    each has "similar": the existing memories it repeats (duplicate), changes (update)
    or is close to (related), as `brain-connector similar` finds them (nothing is
    skipped or superseded because of them). A memory whose text (any field) looks like
    it holds a credential (a cloud key, a token, a private key) is refused, as on every
    other write path, unless --allow-secrets.
    """

    def make() -> Operation:
        raw = sys.stdin.buffer.read()
        try:
            payload = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            raise BrainError("stdin is not valid JSON") from None
        op = Memorize.from_request(payload)
        kinds = [] if allow_secrets else credentials_in_memories(op.memories)
        if kinds:
            raise BrainError(f"{credential_refusal(kinds)} Leave the secret out, or pass --allow-secrets.")
        return op

    _run(brain, make, now, create=True, similar=check_similar)


@click.command()
@_BRAIN_ARGUMENT
@click.argument("memory_id")
@click.option("--scope", default="global", show_default=True, help="Pin scope.")
@click.option("--priority", type=int, default=0, show_default=True, help="Pin priority.")
@_NOW_OPTION
def pin(brain: Path, memory_id: str, scope: str, priority: int, now: str | None) -> None:
    """Pin MEMORY_ID in BRAIN (a directory): always present, never decays."""
    _run(brain, lambda: Pin(memory_id, scope, priority), now)


@click.command()
@_BRAIN_ARGUMENT
@click.argument("memory_id")
@_NOW_OPTION
def unpin(brain: Path, memory_id: str, now: str | None) -> None:
    """Unpin MEMORY_ID in BRAIN (a directory); succeeds (and says so) if it was not pinned."""
    _run(brain, lambda: Unpin(memory_id), now)


@click.command()
@_BRAIN_ARGUMENT
@click.argument("memory_id")
@click.option("--force", is_flag=True, help="Archive even a protected memory (salience >= 0.7).")
@_NOW_OPTION
def forget(brain: Path, memory_id: str, force: bool, now: str | None) -> None:
    """Archive MEMORY_ID of BRAIN (a directory) into _archived/ (recoverable)."""
    _run(brain, lambda: Forget(memory_id, force), now)


@click.command()
@_BRAIN_ARGUMENT
@click.argument("memory_id")
@_NOW_OPTION
def restore(brain: Path, memory_id: str, now: str | None) -> None:
    """Bring MEMORY_ID of BRAIN (a directory) back from _archived/ (what forget did), same id."""
    _run(brain, lambda: Restore(memory_id), now)


@click.command()
@_BRAIN_ARGUMENT
@click.argument("action", type=click.Choice(["list", "approve", "reject"]), default="list")
@click.argument("memory_ids", nargs=-1)
@_NOW_OPTION
def verify(brain: Path, action: str, memory_ids: tuple[str, ...], now: str | None) -> None:
    """List memories of BRAIN (a directory) pending verification, or approve/reject MEMORY_IDS.

    Per-id results and errors are printed separately; one bad id does not stop the rest. The
    exit status is 1 when ids were given and none of them could be approved or rejected.
    """
    result = _run(brain, lambda: Verify(action, list(memory_ids)), now, writes=action != "list")
    if memory_ids and not result.get("results"):
        sys.exit(1)  # the JSON above says why for each id; a script must not take this for done
