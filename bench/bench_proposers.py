"""Proposer overheads on this machine (no model time): building the bounded prompt, one LLM request against a local
stub server (client, parsing, validation through patch intake), and one agent run with a trivial scripted agent
under bubblewrap and unsandboxed (scratch copy, sandbox, diff, intake).  Prints medians in ms.

    python3 bench/bench_proposers.py [--runs 20]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from infrarsi.controller.contract import load_contract  # noqa: E402
from infrarsi.controller.proposers.agent import AgentProposer  # noqa: E402
from infrarsi.controller.proposers.base import PatchRules, PromptContext, RejectedPatch, TrialSummary  # noqa: E402
from infrarsi.controller.proposers.llm import LlmProposer  # noqa: E402
from infrarsi.controller.proposers.prompt import build_prompt  # noqa: E402
from infrarsi.controller.proposers.spec import AgentSpec, LlmSpec  # noqa: E402
from infrarsi.verifier import sandbox  # noqa: E402
from tests.proposers.stub_openai import Reply, StubOpenAI  # noqa: E402

EXAMPLE = ROOT / "examples" / "nanogpt"
AGENT = ROOT / "tests" / "proposers" / "agents" / "edit_agent.py"


def context(trials: int, rejected: int) -> PromptContext:
    ts = tuple(TrialSummary(key=f"t{i:04d}", config={"micro_batch": 2 ** (i % 6), "dtype": "bf16" if i % 2 else "fp32"},
                            patches=("fused_qkv",) if i % 5 == 0 else (), step_time_s=0.1 + 0.001 * (i % 50),
                            speedup=1.0 + 0.01 * (i % 50), outcome="ok") for i in range(trials))
    rs = tuple(RejectedPatch(f"p{i}", "L2 microsteps", "ran fewer micro-steps than the contract", f"{i:064x}")
               for i in range(rejected))
    return PromptContext(contract_yaml=(EXAMPLE / "infrarsi.yaml").read_text(),
                         editable_files={p: (EXAMPLE / p).read_text() for p in ("train.py", "model.py")},
                         phase_breakdown={"forward": 0.4, "backward": 0.45, "optimizer": 0.1, "data": 0.05},
                         amdahl_ceiling=2.5, trials=ts, rejected_patches=rs)


def median_ms(fn, runs: int) -> float:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return 1000 * statistics.median(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    runs = ap.parse_args().runs
    contract = load_contract(EXAMPLE / "infrarsi.yaml")
    rules = PatchRules.from_contract(contract, EXAMPLE)
    small, big = context(20, 3), context(2000, 500)
    print(f"build_prompt 28k, 20 trials / 3 rejected:     {median_ms(lambda: build_prompt(small, 28_000), runs):8.2f} ms")
    print(f"build_prompt 28k, 2000 trials / 500 rejected: {median_ms(lambda: build_prompt(big, 28_000), runs):8.2f} ms")
    good = (EXAMPLE / "patches" / "zero_grad_set_to_none.diff").read_text()
    answer = json.dumps({"patches": [{"diff": good, "rationale": "r", "claimed_gain": 0.05}]})
    with StubOpenAI([Reply(answer)] * (runs + 1)) as stub:
        llm = LlmProposer(LlmSpec(kind="llm", name="b", base_url=stub.base_url, model="m"), rules=rules,
                          knobs=list(contract.knobs), environ={})
        assert llm.propose(small).ok
        print(f"llm request (stub server, 1 patch validated):  {median_ms(lambda: llm.propose(small), runs):8.2f} ms")
    modes = ["none"] + (["bwrap"] if sandbox.probe(sandbox.find_bwrap()) is None else [])
    with tempfile.TemporaryDirectory() as tmp:
        for mode in modes:
            spec = AgentSpec(kind="agent", name="b", command=[sys.executable, str(AGENT), "--mode", "good"],
                             network=False, ro_paths=[str(AGENT.parent)])
            ag = AgentProposer(spec, rules=rules, workdir=Path(tmp), isolation=mode,
                               environ={"PATH": os.environ.get("PATH", "")})
            assert ag.propose(small).ok
            print(f"agent run ({mode:5s}, trivial agent, 1 patch):   {median_ms(lambda: ag.propose(small), runs):8.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
