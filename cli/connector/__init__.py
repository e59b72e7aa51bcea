"""`brain-connector`: the MCP connector and the brain engine's command line."""

from __future__ import annotations

import click

from cli.lazy import LazyGroup

# One module per command; add a line here when adding a command.
COMMANDS = {
    "serve": "cli.connector.serve:serve",
    "recall": "cli.connector.recall:recall",
    "similar": "cli.connector.similar:similar",
    "memorize": "cli.connector.brain_ops:memorize",
    "pin": "cli.connector.brain_ops:pin",
    "unpin": "cli.connector.brain_ops:unpin",
    "forget": "cli.connector.brain_ops:forget",
    "verify": "cli.connector.brain_ops:verify",
    "import": "cli.connector.importing:import_",
}


@click.group(cls=LazyGroup, lazy=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="brain-store")
def main() -> None:
    """Brain MCP connector, and brain operations on a local brain."""
