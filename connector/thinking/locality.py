"""CONNECTOR_MODEL_LOCAL_ONLY: an endpoint is local when every address its host resolves to is
loopback or private (RFC 1918, unique-local, link-local). Checked at start-up and before each call
(a name may resolve elsewhere later)."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from urllib.parse import urlsplit

from connector.thinking.source import ModelError


def _is_local(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])  # drop an IPv6 zone
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback or ip.is_private or ip.is_link_local


def _host_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    if not parts.hostname:
        raise ModelError(f"CONNECTOR_MODEL_URL {url!r} names no host")
    return parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)


def _refusal(host: str, addresses: list[str]) -> str:
    public = ", ".join(sorted(set(addresses))) or "no address"
    return (
        f"CONNECTOR_MODEL_LOCAL_ONLY is on, and the model endpoint's host {host!r} resolves to {public}, which is "
        "not a loopback or private address: nothing is sent to it. Point CONNECTOR_MODEL_URL at a model on this "
        "machine or network (e.g. Ollama's http://127.0.0.1:11434/v1), or turn CONNECTOR_MODEL_LOCAL_ONLY off."
    )


def _check(host: str, infos: list[tuple]) -> None:  # type: ignore[type-arg]
    addresses = [str(info[4][0]) for info in infos]
    if not addresses or not all(_is_local(address) for address in addresses):
        raise ModelError(_refusal(host, [a for a in addresses if not _is_local(a)]))


def require_local(url: str) -> None:
    """Raise `ModelError` unless every address of ``url``'s host is loopback or private (blocking DNS)."""
    host, port = _host_port(url)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise ModelError(f"The model endpoint's host {host!r} could not be resolved ({exc}).") from None
    _check(host, infos)


async def require_local_async(url: str) -> None:
    """`require_local` without blocking the event loop."""
    host, port = _host_port(url)
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise ModelError(f"The model endpoint's host {host!r} could not be resolved ({exc}).") from None
    _check(host, infos)
