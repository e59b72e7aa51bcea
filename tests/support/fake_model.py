"""A stand-in for a language model: a real HTTP server speaking OpenAI's chat-completions protocol
with scripted answers, for tests that reach it through the ``openai`` library.

Run: ``python -m tests.support.fake_model PORT SCRIPT LOG``. Each POST to
``/v1/chat/completions`` appends the request (headers, names in lower case, and body) to LOG as one JSON line and
answers with the next entry of SCRIPT, a JSON list re-read on every request (tests rewrite it)::

    [{"content": "text the model says", "delay": 0, "status": 200}]

``delay`` (seconds) makes the answer slow; ``status`` other than 200 answers an error. Hostile
answers: ``repeat`` (a count) sends ``content`` that many times over (a flood); ``raw`` (a string) is
sent as the whole 200 body instead of a chat completion (garbage, a deeply nested body); ``trickle``
(seconds) sends the body one byte at a time with that pause before each. ``wait_for`` (a path) holds
the answer until that file exists (at most 60 s), so a test acts while a call is surely waiting on the
model, with no race against a delay. Entries are used in turn;
the last one repeats. ``GET /health`` answers 200.
"""

from __future__ import annotations

import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class _Handler(BaseHTTPRequestHandler):
    script: Path
    log: Path
    served = 0

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        return  # quiet: the request log is the JSON lines file

    def _send(self, status: int, body: dict[str, object] | bytes, trickle: float = 0) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        try:
            if not trickle:
                self.wfile.write(data)
                return
            for offset in range(len(data)):
                time.sleep(trickle)
                self.wfile.write(data[offset:offset + 1])
                self.wfile.flush()
        except OSError:
            return  # the client gave up: what a trickling model meets

    def do_GET(self) -> None:
        self._send(200 if self.path == "/health" else 404, {"ok": self.path == "/health"})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        with self.log.open("a") as log:
            log.write(json.dumps({"path": self.path, "headers": {key.lower(): value for key, value in self.headers.items()}, "body": body}) + "\n")
        entries = json.loads(self.script.read_text())
        entry = entries[min(type(self).served, len(entries) - 1)]
        type(self).served += 1
        time.sleep(float(entry.get("delay", 0)))
        gate, waited = entry.get("wait_for"), 0
        while gate and not Path(str(gate)).exists() and waited < 3000:  # bounded: 60 s
            time.sleep(0.02)
            waited += 1
        status = int(entry.get("status", 200))
        if status != 200:
            self._send(status, {"error": {"message": "scripted failure", "type": "server_error"}})
            return
        trickle = float(entry.get("trickle", 0))
        if "raw" in entry:
            self._send(200, str(entry["raw"]).encode("utf-8", "surrogatepass"), trickle)
            return
        content = str(entry["content"]) * int(entry.get("repeat", 1))
        self._send(200, {
            "id": f"chatcmpl-{type(self).served}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "fake"),
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }, trickle)


def main() -> None:
    """Serve on 127.0.0.1:PORT until killed."""
    port, script, log = int(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    _Handler.script, _Handler.log = script, log
    ThreadingHTTPServer(("127.0.0.1", port), _Handler).serve_forever()


if __name__ == "__main__":
    main()
