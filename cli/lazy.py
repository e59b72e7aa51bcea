"""A click group whose subcommands are imported only when they are run.

Each subcommand lives in its own module, so `brain-store --help` stays fast and
one command's heavy imports (boto3, the MCP SDK) never slow another down.
"""

from __future__ import annotations

import errno
import importlib
import sys
from typing import Any

import click

from common.docstore.base import DocumentStoreError


class LazyGroup(click.Group):
    """A group built from a ``{name: "module:attribute"}`` map."""

    def __init__(self, *args: object, lazy: dict[str, str], **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._lazy = lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self._lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self._lazy:
            module_name, _, attribute = self._lazy[cmd_name].partition(":")
            command = getattr(importlib.import_module(module_name), attribute)
            if not isinstance(command, click.Command):
                raise TypeError(f"{self._lazy[cmd_name]} is not a click command")
            return command
        return super().get_command(ctx, cmd_name)

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; an unreachable or refusing S3 (no bucket, no credentials, a bucket
        gone meanwhile) or a file system refusing a path ends it with its one-line reason
        instead of a traceback."""
        try:
            return super().invoke(ctx)
        except DocumentStoreError as exc:
            raise click.ClickException(str(exc)) from None
        except OSError as exc:
            if exc.errno == errno.EPIPE:
                raise  # output piped into `head`: click ends quietly
            # a data, state or audit directory that cannot be created or written (wrong owner,
            # read-only mount, a mistyped path): the system's reason and the path say it all
            raise click.ClickException(str(exc)) from None
        except Exception as exc:
            if _is_s3_error(exc):
                raise click.ClickException(f"S3: {exc}") from None
            raise


def _is_s3_error(exc: Exception) -> bool:
    """Whether ``exc`` is botocore's (checked only once boto3 was loaded: a command that never
    used S3 does not import it here)."""
    errors = sys.modules.get("botocore.exceptions")
    return errors is not None and isinstance(exc, (errors.ClientError, errors.BotoCoreError))


def lazy_main(lazy: dict[str, str], help_text: str) -> click.Group:
    """A program's top command: the commands of ``lazy``, ``-h``/``--help`` and ``--version``."""

    @click.group(cls=LazyGroup, lazy=lazy, help=help_text, context_settings={"help_option_names": ["-h", "--help"]})
    @click.version_option(package_name="brain-store")
    def main() -> None:
        pass

    return main
