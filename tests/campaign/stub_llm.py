"""A scripted OpenAI-compatible chat-completions server on 127.0.0.1 for tests (the one fake: a remote model).

``StubLLM(answers)`` serves ``POST /v1/chat/completions``; each request takes the next scripted answer (the last
one repeats): a string (the assistant's content), ``(status, body)`` for an HTTP error, or a callable of the
request's prompt returning either.  It counts requests and the largest number it served at once.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Union

Answer = Union[str, tuple[int, str], Callable[[str], Any]]


class StubLLM:
    def __init__(self, answers: list[Answer], delay_s: float = 0.0, tokens: tuple[int, int] = (1000, 200)):
        self.answers = list(answers)
        self.delay_s = delay_s
        self.tokens = tokens
        self.prompts: list[str] = []
        self.active = 0
        self.max_active = 0
        self._lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server API
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                prompt = "\n".join(m.get("content", "") for m in body.get("messages", []) if m.get("role") == "user")
                with stub._lock:
                    stub.active += 1
                    stub.max_active = max(stub.max_active, stub.active)
                    i = len(stub.prompts)
                    stub.prompts.append(prompt)
                    ans = stub.answers[min(i, len(stub.answers) - 1)]
                try:
                    if stub.delay_s:
                        time.sleep(stub.delay_s)  # a slow model, not an ordering device
                    if callable(ans):
                        ans = ans(prompt)
                    if isinstance(ans, tuple):
                        status, text = ans
                        data = json.dumps({"error": {"message": text, "type": "stub"}}).encode()
                    else:
                        status = 200
                        data = json.dumps({
                            "id": f"stub-{i}", "object": "chat.completion", "created": 0, "model": body.get("model"),
                            "choices": [{"index": 0, "finish_reason": "stop",
                                         "message": {"role": "assistant", "content": ans}}],
                            "usage": {"prompt_tokens": stub.tokens[0], "completion_tokens": stub.tokens[1],
                                      "total_tokens": sum(stub.tokens)}}).encode()
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                finally:
                    with stub._lock:
                        stub.active -= 1

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    @property
    def requests(self) -> int:
        return len(self.prompts)

    def __enter__(self) -> "StubLLM":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()


def proposal(priors: list[dict] | None = None, patches: list[dict] | None = None) -> str:
    """A model answer holding ``priors`` and ``patches`` (in a fenced block, as models write them)."""
    return "Here you go:\n```json\n" + json.dumps({"priors": priors or [], "patches": patches or []}) + "\n```\n"


def edit_diff(path: str, old: str, new: str, rel: str) -> str:
    """A unified git diff of ``rel`` turning the file's text ``old`` into ``new``."""
    import difflib

    lines = difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                 fromfile=f"a/{rel}", tofile=f"b/{rel}")
    return f"diff --git a/{rel} b/{rel}\n" + "".join(lines)
