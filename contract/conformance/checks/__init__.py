"""The checks, one module per area; importing this package registers them in order."""

from contract.conformance.checks import (  # noqa: F401
    health_auth,
    records,
    sync,
    conditional,
    uploads,
    snapshots,
    isolation,
    extensions,
)
