"""`brain-store`: run and operate the store."""

from __future__ import annotations

from cli.lazy import lazy_main

# One module per command; add a line here when adding a command.
COMMANDS = {
    "serve": "cli.store.serve:serve",
    "dev": "cli.store.dev:dev",
    "user": "cli.store.users:user",
    "brain": "cli.store.brains:brain",
    "share": "cli.store.sharing:share",
    "unshare": "cli.store.sharing:unshare",
    "key": "cli.store.sharing:key",
    "audit": "cli.store.sharing:audit",
    "keygen": "cli.store.keys:keygen",
    "rekey": "cli.store.keys:rekey",
    "check": "cli.store.check:check",
    "migrate": "cli.store.migrate:migrate",
    "backup": "cli.store.backup:backup",
    "restore": "cli.store.backup:restore",
    "import-reference": "cli.store.importref:import_reference",
}

main = lazy_main(COMMANDS, "Self-hosted Brain store (contract 1.1).")
