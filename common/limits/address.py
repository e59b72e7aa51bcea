"""The client address of a request, taking ``X-Forwarded-For`` only from trusted proxies.

Each proxy appends the address it received the request from, so the header reads
left to right from the (claimed) client to the last proxy. Anything left of the
first hop we trust was written by the client and can be forged. The client is
therefore the right-most hop that is *not* one of our proxies, found by walking
from our direct peer leftwards while the hops are trusted. When the direct peer is
not a trusted proxy the header is ignored entirely.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["TrustedProxies", "client_address", "limit_key", "parse_ip"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

_KEYWORDS: dict[str, tuple[str, ...]] = {
    "loopback": ("127.0.0.0/8", "::1/128"),
    "linklocal": ("169.254.0.0/16", "fe80::/10"),
    "uniquelocal": ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7"),
}
# Every non-public address: what "the proxy is somewhere on our own network" means.
_KEYWORDS["private"] = _KEYWORDS["loopback"] + _KEYWORDS["linklocal"] + _KEYWORDS["uniquelocal"]

_NOTHING = frozenset({"", "false", "0", "off", "no", "none"})
_EVERYTHING = frozenset({"true", "1", "yes", "on", "all", "any", "*"})
_IPV6_LIMIT_PREFIX = 64  # one subscriber usually gets a whole /64: count it as one client
_V6_KEYS: dict[str, str] = {}  # recent IPv6 addresses -> their /64 key (parsing costs ~10 us)
_V6_KEYS_MAX = 4096
_MAX_HOPS = 64  # hops examined from the right; a longer chain stops at the last trusted one
_MAX_HOP_TEXT = 64


@dataclass(frozen=True)
class TrustedProxies:
    """The networks whose ``X-Forwarded-For`` we believe. Empty: believe nobody."""

    networks: tuple[IPNetwork, ...] = ()

    @classmethod
    def parse(cls, spec: str | Iterable[str] | None) -> TrustedProxies:
        """Parse ``"loopback,10.0.0.0/8,192.0.2.7"`` (or a sequence of such items).

        Keywords: ``loopback``, ``linklocal``, ``uniquelocal`` (10/8, 172.16/12,
        192.168/16, fc00::/7) and ``private`` (all three); otherwise IP addresses and
        CIDR networks. ``""``/``false``/``off``/``none`` trust nobody. ``true``, ``1``,
        ``*`` or a network covering every address are refused with ``ValueError``:
        trusting every hop would let any client choose the address it is limited by.
        """
        if spec is None:
            return cls()
        items = spec.split(",") if isinstance(spec, str) else [part for entry in spec for part in entry.split(",")]
        networks: list[IPNetwork] = []
        for raw in items:
            item = raw.strip().lower()
            if item in _NOTHING:
                continue
            if item in _EVERYTHING:
                raise ValueError(
                    f"trusted proxies: {raw.strip()!r} would trust every client's X-Forwarded-For; "
                    "list the proxies instead (e.g. 'loopback', 'private', '10.0.0.0/8')"
                )
            if item in _KEYWORDS:
                networks.extend(ipaddress.ip_network(net) for net in _KEYWORDS[item])
                continue
            try:
                network = ipaddress.ip_network(item, strict=False)
            except ValueError:
                raise ValueError(
                    f"trusted proxies: {raw.strip()!r} is not an IP address, a CIDR network or one of "
                    "loopback, linklocal, uniquelocal, private"
                ) from None
            if network.prefixlen == 0:
                raise ValueError(f"trusted proxies: {raw.strip()!r} would trust every address; list the proxies instead")
            networks.append(network)
        return cls(tuple(dict.fromkeys(networks)))

    def __bool__(self) -> bool:
        return bool(self.networks)

    def __contains__(self, address: object) -> bool:
        ip = parse_ip(address) if isinstance(address, str) else address
        if not isinstance(ip, (ipaddress.IPv4Address, ipaddress.IPv6Address)):
            return False
        return any(ip in network for network in self.networks if network.version == ip.version)


def parse_ip(text: str | None) -> IPAddress | None:
    """An address from a peer or forwarded hop (``1.2.3.4``, ``1.2.3.4:80``, ``[::1]:80``), or None.

    IPv4-mapped IPv6 addresses become IPv4, so ``::ffff:10.0.0.1`` matches ``10.0.0.0/8``.
    """
    if not text:
        return None
    text = text.strip().strip('"')
    if not text or len(text) > _MAX_HOP_TEXT:
        return None
    if text.startswith("["):
        end = text.find("]")
        if end < 0 or (end + 1 < len(text) and not _is_port(text[end + 1 :])):
            return None
        text = text[1:end]
    elif text.count(":") == 1:
        host, _, port = text.partition(":")
        if not port.isdigit():
            return None
        text = host
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def _is_port(text: str) -> bool:
    return text.startswith(":") and text[1:].isdigit() and len(text) <= 6


def client_address(peer_ip: str | None, x_forwarded_for: str | Iterable[str] | None, trusted: TrustedProxies) -> str:
    """The address to key limits and logs on for a request from ``peer_ip``.

    ``x_forwarded_for`` is the header's value (several header lines may be given as a
    sequence or joined with commas). It is used only when ``peer_ip`` is a trusted
    proxy; then the right-most hop that is not trusted is the client. If every hop is
    trusted the left-most one is. A hop that is not an address stops the walk at the
    nearest trusted hop (never returned as a client-chosen string).
    """
    peer = parse_ip(peer_ip)
    if peer is None:
        return peer_ip or "unknown"
    if not x_forwarded_for or not trusted or peer not in trusted:
        return str(peer)
    header = x_forwarded_for if isinstance(x_forwarded_for, str) else ",".join(x_forwarded_for)
    hops = header.rsplit(",", _MAX_HOPS)
    if len(hops) > _MAX_HOPS:
        hops = hops[1:]  # the unsplit remainder on the far left is never reached honestly
    current: IPAddress = peer
    for raw in reversed(hops):
        hop = parse_ip(raw)
        if hop is None:
            return str(current)
        if hop not in trusted:
            return str(hop)
        current = hop
    return str(current)


def limit_key(address: str) -> str:
    """The key a per-address limit counts ``address`` under.

    An IPv6 address counts with its whole /64 (``2001:db8:1:2::/64``): a single host
    or subscriber usually holds a /64 and could otherwise take a fresh address per
    request. An IPv4 address (also written IPv4-mapped) is its own key; so is anything
    that is not an address.
    """
    if ":" not in address:
        return address  # IPv4 as peers and client_address write it: the hot path, no parsing
    cached = _V6_KEYS.get(address)
    if cached is not None:
        return cached
    ip = parse_ip(address)
    if ip is None:
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        key = str(ipaddress.IPv6Network((ip, _IPV6_LIMIT_PREFIX), strict=False))
    else:
        key = str(ip)  # IPv4-mapped, or IPv4 with a port
    if len(_V6_KEYS) >= _V6_KEYS_MAX:
        _V6_KEYS.clear()
    _V6_KEYS[address] = key
    return key
