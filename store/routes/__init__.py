"""HTTP routes: thin handlers that authenticate, call the service and build a response."""

from __future__ import annotations

from store.routes.brains import BRAIN_ROUTES
from store.routes.health import HEALTH_ROUTES
from store.routes.sharing import SHARING_ROUTES
from store.routes.sync import SYNC_ROUTES
from store.routes.versions import VERSION_ROUTES

ROUTES = [*HEALTH_ROUTES, *BRAIN_ROUTES, *SYNC_ROUTES, *VERSION_ROUTES, *SHARING_ROUTES]
