"""A scripted OpenAI-compatible chat-completions server on 127.0.0.1 (http.server in a thread), for the proposer
tests: the one fake, standing in for a remote model.

Each request to ``POST /v1/chat/completions`` takes the next :class:`Reply` of the script (an exhausted script
answers 500).  A reply is an assistant ``content`` (a 200 chat completion with ``usage``), or a ``status`` with an
error body and headers (``Retry-After: 0`` so the client's retries are quick), optionally after ``delay_s`` (a slow
model; the wait ends early when the server stops).  The server records every request's headers (names lower-cased) and JSON body and
the most requests it served at once.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    content: str | None = None
    status: int = 200
    delay_s: float = 0.0
    prompt_tokens: int | None = 1000
    completion_tokens: int | None = 200
    headers: dict[str, str] = field(default_factory=lambda: {"Retry-After": "0"})
    raw: bytes | None = None  # a body sent as is (overrides content)


@dataclass
class Seen:
    headers: dict[str, str]
    body: dict[str, Any]

    @property
    def prompt(self) -> str:
        return "\n".join(m.get("content", "") for m in self.body.get("messages", []))


class StubOpenAI:
    """Start with ``with StubOpenAI([...]) as s:``; ``s.base_url`` is ``http://127.0.0.1:<port>/v1``."""

    def __init__(self, script: list[Reply]):
        self.script = list(script)
        self.seen: list[Seen] = []
        self.active = 0
        self.max_active = 0
        self.stop = threading.Event()
        self._lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 (http.server API)
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with stub._lock:
                    stub.seen.append(Seen({k.lower(): v for k, v in self.headers.items()}, json.loads(raw or b"{}")))
                    reply = stub.next_reply(stub.seen[-1])
                    stub.active += 1
                    stub.max_active = max(stub.max_active, stub.active)
                try:
                    if reply.delay_s:
                        stub.stop.wait(reply.delay_s)  # a slow model; released when the server stops
                    if reply.raw is not None:
                        data = reply.raw
                    elif reply.status != 200:
                        data = json.dumps({"error": {"message": reply.content or f"status {reply.status}",
                                                     "type": "stub"}}).encode()
                    else:
                        usage = None
                        if reply.prompt_tokens is not None:
                            usage = {"prompt_tokens": reply.prompt_tokens,
                                     "completion_tokens": reply.completion_tokens or 0,
                                     "total_tokens": reply.prompt_tokens + (reply.completion_tokens or 0)}
                        data = json.dumps({
                            "id": "stub", "object": "chat.completion", "created": 0,
                            "model": stub.seen[-1].body.get("model"),
                            "choices": [{"index": 0, "finish_reason": "stop",
                                         "message": {"role": "assistant", "content": reply.content}}],
                            **({"usage": usage} if usage else {})}).encode()
                    try:
                        self.send_response(reply.status)
                        for k, v in reply.headers.items():
                            self.send_header(k, v)
                        self.send_header("Content-Type", "application/json")
                        self.send_header("Content-Length", str(len(data)))
                        self.end_headers()
                        self.wfile.write(data)
                    except OSError:
                        pass  # the client gave up (timeout)
                finally:
                    with stub._lock:
                        stub.active -= 1

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def next_reply(self, seen: Seen) -> Reply:
        """The reply to the request just seen (called under the lock): the script's next, 500 once it is
        exhausted.  Subclasses script differently (tests/campaign/stub_llm.py)."""
        return self.script.pop(0) if self.script else Reply(status=500, content="script exhausted")

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> "StubOpenAI":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)
