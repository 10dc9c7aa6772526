"""The campaign tests' scripted model: :class:`tests.proposers.stub_openai.StubOpenAI` (the one OpenAI-compatible
server on 127.0.0.1, the one fake: a remote model) with answers scripted the way campaign tests need them.

``StubLLM(answers)``: each request takes the next answer and the last one repeats: a string (the assistant's
content), ``(status, body)`` for an HTTP error, or a callable of the request's prompt returning either.
``prompts`` lists what the model was asked; ``max_active`` is the most requests it served at once.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Union

from tests.proposers.stub_openai import Reply, Seen, StubOpenAI

Answer = Union[str, tuple[int, str], Callable[[str], Any]]


class StubLLM(StubOpenAI):
    def __init__(self, answers: list[Answer], delay_s: float = 0.0, tokens: tuple[int, int] = (1000, 200)):
        super().__init__([])
        self.answers = list(answers)
        self.delay_s = delay_s
        self.tokens = tokens
        self.prompts: list[str] = []

    def next_reply(self, seen: Seen) -> Reply:
        prompt = "\n".join(m.get("content", "") for m in seen.body.get("messages", []) if m.get("role") == "user")
        ans = self.answers[min(len(self.prompts), len(self.answers) - 1)]
        self.prompts.append(prompt)
        if callable(ans):
            ans = ans(prompt)
        if isinstance(ans, tuple):
            status, text = ans
            return Reply(content=text, status=status, delay_s=self.delay_s)
        return Reply(content=ans, delay_s=self.delay_s, prompt_tokens=self.tokens[0], completion_tokens=self.tokens[1])

    @property
    def requests(self) -> int:
        return len(self.prompts)


def proposal(priors: list[dict] | None = None, patches: list[dict] | None = None) -> str:
    """A model answer holding ``priors`` and ``patches`` (in a fenced block, as models write them)."""
    return "Here you go:\n```json\n" + json.dumps({"priors": priors or [], "patches": patches or []}) + "\n```\n"


def edit_diff(path: str, old: str, new: str, rel: str) -> str:
    """A unified git diff of ``rel`` turning the file's text ``old`` into ``new``."""
    import difflib

    lines = difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                 fromfile=f"a/{rel}", tofile=f"b/{rel}")
    return f"diff --git a/{rel} b/{rel}\n" + "".join(lines)
