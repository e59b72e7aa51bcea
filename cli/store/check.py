"""`brain-store check`: run the contract conformance suite against any store URL."""

from __future__ import annotations

import json
import sys

import click


@click.command()
@click.option("--url", required=True, help="Base URL of the store, e.g. http://127.0.0.1:8787")
# The tokens may come from the environment: on the command line every local user can read them (ps).
@click.option("--token", required=True, envvar="BRAIN_STORE_CHECK_TOKEN",
              help="Bearer token of a test user [env BRAIN_STORE_CHECK_TOKEN].")
@click.option("--token2", default=None, envvar="BRAIN_STORE_CHECK_TOKEN2",
              help="Token of a second user (isolation checks) [env BRAIN_STORE_CHECK_TOKEN2].")
@click.option("--only", "only", multiple=True, metavar="ID", help="Run only this check id (or 'prefix.'); repeatable.")
@click.option("--core", is_flag=True, help="Skip this project's extension checks (for other stores).")
@click.option("--json", "as_json", is_flag=True, help="Print results as JSON instead of a table.")
@click.option("--timeout", default=30.0, show_default=True, help="Per-request timeout in seconds.")
@click.option("--quiet", "-q", is_flag=True, help="No progress lines on stderr.")
def check(url: str, token: str, token2: str | None, only: tuple[str, ...], core: bool, as_json: bool, timeout: float,
          quiet: bool) -> None:
    """Check a store against contract 1.1; exit status 1 if any check fails.

    First the store must answer /health and accept the token(s), else the command stops
    at once saying why. Progress goes to stderr, one line per check. When the store
    answers 429, every request waits for its Retry-After. The suite creates scratch
    brains for the user(s) and deletes them again; it never touches brains it did not
    create.
    """
    from contract.conformance.context import Pacer
    from contract.conformance.registry import CHECKS
    from contract.conformance.runner import (
        Result,
        SuiteConfig,
        failed,
        format_table,
        normalize_url,
        preflight,
        run_suite,
        to_json,
    )

    known = {c.id for c in CHECKS}
    unknown = [sel for sel in only if sel not in known and not any(k.startswith(sel) for k in known if sel.endswith("."))]
    if unknown:
        raise click.BadParameter(f"unknown check id(s): {', '.join(unknown)}", param_hint="--only")
    try:
        url, completed = normalize_url(url)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--url") from None
    if completed and not quiet:
        click.echo(completed, err=True)
    config = SuiteConfig(url=url, token=token, token2=token2, only=only, extensions=not core, timeout=timeout)
    problem = preflight(config)
    if problem is not None:
        raise click.ClickException(problem)

    def progress(done: int, total: int, result: Result) -> None:
        if not quiet:
            click.echo(f"[{done}/{total}] {result.status.upper():4}  {result.id} ({result.seconds:.1f}s)", err=True)

    pacer = Pacer()
    results = run_suite(config, on_result=progress, pacer=pacer)
    if as_json:
        click.echo(json.dumps(to_json(results), indent=2))
    else:
        click.echo(format_table(results))
    if pacer.rate_limited:
        spacing = f"; uploads went {pacer.upload_gap:.1f}s apart" if pacer.upload_gap else ""
        click.echo(f"the store rate-limited {pacer.rate_limited} request(s); the suite waited as its Retry-After "
                   f"asked{spacing}", err=True)
    sys.exit(1 if failed(results) else 0)
