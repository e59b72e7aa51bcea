"""A tiny HTTP server on loopback for tests that need something outside to answer GETs."""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# What a GET gets: status, Content-Type, body.
Answer = tuple[int, str, bytes]


class LoopbackServer:
    """Answers every GET with ``answer(path)``, from a daemon thread on a free 127.0.0.1 port."""

    def __init__(self, answer: Callable[[str], Answer], *, poll_interval: float = 0.05) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                status, content_type, body = answer(self.path)
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                return

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": poll_interval}, daemon=True).start()

    def close(self) -> None:
        """Stop serving and free the port."""
        self.httpd.shutdown()
        self.httpd.server_close()
