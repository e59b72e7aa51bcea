"""`brain-store migrate`: move a store between a data directory and an S3 bucket."""

from __future__ import annotations

import click

from cli.store.runner import settings_from_cli, sigterm_as_ctrl_c


@click.command()
@click.option("--from", "source", required=True, metavar="DIR|s3://BUCKET/PREFIX", help="Where the store is now.")
@click.option("--to", "target", required=True, metavar="DIR|s3://BUCKET/PREFIX", help="Where it should go.")
def migrate(source: str, target: str) -> None:
    """Copy users (token hashes), brains, snapshots, shares and agent keys from --from to --to.

    S3 endpoint, region and credentials come from STORE_S3_ENDPOINT_URL, STORE_S3_REGION
    and the standard AWS chain. Stop the stores (or keep them read-only) while it runs;
    running it again skips brains already copied (saying which are no longer as at the source:
    changes since are not carried over), updates users changed at the source since
    (a rotated token: the old one stops working at the target) and removes there the users an
    earlier run brought that the source no longer has (their tokens and agent keys stop working;
    their brains are kept, `brain-store user orphans`), as it takes away there the agent keys,
    memberships and OIDC deny records an earlier run brought that the source no longer has (revoked,
    removed, lifted with `user allow`). What the target removed since an earlier pass (a user,
    a member, an agent key, a deny record) is not brought again while the source still has it;
    give it again at the target to have it back. Members and keys a pass adds, changes or takes
    away on a brain already at the target are noted in its sharing audit log (`brain-store audit`).
    Run every pass with the same --from: the
    target notes what came from where, and keeps its own. Sealed archives are copied as they are;
    with STORE_ENCRYPTION_KEY set (the target's), plain ones are sealed on the way, as a store
    with a key serves sealed archives only. A brain whose metadata is damaged is not copied: it is
    named, and the command exits with status 1 once everything else is copied.
    """
    from store.migrate import MigrateError
    from store.migrate import migrate as run

    settings = settings_from_cli()
    try:
        with sigterm_as_ctrl_c():  # its scratch directory (archives in transit) goes too
            report = run(settings, source, target, progress=lambda line: click.echo(line))
    except MigrateError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(
        f"migrated {report.users} user(s)"
        + (f", {report.users_updated} user(s) updated" if report.users_updated else "")
        + (f", {report.users_removed} user(s) removed (gone from the source)" if report.users_removed else "")
        + (f", {report.denials_lifted} OIDC deny record(s) lifted" if report.denials_lifted else "")
        + f", {report.brains} brain(s), {report.blobs} archive(s), "
        f"{report.bytes} stored bytes, {report.shares} shared brain(s), {report.keys} agent key(s)"
        + (f", {len(report.keys_removed)} agent key(s) and {len(report.members_removed)} membership(s) taken away "
           "(gone from the source)" if report.keys_removed or report.members_removed else "")
        + "; "
        f"{report.skipped} brain(s) already present"
        + (f"; {report.sealed} plain archive(s) sealed with STORE_ENCRYPTION_KEY" if report.sealed else "")
    )
    if report.differing:
        # a pass copies a brain once: changes since then are not carried over (docs/store-s3.md#migration)
        click.echo(f"{len(report.differing)} brain(s) already at the target are not as at the source and were left "
                   f"as they are: {', '.join(report.differing)}; to copy one again, delete and purge it at the "
                   "target (`brain-store brain delete`, `brain-store brain purge`) and migrate again")
    if report.damaged:
        # last, after everything else was copied: a script must not take the pass for whole (and
        # delete the source); a run after the repair copies just these
        raise click.ClickException(
            f"{len(report.damaged)} brain(s) NOT migrated, their metadata is damaged: {'; '.join(report.damaged)}; "
            "everything else was migrated; repair or restore them and migrate again")
