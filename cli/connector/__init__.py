"""`brain-connector`: the MCP connector and the brain engine's command line."""

from __future__ import annotations

from cli.lazy import lazy_main

# One module per command; add a line here when adding a command.
COMMANDS = {
    "serve": "cli.connector.serve:serve",
    "recall": "cli.connector.recall:recall",
    "similar": "cli.connector.similar:similar",
    "memorize": "cli.connector.brain_ops:memorize",
    "pin": "cli.connector.brain_ops:pin",
    "unpin": "cli.connector.brain_ops:unpin",
    "forget": "cli.connector.brain_ops:forget",
    "restore": "cli.connector.brain_ops:restore",
    "verify": "cli.connector.brain_ops:verify",
    "import": "cli.connector.importing:import_",
}

main = lazy_main(COMMANDS, "Brain MCP connector, and brain operations on a local brain.")
