"""Log levels, one rule for both servers: the levels a setting may name, and the third-party
loggers kept quiet whatever the level (STORE_LOG_LEVEL, CONNECTOR_LOG_LEVEL)."""

from __future__ import annotations

import logging
from collections.abc import Iterable

LOG_LEVELS = ("debug", "info", "warning", "error")
# Write a line for each request they make at INFO (OIDC discovery, JWKS, the store, a model),
# naming its URL: noise in an operator's log, wanted only when debugging.
REQUEST_LOGGERS = ("httpx", "httpcore")
# At DEBUG botocore writes each request's signed headers (the access key id, a session token):
# never let through.
SECRET_LOGGERS = ("botocore", "boto3", "s3transfer", "urllib3")


def parse_log_level(name: str, text: str) -> str:
    """``text`` (any case, spaces around ignored) as one of ``LOG_LEVELS``; a ValueError naming the
    setting ``name`` and the levels allowed otherwise."""
    level = text.strip().lower()
    if level not in LOG_LEVELS:
        raise ValueError(f"{name}: expected {', '.join(LOG_LEVELS[:-1])} or {LOG_LEVELS[-1]}, got {text!r}")
    return level


def apply_log_level(level: str, quiet: Iterable[str] = ()) -> None:
    """Set the root logger to ``level`` (one of ``LOG_LEVELS``); the request loggers stay at WARNING
    unless ``level`` is debug, the secret ones and ``quiet`` (a server's own chatty libraries) always."""
    logging.getLogger().setLevel(level.upper())
    for name in (*SECRET_LOGGERS, *quiet):
        logging.getLogger(name).setLevel(logging.WARNING)
    for name in REQUEST_LOGGERS:  # NOTSET: the root's level (lifting what an earlier call held)
        logging.getLogger(name).setLevel(logging.NOTSET if level == "debug" else logging.WARNING)
