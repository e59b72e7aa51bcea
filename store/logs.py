"""How the store writes its log lines (the request lines are written apart: store/app.py)."""

from __future__ import annotations

import logging

from common.logs import apply_log_level
from store.settings import StoreSettings


def configure_logging(settings: StoreSettings) -> None:
    """Log lines (``LEVEL logger: message``) on stderr at ``STORE_LOG_LEVEL``; httpx's line per
    request (OIDC discovery, JWKS) only at debug. The request lines follow ``STORE_QUIET`` instead."""
    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s")
    apply_log_level(settings.log_level)
