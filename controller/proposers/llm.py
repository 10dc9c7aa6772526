"""The ``llm`` proposer: any OpenAI-compatible chat-completions endpoint, through the ``openai`` client library.

One request = one chat completion: a fixed system message plus the bounded prompt
(:func:`~infrarsi.controller.proposers.prompt.build_prompt`, answer form ``json``).  The answer is parsed
(:func:`~infrarsi.controller.proposers.schema.parse_proposal`) and validated (priors against the contract's knobs,
patches through ``patches.intake.check_patch``) before anyone uses it.

* **Key**: read from the environment variable named by ``api_key_env`` at call time, handed to the client and
  nothing else: never logged, never in the prompt, the ledger or a reason (any occurrence is masked), never passed
  to trials (their environment is an allow-list, ``verifier/sandbox.py``).
* **Budget**: before each request the worst case (prompt tokens estimated at one per 3 characters, plus
  ``max_tokens``) is reserved against ``budget_tokens`` / ``budget_usd``; a request that could exceed either is
  not sent (ok=False, "budget ..."), and the reservation is replaced by the usage the server reports.
* **Retries**: HTTP 429 and 5xx, timeouts and connection errors are retried by the client with exponential backoff
  (honouring ``Retry-After``), ``max_retries`` times; ``timeout_s`` bounds each attempt.
* **Failures** are outcomes, never exceptions: unreachable endpoint, timeout, HTTP errors, an empty or non-JSON
  answer, a schema mismatch, and proposals whose every item is refused.
"""

from __future__ import annotations

import math
import os
import threading
import time
from typing import Any, Mapping

from infrarsi.controller.errors import one_line
from infrarsi.controller.proposers.base import PatchRules, PromptContext, Proposer, ProposerOutcome, finish, \
    prompt_digest
from infrarsi.controller.proposers.prompt import build_prompt
from infrarsi.controller.proposers.schema import ProposalError, parse_proposal
from infrarsi.controller.proposers.spec import LlmSpec

SYSTEM_MESSAGE = ("You are a performance engineer for deep-learning training code. You answer with one JSON object "
                  "exactly as requested, and never propose a change that alters what the training job computes.")
#: characters per token assumed when reserving budget before a request (conservative: real text is ~4)
CHARS_PER_TOKEN = 3
NO_KEY = "no-key"


def estimate_tokens(text: str) -> int:
    """Tokens ``text`` may take, for budget reservations (one per :data:`CHARS_PER_TOKEN` characters)."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def _mask(text: str, secret: str | None) -> str:
    if secret and len(secret) >= 4:
        return text.replace(secret, "***")
    return text


class LlmProposer(Proposer):
    """Priors and patches from an OpenAI-compatible endpoint (see the module docstring)."""

    kind = "llm"

    def __init__(self, spec: LlmSpec, *, rules: PatchRules, knobs: list[Any] | None = None,
                 prompt_chars: int = 28_000, environ: Mapping[str, str] | None = None) -> None:
        self.spec = spec
        self.name = spec.name
        self.model = spec.model
        self.max_concurrent = spec.max_concurrent
        self.rules = rules
        self.knobs = list(knobs or [])
        self.prompt_chars = prompt_chars
        self._environ = environ
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(spec.max_concurrent)
        self.spent_tokens = 0
        self.spent_usd = 0.0
        self._reserved_tokens = 0
        self._reserved_usd = 0.0

    # ------------------------------------------------------------------ budget
    def seed_spent(self, tokens: int, usd: float) -> None:
        """Add what earlier requests spent (the ledger's sums for this proposer) to the budget's count."""
        with self._lock:
            self.spent_tokens += max(0, int(tokens))
            self.spent_usd += max(0.0, float(usd or 0.0))

    def cost(self, tokens_in: int, tokens_out: int) -> float | None:
        """USD for a request, or None when no price is configured."""
        if self.spec.price_in is None or self.spec.price_out is None:
            return None
        return (tokens_in * self.spec.price_in + tokens_out * self.spec.price_out) / 1e6

    def _reserve(self, est_in: int) -> tuple[int, float] | str:
        """Reserve the worst case of one request; the reservation, or a one-line reason it would break a budget."""
        est_tokens = est_in + self.spec.max_tokens
        est_usd = self.cost(est_in, self.spec.max_tokens) or 0.0
        with self._lock:
            if self.spec.budget_tokens is not None:
                used = self.spent_tokens + self._reserved_tokens
                if used + est_tokens > self.spec.budget_tokens:
                    return (f"token budget: {used} of {self.spec.budget_tokens} used, a request may take "
                            f"{est_tokens} more; not sent")
            if self.spec.budget_usd is not None:
                used_usd = self.spent_usd + self._reserved_usd
                if used_usd + est_usd > self.spec.budget_usd:
                    return (f"money budget: ${used_usd:.4f} of ${self.spec.budget_usd:.2f} used, a request may "
                            f"cost ${est_usd:.4f} more; not sent")
            self._reserved_tokens += est_tokens
            self._reserved_usd += est_usd
        return est_tokens, est_usd

    def _settle(self, reservation: tuple[int, float], tokens: int, usd: float | None) -> None:
        with self._lock:
            self._reserved_tokens -= reservation[0]
            self._reserved_usd -= reservation[1]
            self.spent_tokens += tokens
            self.spent_usd += usd or 0.0

    # ------------------------------------------------------------------ request
    def _key(self) -> tuple[str | None, str | None]:
        """(key, problem): the key from the environment at call time; a problem when the variable is unset."""
        if self.spec.api_key_env is None:
            return NO_KEY, None
        env = os.environ if self._environ is None else self._environ
        key = env.get(self.spec.api_key_env)
        if not key:
            return None, f"environment variable {self.spec.api_key_env} (api_key_env) is not set"
        return key, None

    def _call(self, key: str, prompt: str) -> tuple[str | None, int | None, int | None, str | None]:
        """(answer text, prompt tokens, completion tokens, finish reason); raises the client's errors."""
        import openai

        client = openai.OpenAI(base_url=self.spec.base_url, api_key=key, timeout=self.spec.timeout_s,
                               max_retries=self.spec.max_retries)
        try:
            resp = client.chat.completions.create(
                model=self.spec.model, temperature=self.spec.temperature, max_tokens=self.spec.max_tokens,
                messages=[{"role": "system", "content": SYSTEM_MESSAGE}, {"role": "user", "content": prompt}])
        finally:
            client.close()
        choices = getattr(resp, "choices", None) or []
        text = choices[0].message.content if choices and choices[0].message is not None else None
        finish_reason = choices[0].finish_reason if choices else None
        usage = getattr(resp, "usage", None)
        tin = getattr(usage, "prompt_tokens", None) if usage is not None else None
        tout = getattr(usage, "completion_tokens", None) if usage is not None else None
        return text, tin, tout, finish_reason

    def _error_reason(self, exc: BaseException) -> str:
        import openai

        if isinstance(exc, openai.APITimeoutError):
            return f"no answer from {self.spec.base_url} within {self.spec.timeout_s:g} s (timeout, " \
                   f"{self.spec.max_retries} retries)"
        if isinstance(exc, openai.APIConnectionError):
            cause = exc.__cause__ or exc
            return f"cannot reach {self.spec.base_url}: {one_line(cause, 200)}"
        if isinstance(exc, openai.RateLimitError):
            return f"HTTP 429 (rate limited) from {self.spec.base_url} after {self.spec.max_retries} retries"
        if isinstance(exc, openai.APIStatusError):
            return f"HTTP {exc.status_code} from {self.spec.base_url}: {one_line(exc.message, 200)}"
        return f"{type(exc).__name__}: {one_line(exc, 300)}"

    def propose(self, ctx: PromptContext) -> ProposerOutcome:
        """One chat completion for ``ctx``; never raises (see the module docstring)."""
        t0 = time.monotonic()
        prompt = build_prompt(ctx, self.prompt_chars, answer="json")
        digest = prompt_digest(prompt)
        key, problem = self._key()
        if problem is not None or key is None:
            return self.failed(problem or "no key", digest, wall_s=time.monotonic() - t0)
        est_in = estimate_tokens(SYSTEM_MESSAGE) + estimate_tokens(prompt)
        reservation = self._reserve(est_in)
        if isinstance(reservation, str):
            return self.failed(reservation, digest, wall_s=time.monotonic() - t0)
        tokens_in = tokens_out = 0
        usd: float | None = None
        with self._slots:
            try:
                text, tin, tout, finish_reason = self._call(key, prompt)
            except Exception as exc:  # every client/transport error is a failed proposal
                self._settle(reservation, 0, None)
                return self.failed(_mask(self._error_reason(exc), key), digest, wall_s=time.monotonic() - t0)
        tokens_in = tin if isinstance(tin, int) and tin >= 0 else est_in
        tokens_out = tout if isinstance(tout, int) and tout >= 0 else estimate_tokens(text or "")
        usd = self.cost(tokens_in, tokens_out)
        self._settle(reservation, tokens_in + tokens_out, usd)
        extra = dict(tokens_in=tokens_in, tokens_out=tokens_out, usd=usd)
        try:
            proposal = parse_proposal(text)
        except ProposalError as exc:
            cut = " (answer cut at max_tokens)" if finish_reason == "length" else ""
            return self.failed(_mask(f"{exc}{cut}", key), digest, wall_s=time.monotonic() - t0, **extra)
        out = finish(self, proposal, rules=self.rules, knobs=self.knobs, digest=digest,
                     wall_s=time.monotonic() - t0, **extra)
        return out
