"""`brain-connector similar`: which memories of a brain would a memorize of this content flag?"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from cli.connector.recall import _instant, _load, warn
from connector.engine.format.archive import ArchiveError
from connector.engine.format.brain import dump_json
from connector.engine.recall.index import RecallError
from connector.engine.tending.similar import Incoming, similar_in_brain
from connector.engine.writes.errors import BrainError
from connector.engine.writes.ops import connector_memorize
from connector.workcopy.vectorcache import cached_stores, default_cache_dir

MAX_CONTENT_BYTES = 50_000 * 4  # the MCP tool's 50,000 characters, in UTF-8 at worst


@click.command()
@click.argument("brain", type=click.Path(exists=True, path_type=Path))
@click.option("--content-file", "content_file", required=True,
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="File holding the new memory's content (UTF-8).")
@click.option("--title", default=None, help="The new memory's title (default: its first line, as memorize does).")
@click.option("--tags", default="", help="Comma-separated tags of the new memory.")
@click.option("--type", "memory_type", default="learning", show_default=True, help="The new memory's type.")
@click.option("--now", default=None, help="Clock (ISO 8601); accepted for symmetry with memorize: the check is timeless.")
@click.option("--cache-dir", "cache_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where the brain's vectors are kept between runs, keyed by content (a second call on an unchanged "
              "brain embeds nothing; deleting it is safe; a read-only one is read, an unusable one only costs "
              f"time). Default: {default_cache_dir()}.")
def similar(brain: Path, content_file: Path, title: str | None, tags: str, memory_type: str, now: str | None,
            cache_dir: Path | None) -> None:
    """Print the memories of BRAIN (a directory or a .tar.gz) that a memorize of the content
    would report as similar, as JSON: {"similar": [{"id", "relation", "score"}, ...]}, best
    first. relation is duplicate (same fact), update (same subject, changed fact) or related
    (close, not a flag). Writes nothing."""
    _instant(now, "--now")
    try:
        raw = content_file.read_bytes()
        if len(raw) > MAX_CONTENT_BYTES:
            raise click.ClickException(f"{content_file} is too large for a memory")
        try:
            content = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise click.ClickException(f"{content_file} is not UTF-8 text") from None
        # The memory exactly as memorize would build it (title from the first line, tags cleaned).
        memory = connector_memorize(content, title=title, type=memory_type,
                                    tags=[tag.strip() for tag in tags.split(",") if tag.strip()]).memories[0]
        loaded = _load(brain)
        # The brain's vectors are kept in the cache directory: only new memories are embedded.
        found = similar_in_brain(loaded, Incoming(memory.content, memory.title, memory.tags, memory.type),
                                 cached_stores(cache_dir, e5=False, on_unusable=warn)[0])
    except (ArchiveError, RecallError, BrainError) as exc:
        raise click.ClickException(str(exc)) from None
    except OSError as exc:
        raise click.ClickException(f"cannot read {brain}: {exc.strerror or exc}") from None
    sys.stdout.buffer.write(dump_json({"similar": [entry.to_json() for entry in found]}))
    sys.stdout.buffer.write(b"\n")
    sys.stdout.buffer.flush()
