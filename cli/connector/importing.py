"""`brain-connector import BRAIN FILE`: memories from elsewhere into a brain directory (docs/import.md).

FILE is this app's JSON or Markdown export, a folder or zip of Markdown notes, a mem0
export, or a ChatGPT or Claude ``conversations.json`` (or their export's zip). Every memory
runs the similar check; what the brain already holds is reported and not written again.
The import is one write: on any refusal nothing is written, an ``{"error", "reasons"}``
object goes to stderr and the exit status is 1.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import Any

import click

from cli.connector.brain_ops import _BRAIN_ARGUMENT, _NOW_OPTION, _clock, _fail, _print_json
from connector.engine.format.archive import ArchiveError, load_directory, save_directory
from connector.engine.format.brain import Brain
from connector.engine.writes.errors import BrainError
from connector.engine.recall.index import RecallError
from connector.imports.errors import ImportRefused
from connector.imports.files import Upload
from connector.imports.load import FORMATS, load
from connector.imports.plan import ImportPlan, SimilarCheck, dry_run, plan_import
from connector.thinking.source import ModelSource


def _similar_check(brain: Brain) -> SimilarCheck | None:
    """brain_memorize's similar check against this brain (indexes built once, vectors for this run only)."""
    from connector.engine.recall.hybrid import HybridIndex
    from connector.engine.recall.index import BrainIndex
    from connector.engine.tending.similar import find_similar
    from connector.workcopy.vectors import VectorStore

    if "index.json" not in brain:
        return None
    index = BrainIndex.build(brain)
    if not index.memories:
        return None
    store = VectorStore()
    hybrid = HybridIndex.build(brain, index, store)
    return partial(find_similar, brain, index=index, hybrid=hybrid, embed=store.embed_query)


def _model() -> ModelSource | None:
    """The operator's model from CONNECTOR_MODEL_* (as `brain-connector serve` reads them), or None."""
    if not os.environ.get("CONNECTOR_MODEL_URL"):
        return None
    from connector.app import operator_model
    from connector.settings import ConnectorSettings, SettingsError

    try:
        # This command talks to no store: the settings object is only where CONNECTOR_MODEL_* are read and checked.
        settings = ConnectorSettings.load(store_url=os.environ.get("CONNECTOR_STORE_URL") or "http://127.0.0.1:1")
        return operator_model(settings)
    except SettingsError as exc:
        raise BrainError(str(exc)) from None


def _report(plan: ImportPlan, brain: Brain, now: Any, *, dry: bool) -> dict[str, Any]:
    summary = dry_run(plan, brain, now)
    return {
        "format": plan.format,
        "dry_run": dry,
        "new": summary.new,
        "pending_verification": summary.pending_verification,
        "duplicates": [asdict(item) for item in plan.duplicates],
        "similar": [{**item, "title": plan.inputs[item["of"]].title} for item in plan.flagged],
        "passed_over": [str(item) for item in plan.passed_over],
        # memories refused one by one (a credential, too long, a field over its limit): not written, the others are
        "refused": [str(reason) for reason in summary.errors],
    }


@click.command(name="import")
@_BRAIN_ARGUMENT
@click.argument("file", type=click.Path(exists=True, path_type=Path))
@click.option("--from", "chosen", type=click.Choice(["auto", *FORMATS]), default="auto", show_default=True,
              help="The file's format (default: detected).")
@click.option("--dry-run", is_flag=True, help="Check and report what would be imported; write nothing.")
@_NOW_OPTION
def import_(brain: Path, file: Path, chosen: str, dry_run: bool, now: str | None) -> None:  # noqa: A002
    """Import memories from FILE (a file, a zip or a folder) into BRAIN (a directory; created if missing).

    Formats: brain-store (this app's JSON export), markdown (one note, or a folder or zip
    of notes with or without YAML front matter: Obsidian, Basic Memory, this app's Markdown
    export, a brain folder), brain-export (the `brain` command line's .brain-export, without
    a passphrase), mem0 (its get_all / export JSON), chatgpt and claude (conversations.json; needs
    the operator's model, CONNECTOR_MODEL_URL and CONNECTOR_MODEL, and each conversation's
    extracted memories wait for verification). Prints a JSON report: new, pending_verification,
    duplicates (not written: the brain holds them word for word), similar (written; the
    existing memories each repeats or updates in other words, as memorize lists them),
    passed_over (files left out, and supersedes links naming a memory of BRAIN the file does not
    hold, dropped; each with why), refused (memories not written, with why: one that
    looks like it holds a credential, longer than 50,000 characters, or with a field holding more
    than brain_memorize takes, such as over 200 tags), and stored when written.
    """
    clock = _clock(now)
    try:
        if brain.exists() and not (brain / "index.json").is_file() and any(brain.iterdir()):
            raise BrainError(f"{brain} is not a brain directory (no index.json) and not empty")
        upload = Upload.of_path(file)
        target = load_directory(brain) if (brain / "index.json").is_file() else Brain()
        imported = asyncio.run(load(upload, chosen, _model(), clock))
        plan = plan_import(imported, target, clock, similar=_similar_check(target))
        report = _report(plan, target, clock, dry=dry_run)
        if not dry_run and plan.inputs:
            result = plan.operation().apply(target, clock)
            save_directory(target, brain)
            report["stored"] = result["stored"]
    except ImportRefused as exc:
        sys.stderr.write(json.dumps({"error": "nothing was imported", "reasons": [str(reason) for reason in exc.reasons]},
                                    ensure_ascii=False) + "\n")
        sys.exit(1)
    except (BrainError, ArchiveError, RecallError) as exc:
        _fail(str(exc))
    except OSError as exc:
        _fail(f"cannot access {exc.filename or brain}: {exc.strerror or exc}")
    _print_json(report)
