"""Serving from several worker processes, shared by `brain-store serve` and `brain-connector serve`."""

# How long both servers keep an idle keep-alive connection. Whoever closes an idle connection
# first must be the client side: a request sent on a connection the server is just closing
# fails (ReadError in httpx, 502 from a proxy). uvicorn's default of 5 s equals httpx's own
# expiry (the MCP SDK's client, the connector's store client), so calls ~5 s apart raced.
# Clients that keep connections longer (Caddy: 2 minutes) must be told to drop them sooner:
# deploy/Caddyfile* set 10 s, and tests/ops/test_deploy.py holds them to it.
KEEP_ALIVE_SECONDS = 20


def http_origin(host: str, port: int) -> str:
    """``http://HOST:PORT`` to print for people to use: an IPv6 address goes in brackets
    (``http://[::1]:8788``), or the URL is not one."""
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
