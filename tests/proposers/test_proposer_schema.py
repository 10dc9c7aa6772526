"""The proposal schema (strict pydantic), answer parsing, and the proposers section of the contract."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from pydantic import ValidationError

from infrarsi.controller.contract import load_contract
from infrarsi.controller.errors import ContractError
from infrarsi.controller.proposers.schema import KnobPrior, PatchProposal, ProposalError, match_value, parse_proposal
from infrarsi.controller.proposers.spec import AgentSpec, LlmSpec, ProposersSpec
from tests.proposers.proposer_fixtures import EXAMPLE

PRIOR = {"knob": "dtype", "value": "bf16", "mean_log_speedup": 0.2, "spread": 0.3, "mem_gib": -1}


def test_answers_in_a_fence_or_with_chatter_parse() -> None:
    body = json.dumps({"priors": [PRIOR], "patches": []})
    for text in (body, f"Here you go:\n```json\n{body}\n```\nGood luck!", f"Sure. {body} Done."):
        p = parse_proposal(text)
        assert p.priors[0].mean_log_speedup == 0.2 and p.priors[0].mem_gib == -1.0 and p.patches == []


@pytest.mark.parametrize("text, words", [
    ("", "empty answer"),
    ("   \n", "empty answer"),
    ("no json here", "not JSON"),
    ('{"priors": [', "not JSON"),
    ('"just a string"', "not an object"),
    (json.dumps({"priors": [{**PRIOR, "spread": 0}]}), "priors.0.spread"),
    (json.dumps({"priors": [{**PRIOR, "mean_log_speedup": "fast"}]}), "priors.0.mean_log_speedup"),
    (json.dumps({"priors": [{**PRIOR, "mean_log_speedup": 50.0}]}), "priors.0.mean_log_speedup"),
    (json.dumps({"priors": [PRIOR], "extra": 1}), "extra"),
    (json.dumps({"patches": [{"diff": "x", "rationale": "r" * 201}]}), "patches.0.rationale"),
    (json.dumps({"patches": [{"diff": "x", "name": "../../etc"}]}), "patches.0.name"),
])
def test_bad_answers_raise_one_line(text: str, words: str) -> None:
    with pytest.raises(ProposalError) as info:
        parse_proposal(text)
    assert words in str(info.value) and "\n" not in str(info.value)


def test_models_are_strict_and_frozen() -> None:
    with pytest.raises(ValidationError):
        KnobPrior(knob="k", value=1, mean_log_speedup=0.1, spread=0.1)  # value must be a string
    p = PatchProposal(diff="d", rationale="  why  ", claimed_gain=1)
    assert p.rationale == "why" and p.claimed_gain == 1.0
    with pytest.raises(ValidationError):
        p.diff = "other"  # type: ignore[misc]


def test_match_value_finds_contract_values() -> None:
    assert match_value([True, False], "true") is True and match_value([True, False], "False") is False
    assert match_value([1, 2, 4], "4") == 4 and match_value([1, 2, 4], "4.0") == 4
    assert match_value(["naive", "sdpa"], "SDPA") == "sdpa" and match_value(["naive"], "flash") is None
    assert match_value([0, 1], "true") == 1 and match_value([1, 0], "off") == 0
    assert match_value([1, 2, 4], "true") is None and match_value([0, 1], "maybe") is None


def test_spec_entries_and_defaults() -> None:
    spec = ProposersSpec.model_validate([{"kind": "catalog"},
                                         {"kind": "agent", "name": "claude", "command": "claude -p"}])
    assert [e.kind for e in spec.entries] == ["catalog", "agent"] and spec.prompt_chars == 28_000
    agent = spec.entry("claude")
    assert isinstance(agent, AgentSpec) and agent.argv == ["claude", "-p"] and agent.prompt_on_stdin
    aider = AgentSpec(kind="agent", name="aider", command="aider --yes --message-file {prompt_file}")
    assert not aider.prompt_on_stdin
    assert [e.kind for e in ProposersSpec().entries] == ["folder"]


@pytest.mark.parametrize("entry, words", [
    ({"kind": "llm", "name": "x", "base_url": "http://h/v1", "model": "m", "api_key_env": "sk-live-abc"},
     "give the variable's NAME, never the key"),
    ({"kind": "llm", "name": "x", "base_url": "ftp://h", "model": "m"}, "is not an http(s) URL"),
    ({"kind": "llm", "name": "x", "base_url": "http://h/v1", "model": "m", "budget_usd": 5}, "needs price_in"),
    ({"kind": "agent", "name": "a", "command": ""}, "command is empty"),
    ({"kind": "oracle"}, "does not match any of the expected tags"),
])
def test_bad_entries_are_refused(entry: dict, words: str) -> None:
    with pytest.raises(ValidationError) as info:
        ProposersSpec.model_validate([entry])
    assert words in str(info.value)


def test_duplicate_names_are_refused() -> None:
    with pytest.raises(ValidationError, match="used twice"):
        ProposersSpec.model_validate([{"kind": "folder"}, {"kind": "folder"}])


def test_contract_section_loads_with_line_numbers(tmp_path: Path) -> None:
    repo = tmp_path / "nanogpt"
    shutil.copytree(EXAMPLE, repo, ignore=shutil.ignore_patterns("__pycache__"))
    text = (EXAMPLE / "infrarsi.yaml").read_text()
    section = ("proposers:\n  prompt_chars: 20000\n  entries:\n    - kind: folder\n"
               "    - kind: llm\n      name: local\n      base_url: http://127.0.0.1:8000/v1\n      model: qwen\n")
    path = repo / "infrarsi.yaml"
    path.write_text(text + section)
    c = load_contract(path)
    assert c.proposers.prompt_chars == 20_000 and isinstance(c.proposers.entries[1], LlmSpec)
    path.write_text(text + section.replace("kind: llm", "kind: lmm"))
    with pytest.raises(ContractError) as info:
        load_contract(path)
    line = (text + section).split("\n").index("    - kind: llm") + 1
    assert f"infrarsi.yaml:{line}" in str(info.value) and "proposers.entries[1]" in str(info.value)


def test_parse_never_raises_anything_but_a_proposal_error() -> None:
    from hypothesis import given, settings, strategies as st

    json_values = st.recursive(st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=20),
                               lambda kids: st.lists(kids, max_size=4) | st.dictionaries(
                                   st.sampled_from(["priors", "patches", "diff", "knob", "value", "spread",
                                                    "mean_log_speedup", "rationale", "claimed_gain", "x"]),
                                   kids, max_size=5), max_leaves=20)

    @settings(max_examples=300, deadline=None)
    @given(st.one_of(st.text(max_size=200), json_values.map(json.dumps)))
    def check(text: str) -> None:
        try:
            parse_proposal(text)
        except ProposalError as exc:
            assert "\n" not in str(exc)

    check()
    with pytest.raises(ProposalError, match="not JSON"):
        parse_proposal("[" * 100_000 + "]" * 100_000)  # nesting deep enough to exhaust the parser
