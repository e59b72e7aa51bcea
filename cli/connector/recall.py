"""`brain-connector recall`: recall from a brain directory or archive, like `brain recall`."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path

import click

from connector.engine.format.archive import ArchiveError, load_archive, load_directory
from connector.engine.format.brain import Brain, dump_json
from connector.engine.format.jsvalues import parse_iso_ms
from connector.engine.recall.hybrid import EXACT_CANNOT_READ, MODES, empty_recall_reason, recall_in_mode
from connector.engine.recall.index import RecallError
from connector.workcopy.vectorcache import cached_stores, default_cache_dir


def _instant(value: str | None, option: str) -> datetime | None:
    if value is None:
        return None
    millis = parse_iso_ms(value)
    if millis is None:
        raise click.BadParameter(f"not an ISO 8601 instant: {value!r}", param_hint=option)
    return datetime.fromtimestamp(millis / 1000, tz=UTC)


def warn(line: str) -> None:
    """Tell the person running the command something that does not stop it (stderr)."""
    click.echo(f"warning: {line}", err=True)


def _load(path: Path) -> Brain:
    if path.is_dir():
        if not (path / "index.json").is_file():
            # Said before reading a whole unrelated tree.
            raise RecallError(f"brain not initialized: {path} has no index.json, so it is not a brain directory. "
                              "Give the directory the `brain` command line keeps (holding index.json and the "
                              "memory folders) or a brain archive (.tar.gz), e.g. one downloaded from the store")
        return load_directory(path)
    with path.open("rb") as stream:
        return load_archive(stream)


@click.command()
@click.argument("brain", type=click.Path(exists=True, path_type=Path))
@click.argument("query", required=False)
@click.option("--top", type=click.IntRange(min=1), default=10, show_default=True, help="How many hits to print (1 or more).")
@click.option("--project", default=None, help="Current project, for context match.")
@click.option("--task", default=None, help="Current task type, for context match.")
@click.option("--topics", default=None, help="Comma-separated topics, for context match.")
@click.option("--context", "context_mode", is_flag=True, help="Context mode: recall without a query.")
@click.option("--now", default=None, help="Clock to score at (ISO 8601); default: the current time.")
@click.option("--as-of", "as_of", default=None, help="Only facts valid at this instant (ISO 8601).")
@click.option("--as-known-of", "as_known_of", default=None, help="Only memories created by this instant.")
@click.option(
    "--mode",
    type=click.Choice(MODES),
    default="exact",
    show_default=True,
    help="exact: scored like `brain recall`; hybrid: also matches stems, typos, Chinese/Japanese and meaning, "
    "and lists only memories that match well (none when nothing does).",
)
@click.option(
    "--cache-dir",
    "cache_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where hybrid mode keeps the brain's vectors between runs, keyed by content (a second call on an "
    "unchanged brain embeds nothing; deleting it is safe; a read-only one is read, an unusable one only "
    f"costs time). Default: {default_cache_dir()}.",
)
def recall(
    brain: Path,
    query: str | None,
    top: int,
    project: str | None,
    task: str | None,
    topics: str | None,
    context_mode: bool,
    now: str | None,
    as_of: str | None,
    as_known_of: str | None,
    mode: str,
    cache_dir: Path | None,
) -> None:
    """Print the memories BRAIN (a directory or a .tar.gz) recalls for QUERY, as JSON."""
    if not query and not context_mode:
        raise click.UsageError("give a QUERY, or --context")
    clock = _instant(now, "--now") or datetime.now(UTC)
    try:
        # The models' vectors are kept in the cache directory: only new memories are embedded.
        use, e5, judge = cached_stores(cache_dir, judge=True, on_unusable=warn) if mode == "hybrid" else (None, None, None)
        hits = recall_in_mode(
            _load(brain),
            query,
            mode=mode,
            source=use,
            e5_source=e5,
            judge_source=judge,
            top=top,
            project=project,
            task=task,
            topics=topics,
            context=context_mode,
            now=clock,
            as_of=_instant(as_of, "--as-of"),
            as_known_of=_instant(as_known_of, "--as-known-of"),
        )
    except (ArchiveError, RecallError) as exc:
        raise click.ClickException(str(exc)) from None
    except OSError as exc:
        raise click.ClickException(f"cannot read {brain}: {exc.strerror or exc}") from None
    sys.stdout.buffer.write(dump_json(hits))
    sys.stdout.buffer.flush()
    if not hits and empty_recall_reason(mode, query) == EXACT_CANNOT_READ:
        # Standard output stays the reference's answer ([]); a person is told why and what works.
        click.echo("note: exact mode matches only the ASCII words of a query, as `brain recall` does, so it "
                   "cannot search Chinese or Japanese text; --mode hybrid searches this query.", err=True)
