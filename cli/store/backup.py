"""`brain-store backup` and `brain-store restore`: the whole store in one checksummed file."""

from __future__ import annotations

from pathlib import Path

import click

from cli.store.runner import settings_from_cli, sigterm_as_ctrl_c
from cli.store.target import data_option, store_label


def _progress(line: str) -> None:
    click.echo(line, err=True)


# Folders the store makes directly in its data directory (store/storage/local.py, the S3 spool,
# store/sharing/audit.py, STORE_AUDIT_LOG=on): a backup written under one of these names before the
# store made the folder would stand in its way (`--to DATA/audit` broke the audit log).
_STORE_FOLDERS = frozenset({"brains", "locks", "tmp", "spool", "sharing-audit", "audit"})


def _unsafe_target(target: Path, data_dir: Path | None, audit_dir: Path | None = None) -> str | None:
    """Why writing a backup to ``target`` would destroy something, else None. The backup is renamed
    over ``target`` at the end, so an existing file other than an older backup (or an empty one)
    is refused (as root `--to /dev/null` replaced the device), and so is a place among the
    store's own files in ``data_dir`` (``--to DATA/users.json`` replaced the users file; a name
    the store keeps for one of its folders) or in its audit log folder ``audit_dir``; a new
    file directly in the data directory is fine (the compose recipe writes /data/brain.bak:
    elsewhere is read-only). A directory that does not exist is refused before the store is read."""
    from zstandard import FRAME_HEADER  # what every backup starts with

    try:
        path = target.resolve()  # symbolic links followed; the path as the backup is written to it
        if path.exists():
            if not path.is_file():
                return f"{target} exists and is not a regular file; give the backup a file name of its own"
            with path.open("rb") as existing:
                head = existing.read(len(FRAME_HEADER))
                if head and head != FRAME_HEADER:  # an empty file (mktemp's) holds nothing to lose
                    return f"{target} exists and is not a backup; give the backup a file name of its own"
    except (OSError, RuntimeError) as exc:  # no permission; a symbolic link loop (RuntimeError before 3.13)
        return f"cannot check {target}: {getattr(exc, 'strerror', None) or exc}"
    if audit_dir is not None and path.is_relative_to(audit_dir.expanduser().resolve()):
        return f"{target} is in the store's audit log folder {audit_dir}; write the backup elsewhere"
    if data_dir is not None:
        root = data_dir.expanduser().resolve()
        if path.is_relative_to(root) and (path.parent != root or path.name.startswith(".")
                                          or path.name.endswith((".json", ".last-good"))
                                          or path.name in _STORE_FOLDERS):
            return (f"{target} is among the store's own files in {data_dir}; write the backup elsewhere, or as a "
                    "file of its own directly in the data directory (like brain.bak)")
    if not path.parent.is_dir():  # said before the whole store is read for nothing
        return f"{target.parent}: no such directory; make it first, or write the backup into an existing one"
    return None


@click.command()
@click.option("--to", "target", required=True, type=click.Path(path_type=Path, dir_okay=False),
              help="Backup file to write (zstandard-compressed tar with a checksummed manifest).")
@data_option
def backup(target: Path, data: Path | None) -> None:
    """Back up users (token hashes, deny records), brains with their archives and snapshots,
    shares and agent keys (hashes), and each brain's sharing audit log.

    Safe while the store runs: each brain is copied consistently. Sealed archives stay
    sealed: a restore needs the same STORE_ENCRYPTION_KEY. The file holds token hashes;
    it is written with mode 0600. Progress goes to stderr. A brain whose metadata is damaged
    cannot be backed up: the backup of everything else is written, the brain is named (and
    recorded in the backup, so that `restore --force` keeps the store's brain of that id), and
    the command exits with status 1.
    """
    from store.backup.format import BackupError
    from store.backup.writer import write_backup
    from store.service import now_utc, rfc3339
    from store.context import no_store_there, open_registry, open_sharing
    from store.storage.base import DamagedBrain
    from store.storage.factory import open_backend

    settings = settings_from_cli(data_dir=data)
    if (problem := no_store_there(settings)) is not None:
        raise click.ClickException(problem)
    data_dir = None if settings.backend == "s3" else settings.data_dir
    if (problem := _unsafe_target(target, data_dir, settings.audit_dir)) is not None:
        raise click.ClickException(problem)
    left_out: list[DamagedBrain] = []
    try:
        backend, registry = open_backend(settings), open_registry(settings)
        with sigterm_as_ctrl_c():
            write_backup(backend, registry, target, source=store_label(settings), now=rfc3339(now_utc()),
                         progress=_progress, sharing=open_sharing(settings, registry, backend), left_out=left_out)
    except (BackupError, OSError) as exc:
        raise click.ClickException(f"backup failed: {exc}") from None
    if left_out:
        # the backup of the rest is kept (better than none), but a script must not take it for whole
        raise click.ClickException(
            f"{target} was written without {len(left_out)} brain(s) whose metadata is damaged: "
            f"{'; '.join(b.describe() for b in left_out)}; repair or restore them and back up again")


@click.command()
@click.option("--from", "source", required=True, type=click.Path(path_type=Path, dir_okay=False),
              help="Backup file written by `brain-store backup`.")
@data_option
@click.option("--force", is_flag=True, help="Replace a non-empty store (it ends up equal to the backup).")
def restore(source: Path, data: Path | None, force: bool) -> None:
    """Verify a backup completely, then restore it (to local disk or S3, whichever is configured).

    Nothing is changed unless the whole backup checks out, and a store that has users or
    brains is refused unless --force: then it ends up equal to the backup (its users, shares
    and agent keys replaced, brains the backup does not hold removed, except those it left out
    because their metadata was damaged: they are kept as they are). Sealed archives need the
    master key of the backed-up store (STORE_ENCRYPTION_KEY or ..._PREVIOUS_KEYS).
    """
    from store.backup.format import BackupError
    from store.backup.restore import restore_backup
    from store.context import open_registry
    from store.storage.factory import open_backend

    settings = settings_from_cli(data_dir=data)
    if settings.backend != "s3" and settings.data_dir.exists() and not settings.data_dir.is_dir():
        raise click.ClickException(f"{settings.data_dir} is not a directory; give --data the store's data directory "
                                   "(restore makes it when it does not exist)")
    keys = ((settings.encryption_key,) if settings.encryption_key else ()) + tuple(settings.previous_keys)

    def open_target() -> tuple[object, object, object]:
        from store.context import open_sharing

        if settings.backend != "s3":
            settings.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        backend, registry = open_backend(settings), open_registry(settings)
        return backend, registry, open_sharing(settings, registry, backend)

    try:
        with sigterm_as_ctrl_c():  # stopped half-way, it takes back what it wrote (restore_backup)
            restore_backup(source, open_target, force=force, master_keys=keys, progress=_progress)
    except BackupError as exc:
        raise click.ClickException(f"restore refused: {exc}") from None
