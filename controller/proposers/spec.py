"""The contract's ``proposers:`` section (and the daemon's site default) as pydantic models.

Each entry is one of four kinds, a discriminated union on ``kind``::

    proposers:
      prompt_chars: 28000          # bound on every prompt (characters)
      max_concurrent: 2            # requests in flight over all proposers
      entries:
        - kind: folder             # the contract's patch folder (dir defaults to patches.dir)
        - kind: catalog            # the built-in mechanism catalog's priors
        - kind: llm                # any OpenAI-compatible chat-completions endpoint
          name: gpt
          base_url: https://api.openai.com/v1
          model: gpt-4.1
          api_key_env: OPENAI_API_KEY   # the NAME of the variable; the key itself never enters a contract
          budget_usd: 5
          price_in: 2.0            # USD per 1M input tokens
          price_out: 8.0
        - kind: agent              # an external coding agent run in a scratch copy under the trial sandbox
          name: claude
          command: claude -p       # prompt on stdin, or put {prompt_file} in the command
          env: [ANTHROPIC_API_KEY]

A bare list is accepted as ``entries`` (``proposers: [{kind: folder}, ...]``).  A contract without the section
behaves as before: one ``folder`` entry.  Names are unique (``folder`` and ``catalog`` default to their kind).
"""

from __future__ import annotations

import re
import shlex
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

DEFAULT_PROMPT_CHARS = 28_000
PROMPT_FILE_PLACEHOLDER = "{prompt_file}"
_ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def _check_name(v: str) -> str:
    if not _NAME_RE.match(v) or len(v) > 60:
        raise ValueError(f"'{v[:60]}' is not a valid proposer name (letters, digits, _ . -; at most 60)")
    return v


class FolderSpec(_Strict):
    """Today's patch folder: every ``*.diff``/``*.patch`` file in ``dir`` (default: the contract's ``patches.dir``)."""

    kind: Literal["folder"] = Field(description="folder: candidate patches from a folder of diffs.")
    name: str = Field(default="folder", description="Unique name of this entry (ledger, reports).")
    dir: str | None = Field(default=None, max_length=1024, description=(
        "Folder of *.diff/*.patch files relative to the contract (default: patches.dir)."))

    _name = field_validator("name")(classmethod(lambda cls, v: _check_name(v)))


class CatalogSpec(_Strict):
    """The built-in mechanism catalog: priors for every contract knob that names a known ``mechanism``."""

    kind: Literal["catalog"] = Field(description=(
        "catalog: priors from the built-in mechanism catalog for knobs naming a known mechanism."))
    name: str = Field(default="catalog", description="Unique name of this entry (ledger, reports).")

    _name = field_validator("name")(classmethod(lambda cls, v: _check_name(v)))


class LlmSpec(_Strict):
    """An OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, llama.cpp server, Ollama, ...).

    ``api_key_env`` names the environment variable read at call time (None: no key, e.g. a local server).
    ``budget_tokens`` (input + output) and ``budget_usd`` (needs ``price_in``/``price_out``, USD per 1M tokens)
    are checked before each request; a request that could exceed them is not sent.
    """

    kind: Literal["llm"] = Field(description="llm: an OpenAI-compatible chat-completions endpoint.")
    name: str = Field(description="Unique name of this entry (ledger, reports).")
    base_url: str = Field(min_length=1, max_length=1024, description="The endpoint's base URL (http or https).")
    model: str = Field(min_length=1, max_length=200, description="Model name sent with each request.")
    api_key_env: str | None = Field(default=None, max_length=100, description=(
        "NAME of the environment variable holding the API key, read at call time (none: no key)."))
    temperature: float = Field(default=0.2, ge=0, le=2, description="Sampling temperature.")
    max_tokens: int = Field(default=4096, ge=1, le=1_000_000, description="Largest completion per request (tokens).")
    budget_tokens: int | None = Field(default=None, ge=1, le=10**12, description=(
        "Input + output tokens this proposer may spend in the campaign (none: no token budget)."))
    budget_usd: float | None = Field(default=None, gt=0, le=1e7, description=(
        "USD this proposer may spend (needs price_in and price_out)."))
    price_in: float | None = Field(default=None, ge=0, le=1e6, description="USD per 1M input tokens.")
    price_out: float | None = Field(default=None, ge=0, le=1e6, description="USD per 1M output tokens.")
    timeout_s: float = Field(default=120.0, gt=0, le=3600, description="Seconds one request may take.")
    max_retries: int = Field(default=3, ge=0, le=10, description="Retries of a failed request.")
    max_concurrent: int = Field(default=1, ge=1, le=64, description="Requests of this entry in flight at once.")

    _name = field_validator("name")(classmethod(lambda cls, v: _check_name(v)))

    @field_validator("base_url")
    @classmethod
    def _url(cls, v: str) -> str:
        if not re.match(r"^https?://[^\s/]+", v):
            raise ValueError(f"{v[:80]!r} is not an http(s) URL")
        return v

    @field_validator("api_key_env")
    @classmethod
    def _env(cls, v: str | None) -> str | None:
        if v is not None and not _ENV_RE.match(v):
            raise ValueError(f"{v[:60]!r} is not an environment variable name (give the variable's NAME, "
                             "never the key)")
        return v

    @model_validator(mode="after")
    def _prices(self) -> "LlmSpec":
        if self.budget_usd is not None and (self.price_in is None or self.price_out is None):
            raise ValueError("budget_usd needs price_in and price_out (USD per 1M tokens)")
        return self


class AgentSpec(_Strict):
    """An external coding-agent command (``claude -p``, ``codex exec``, ``aider --message-file {prompt_file}``).

    It runs in a scratch copy of the editable files under the trial sandbox (bubblewrap), with the prompt on stdin,
    or in a file whose path replaces ``{prompt_file}`` in the command.  ``env`` names variables passed through
    (e.g. the agent's API key); ``network`` lets it reach its API (default True); ``ro_paths`` are further
    read-only folders it needs (its install, its config).  Its proposal is the diff it leaves.
    """

    kind: Literal["agent"] = Field(description="agent: an external coding-agent command run in a sandboxed copy.")
    name: str = Field(description="Unique name of this entry (ledger, reports).")
    command: list[str] | str = Field(description=(
        "The agent's command (string split with shell rules, or a list); {prompt_file} is replaced by the prompt "
        "file's path, else the prompt goes to stdin."))
    timeout_s: float = Field(default=600.0, gt=0, le=86400, description="Seconds one agent run may take.")
    max_concurrent: int = Field(default=1, ge=1, le=64, description="Agent runs of this entry at once.")
    env: list[str] = Field(default_factory=list, max_length=100, description=(
        "Names of environment variables passed through to the agent (e.g. its API key)."))
    network: bool = Field(default=True, description="Let the agent reach the network (its API).")
    ro_paths: list[str] = Field(default_factory=list, max_length=100, description=(
        "Further read-only folders the agent needs (its install, its config)."))

    _name = field_validator("name")(classmethod(lambda cls, v: _check_name(v)))

    @field_validator("command")
    @classmethod
    def _command(cls, v: list[str] | str) -> list[str] | str:
        argv = shlex.split(v) if isinstance(v, str) else v
        if not argv or not argv[0].strip():
            raise ValueError("command is empty")
        if any("\x00" in a for a in argv):
            raise ValueError("command contains a NUL character")
        return v

    @field_validator("env")
    @classmethod
    def _env(cls, v: list[str]) -> list[str]:
        for name in v:
            if not _ENV_RE.match(name):
                raise ValueError(f"{name[:60]!r} is not an environment variable name")
        return v

    @property
    def argv(self) -> list[str]:
        """The command as an argument list (a string is split with shell rules; never run through a shell)."""
        return shlex.split(self.command) if isinstance(self.command, str) else list(self.command)

    @property
    def prompt_on_stdin(self) -> bool:
        """True when no argument holds ``{prompt_file}`` (the prompt is written to the agent's stdin)."""
        return not any(PROMPT_FILE_PLACEHOLDER in a for a in self.argv)


ProposerEntry = Annotated[Union[FolderSpec, CatalogSpec, LlmSpec, AgentSpec], Field(discriminator="kind")]


class ProposersSpec(_Strict):
    """The ``proposers:`` section: the entries, the prompt bound, and how many requests may be in flight."""

    entries: list[ProposerEntry] = Field(default_factory=lambda: [FolderSpec(kind="folder")], max_length=32,
                                         description="The proposers, each with a kind: folder, catalog, llm, agent.")
    prompt_chars: int = Field(default=DEFAULT_PROMPT_CHARS, ge=2000, le=2_000_000, description=(
        "Bound on every prompt, in characters."))
    max_concurrent: int = Field(default=2, ge=1, le=256, description="Requests in flight over all proposers.")

    @model_validator(mode="before")
    @classmethod
    def _bare_list(cls, data: Any) -> Any:
        if isinstance(data, list):
            return {"entries": data}
        return data

    @model_validator(mode="after")
    def _unique(self) -> "ProposersSpec":
        seen: set[str] = set()
        for e in self.entries:
            if e.name in seen:
                raise ValueError(f"proposer name '{e.name}' is used twice (give each entry its own name)")
            seen.add(e.name)
        return self

    def entry(self, name: str) -> FolderSpec | CatalogSpec | LlmSpec | AgentSpec:
        """The entry called ``name``; KeyError naming it when absent."""
        for e in self.entries:
            if e.name == name:
                return e
        raise KeyError(f"unknown proposer '{name}'")
