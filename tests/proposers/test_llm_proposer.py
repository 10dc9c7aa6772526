"""LlmProposer against a scripted OpenAI-compatible server on 127.0.0.1: every bad answer is a failed outcome with a
one-line reason (never an exception), retries, budgets, concurrency, and the key's confinement."""

from __future__ import annotations

import json
import os
import socket
import threading
from pathlib import Path

import pytest

from infrarsi.controller.proposers.base import PromptContext, build_proposers
from infrarsi.controller.proposers.ledger import record_outcome
from infrarsi.controller.proposers.llm import LlmProposer
from infrarsi.controller.proposers.prompt import build_prompt
from infrarsi.controller.proposers.spec import LlmSpec, ProposersSpec
from infrarsi.controller.store.memory import MemoryDatabase, MemoryStore
from infrarsi.verifier.sandbox import job_env

from tests.proposers.proposer_fixtures import EXAMPLE, example_patch
from tests.proposers.stub_openai import Reply, StubOpenAI

KEY_ENV = "STUB_LLM_API_KEY"
KEY = "sk-test-0123456789abcdef-secret"


def answer(*patches: tuple[str, float], priors: list[dict] | None = None) -> str:
    return json.dumps({"priors": priors or [],
                       "patches": [{"diff": d, "rationale": "one line why", "claimed_gain": g} for d, g in patches]})


def proposer(base_url: str, rules, contract, **over) -> LlmProposer:
    fields = dict(kind="llm", name="stub", base_url=base_url, model="stub-model", api_key_env=KEY_ENV,
                  timeout_s=10, max_retries=2, price_in=2.0, price_out=8.0)
    fields.update(over)
    return LlmProposer(LlmSpec(**fields), rules=rules, knobs=list(contract.knobs), prompt_chars=12_000,
                       environ={KEY_ENV: KEY, "PATH": os.environ.get("PATH", "")})


def assert_failed(out, *words: str) -> None:
    assert not out.ok and out.proposal is None, out
    assert "\n" not in out.reason and out.reason, out.reason
    for w in words:
        assert w in out.reason, out.reason


def test_good_patch_is_validated_priced_and_keyed(ctx: PromptContext, rules, contract) -> None:
    good = example_patch("zero_grad_set_to_none.diff")
    prior = {"knob": "dtype", "value": "bf16", "mean_log_speedup": 0.2, "spread": 0.3, "mem_gib": -0.5}
    with StubOpenAI([Reply(answer((good, 0.05), priors=[prior]), prompt_tokens=3000, completion_tokens=500)]) as s:
        out = proposer(s.base_url, rules, contract).propose(ctx)
    assert out.ok, out.reason
    (patch,) = out.proposal.patches
    assert patch.diff == good and patch.claimed_gain == 0.05 and patch.rationale == "one line why"
    assert [p.knob for p in out.proposal.priors] == ["dtype"]
    assert (out.tokens_in, out.tokens_out) == (3000, 500)
    assert out.usd == pytest.approx((3000 * 2.0 + 500 * 8.0) / 1e6)
    assert out.proposer == "stub" and out.kind == "llm" and out.model == "stub-model"
    (seen,) = s.seen
    assert seen.headers.get("authorization") == f"Bearer {KEY}"
    assert seen.body["model"] == "stub-model" and seen.body["max_tokens"] == 4096
    prompt = build_prompt(ctx, 12_000, answer="json")
    assert seen.body["messages"][-1]["content"] == prompt
    assert out.prompt_digest == __import__("hashlib").sha256(prompt.encode()).hexdigest()


def test_cheating_patch_passes_intake_and_is_left_to_the_verifier(ctx, rules, contract) -> None:
    """Skipping micro-steps is a valid diff on an editable file: intake cannot tell, the verifier rejects it at L2
    (tests/campaign and the e2e test run it).  The proposer hands it on unchanged."""
    cheat = example_patch("skip_microsteps.diff")
    with StubOpenAI([Reply(answer((cheat, 0.4)))]) as s:
        out = proposer(s.base_url, rules, contract).propose(ctx)
    assert out.ok and out.proposal.patches[0].diff == cheat


@pytest.mark.parametrize("reply, words", [
    (Reply("I think you should use bf16 and flash attention."), ["not JSON"]),
    (Reply("```json\n{\"patches\": [\n```"), ["not JSON"]),
    (Reply(""), ["empty answer"]),
    (Reply(None), ["empty answer"]),
    (Reply(json.dumps([1, 2])), ["JSON list", "not an object"]),
    (Reply(json.dumps({"patches": [{"diff": 5}]})), ["does not match the schema", "patches.0.diff"]),
    (Reply(json.dumps({"patches": [{"diff": "x", "rationale": "a\nb"}]})), ["rationale must be one line"]),
    (Reply(json.dumps({"priors": [], "patches": []})), ["no priors and no patches"]),
    (Reply(answer((example_patch("touch_data.diff"), 0.1))), ["refused", "frozen file 'data.py'"]),
    (Reply(answer(("diff --git a/model.py b/model.py\n--- a/model.py\n+++ b/model.py\n@@ -1,1 +1,1 @@\n-nope\n+x\n",
                   0.1))), ["does not apply"]),
    (Reply(json.dumps({"priors": [{"knob": "warp_drive", "value": "on", "mean_log_speedup": 1.0,
                                   "spread": 0.1}]})), ["unknown knob 'warp_drive'"]),
    (Reply(status=400, content="bad request: model not found"), ["HTTP 400", "model not found"]),
])
def test_bad_answers_are_failed_proposals(ctx, rules, contract, reply: Reply, words: list[str]) -> None:
    with StubOpenAI([reply]) as s:
        out = proposer(s.base_url, rules, contract).propose(ctx)
    assert_failed(out, *words)
    assert KEY not in out.reason


def test_oversized_patch_is_refused(ctx, rules, contract) -> None:
    lines = "".join(f"+# filler {i}\n" for i in range(60))
    big = f"diff --git a/model.py b/model.py\n--- a/model.py\n+++ b/model.py\n@@ -1,0 +1,60 @@\n{lines}"
    with StubOpenAI([Reply(answer((big, 0.1)))]) as s:
        out = proposer(s.base_url, rules, contract).propose(ctx)
    assert_failed(out, "over the limit of 40")


def test_partly_bad_answer_keeps_the_good_part(ctx, rules, contract) -> None:
    good, bad = example_patch("zero_grad_set_to_none.diff"), example_patch("touch_data.diff")
    with StubOpenAI([Reply(answer((good, 0.05), (bad, 0.3)))]) as s:
        out = proposer(s.base_url, rules, contract).propose(ctx)
    assert out.ok and len(out.proposal.patches) == 1 and out.proposal.patches[0].diff == good
    assert len(out.dropped) == 1 and "frozen file" in out.dropped[0][1] and "1 proposed items refused" in out.reason


def test_429_then_success_is_retried(ctx, rules, contract) -> None:
    good = example_patch("zero_grad_set_to_none.diff")
    with StubOpenAI([Reply(status=429, content="slow down"), Reply(answer((good, 0.05)))]) as s:
        out = proposer(s.base_url, rules, contract).propose(ctx)
    assert out.ok and len(s.seen) == 2


def test_5xx_are_retried_then_failed(ctx, rules, contract) -> None:
    with StubOpenAI([Reply(status=500, content="boom")] * 3) as s:
        out = proposer(s.base_url, rules, contract, max_retries=2).propose(ctx)
    assert_failed(out, "HTTP 500")
    assert len(s.seen) == 3


def test_429_forever_is_a_failed_proposal(ctx, rules, contract) -> None:
    with StubOpenAI([Reply(status=429, content="quota")] * 2) as s:
        out = proposer(s.base_url, rules, contract, max_retries=1).propose(ctx)
    assert_failed(out, "HTTP 429", "rate limited")


def test_slow_answer_times_out(ctx, rules, contract) -> None:
    with StubOpenAI([Reply(answer(), delay_s=30)]) as s:
        out = proposer(s.base_url, rules, contract, timeout_s=0.5, max_retries=0).propose(ctx)
    assert_failed(out, "timeout")
    assert out.wall_s < 20


def test_unreachable_endpoint(ctx, rules, contract) -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    out = proposer(f"http://127.0.0.1:{port}/v1", rules, contract, max_retries=0).propose(ctx)
    assert_failed(out, "cannot reach", f"127.0.0.1:{port}")


def test_missing_key_is_a_failed_proposal_and_nothing_is_sent(ctx, rules, contract) -> None:
    with StubOpenAI([Reply(answer())]) as s:
        p = proposer(s.base_url, rules, contract)
        p._environ = {}
        out = p.propose(ctx)
    assert_failed(out, f"{KEY_ENV} (api_key_env) is not set")
    assert s.seen == []


def test_budgets_are_enforced_before_each_request(ctx, rules, contract) -> None:
    good = example_patch("zero_grad_set_to_none.diff")
    with StubOpenAI([Reply(answer((good, 0.05)), prompt_tokens=5000, completion_tokens=1000)] * 3) as s:
        p = proposer(s.base_url, rules, contract, budget_tokens=16_000, max_tokens=2000)
        first = p.propose(ctx)
        assert first.ok and p.spent_tokens == 6000
        second = p.propose(ctx)  # 6000 spent + ~4000 prompt + 2000 answer still fits
        assert second.ok and p.spent_tokens == 12_000
        third = p.propose(ctx)
        assert_failed(third, "token budget", "not sent")
        assert len(s.seen) == 2
        money = proposer(s.base_url, rules, contract, budget_usd=0.001)
        assert_failed(money.propose(ctx), "money budget")
        assert len(s.seen) == 2
        seeded = proposer(s.base_url, rules, contract, budget_tokens=16_000, max_tokens=2000)
        seeded.seed_spent(12_000, 0.0)  # what the ledger says earlier requests spent
        assert_failed(seeded.propose(ctx), "token budget")
        assert len(s.seen) == 2


def test_never_more_requests_in_flight_than_configured(ctx, rules, contract) -> None:
    good = example_patch("zero_grad_set_to_none.diff")
    with StubOpenAI([Reply(answer((good, 0.05)), delay_s=0.3)] * 6) as s:
        p = proposer(s.base_url, rules, contract, max_concurrent=2)
        outs: list = []
        threads = [threading.Thread(target=lambda: outs.append(p.propose(ctx))) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
    assert len(outs) == 6 and all(o.ok for o in outs), [o.reason for o in outs if not o.ok]
    assert s.max_active <= 2


def test_key_never_reaches_ledger_prompt_or_trials(ctx, rules, contract, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    spec = ProposersSpec.model_validate({"entries": [{"kind": "llm", "name": "stub", "base_url": "http://x/v1",
                                                      "model": "m", "api_key_env": KEY_ENV}]})
    store = MemoryStore(MemoryDatabase())
    c = store.create_campaign(name="c", owner="o", contract_path="/c", contract_yaml="y", contract_digest="d",
                              repo_path="/r", workdir="/w", executor="local", partition=None, budget_gpu_hours=1.0,
                              budget_trials=1, seed=0)
    with StubOpenAI([Reply(status=401, content=f"invalid key {KEY}"), Reply(answer())]) as s:
        (p,) = build_proposers(spec.model_copy(update={"entries": [spec.entries[0].model_copy(
            update={"base_url": s.base_url, "max_retries": 0})]}), contract=contract, repo=EXAMPLE,
            workdir=tmp_path)
        out = p.propose(ctx)
    assert_failed(out, "HTTP 401")
    assert KEY not in out.reason and "***" in out.reason  # the server echoed the key; the reason masks it
    row = record_outcome(store, c.id, out, request="patches", stage="run")
    assert KEY not in repr(row) and KEY not in repr(store.proposer_requests(c.id))
    assert KEY not in s.seen[0].prompt
    trial_env = job_env(os.environ, passthrough=["NANOGPT_THREADS"])  # what a trial job gets (verifier/sandbox)
    assert KEY_ENV not in trial_env and KEY not in trial_env.values()
