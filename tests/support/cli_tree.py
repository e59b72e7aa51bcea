"""Every command of `brain-store` and `brain-connector`, loaded the way the console scripts load them
(the lazy COMMANDS tables), for tests of help texts and of the commands the docs give."""

from __future__ import annotations

import importlib

import click


def every_command() -> dict[str, click.Command]:
    """Each leaf command by its full name (``"brain-store user add"``)."""
    from cli.connector import COMMANDS as CONNECTOR_COMMANDS
    from cli.store import COMMANDS as STORE_COMMANDS

    def leaves(name: str, command: click.Command) -> dict[str, click.Command]:
        if isinstance(command, click.Group):
            return {leaf: found for sub, child in command.commands.items()
                    for leaf, found in leaves(f"{name} {sub}", child).items()}
        return {name: command}

    found: dict[str, click.Command] = {}
    for program, commands in (("brain-store", STORE_COMMANDS), ("brain-connector", CONNECTOR_COMMANDS)):
        for name, target in commands.items():
            module, attr = target.split(":")
            found.update(leaves(f"{program} {name}", getattr(importlib.import_module(module), attr)))
    return found
