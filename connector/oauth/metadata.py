"""RFC 8414 authorization-server metadata and RFC 9728 protected-resource metadata."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from connector.oauth.scopes import SCOPES
from connector.oauth.server import resource_of
from connector.oauth.tokens import bearer_challenge
from mcp.shared.auth import OAuthMetadata, ProtectedResourceMetadata


def authorization_server_metadata(base_url: str) -> dict[str, Any]:
    """The RFC 8414 document of the connector reached at ``base_url`` (its issuer)."""
    document = OAuthMetadata(
        issuer=base_url,  # type: ignore[arg-type]
        authorization_endpoint=f"{base_url}/authorize",  # type: ignore[arg-type]
        token_endpoint=f"{base_url}/token",  # type: ignore[arg-type]
        registration_endpoint=f"{base_url}/register",  # type: ignore[arg-type]
        revocation_endpoint=f"{base_url}/revoke",  # type: ignore[arg-type]
        scopes_supported=list(SCOPES),
        response_types_supported=["code"],
        response_modes_supported=["query"],
        grant_types_supported=["authorization_code", "refresh_token"],
        token_endpoint_auth_methods_supported=["none"],
        revocation_endpoint_auth_methods_supported=["none"],
        code_challenge_methods_supported=["S256"],
        authorization_response_iss_parameter_supported=True,
        client_id_metadata_document_supported=True,
    )
    return document.model_dump(mode="json", exclude_none=True)


def protected_resource_metadata(base_url: str, brain: str | None = None, written: str | None = None) -> dict[str, Any]:
    """The RFC 9728 document of ``<base_url>/mcp``, or of ``<base_url>/mcp/brains/<brain>`` (``written``:
    the brain's segment as the client wrote it, see `resource_of`)."""
    document = ProtectedResourceMetadata(
        resource=resource_of(base_url, brain, written),  # type: ignore[arg-type]
        authorization_servers=[base_url],  # type: ignore[list-item]
        scopes_supported=list(SCOPES),
        bearer_methods_supported=["header"],
        resource_name=f"Brain: {brain}" if brain else "Brain",
    )
    return document.model_dump(mode="json", exclude_none=True)


def resource_metadata_url(base_url: str, brain: str | None = None, written: str | None = None) -> str:
    """Where the RFC 9728 document of a resource is (section 3.1: at the root of its host, the
    well-known name, then the resource's path; ``/mcp``'s own is served at the bare name too). Under
    a path (``https://host/brain``): ``https://host/.well-known/oauth-protected-resource/brain/mcp``."""
    parts = urlsplit(base_url)
    origin = f"{parts.scheme}://{parts.netloc}"
    path = resource_of(base_url, brain, written)[len(origin):]
    return f"{origin}/.well-known/oauth-protected-resource" + ("" if path == "/mcp" else path)


def challenge(base_url: str, *, brain: str | None = None, error: str | None = None, written: str | None = None) -> str:
    """The WWW-Authenticate value of a 401 from ``/mcp`` or ``/mcp/brains/<brain>`` (``written``: the
    brain's segment as the request wrote it, so the client is sent to metadata about its own URL)."""
    return bearer_challenge(resource_metadata_url(base_url, brain, written), " ".join(SCOPES), error)
