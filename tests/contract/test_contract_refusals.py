"""`contract check` refuses what the campaign would choke on later, and the rules reach the search:
windows shorter than the noise calibration needs, forbid rules, memory_cap_gib none, fixed-batch contracts,
knob priors, and boolean rendering (value passed exactly as written)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from infrarsi.controller.campaign.searchglue import search_space
from infrarsi.controller.contract import check_contract, is_legal, legal_configs, load_contract, render_launch
from infrarsi.controller.contract.launch import config_string
from infrarsi.controller.contract.loader import check_warnings
from infrarsi.controller.contract.model import NO_CAP_GIB
from infrarsi.controller.store.stage_records import Doctor, Scope
from infrarsi.surrogate.noise import MIN_STEPS_PER_RUN

BASE = """\
name: refusals
launch:
  command: "python train.py --out=x {knobs}"
workload:
  tokens_per_update: 4096
  seq_len: 64
trial:
  updates: 20
  window: [5, 20]
knobs:
  - name: batch_size
    values: [8, 16, 32, 64]
    reference: 8
    kind: ordered
    batch_factor: true
    apply: {flag: "--batch_size={value}"}
  - name: grad_accum
    values: [8, 4, 2, 1]
    reference: 8
    kind: ordered
    batch_factor: true
    apply: {flag: "--grad_accum={value}"}
  - name: compile
    values: [false, true]
    reference: false
    render: python
    apply: {flag: "--compile={value}"}
  - name: attention
    values: [math, flash]
    reference: math
    apply: {flag: "--attention={value}"}
couplings:
  - {product: [batch_size, grad_accum], equals: 64, solve: grad_accum}
"""


def write(tmp_path: Path, text: str, name: str = "infrarsi.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def problems(tmp_path: Path, text: str) -> list[str]:
    return check_contract(write(tmp_path, text))[1]


def test_base_is_sound(tmp_path: Path) -> None:
    assert problems(tmp_path, BASE) == []


@pytest.mark.parametrize("window", ["[18, 20]", "[20, 20]"])
def test_window_shorter_than_calibration_is_refused_naming_the_minimum(tmp_path: Path, window: str) -> None:
    out = problems(tmp_path, BASE.replace("[5, 20]", window))
    assert len(out) == 1 and "trial.window" in out[0]
    assert f"at least {MIN_STEPS_PER_RUN}" in out[0] and "MIN_STEPS_PER_RUN" in out[0]
    assert problems(tmp_path, BASE.replace("[5, 20]", f"[{21 - MIN_STEPS_PER_RUN}, 20]")) == []


def test_forbid_rules_are_checked_and_honoured_by_the_search(tmp_path: Path) -> None:
    text = BASE + "forbid:\n  - {compile: true, attention: math}\n  - {batch_size: 64}\n"
    c = load_contract(write(tmp_path, text))
    assert not is_legal(c, {"compile": True, "attention": "math"})
    assert is_legal(c, {"compile": True, "attention": "flash"})
    assert not is_legal(c, {"batch_size": 64})
    configs = list(legal_configs(c))
    assert configs and all(not (x["compile"] and x["attention"] == "math") and x["batch_size"] != 64
                           for x in configs)
    assert len(configs) == 3 * 4 - 3  # 3 batch sizes x 4 (compile, attention) minus compile+math per batch size
    space = search_space(c, [])
    assert not space.legal({"batch_size": 8, "compile": True, "attention": "math"})
    assert space.legal({"batch_size": 8, "compile": True, "attention": "flash"})


@pytest.mark.parametrize("rule, fragment", [
    ("{compiler: true}", "forbid[0].compiler: unknown knob 'compiler'"),
    ("{attention: sdpa}", "forbid[0].attention: 'sdpa' is not one of knob 'attention' values [math, flash]"),
    ("{compile: false}", "forbid[0]: forbids the reference configuration"),
    ("{}", "forbid: an empty forbid rule would forbid everything"),
])
def test_bad_forbid_rule_is_one_line(tmp_path: Path, rule: str, fragment: str) -> None:
    out = problems(tmp_path, BASE + f"forbid:\n  - {rule}\n")
    assert len(out) == 1 and fragment in out[0], out
    assert out[0].startswith("infrarsi.yaml:") and "\n" not in out[0]


@pytest.mark.parametrize("cap", ["none", "None", "null"])
def test_memory_cap_none_means_no_cap(tmp_path: Path, cap: str) -> None:
    c = load_contract(write(tmp_path, BASE + f"memory_cap_gib: {cap}\n"))
    assert c.memory_cap_gib is None and c.search_capacity_gib == NO_CAP_GIB
    c80 = load_contract(write(tmp_path, BASE))
    assert c80.memory_cap_gib == 80.0 and c80.search_capacity_gib == 80.0
    assert "memory_cap_gib" in problems(tmp_path, BASE + "memory_cap_gib: nothing\n")[0]
    path = write(tmp_path, BASE + f"memory_cap_gib: {cap}\n", "nocap.yaml")
    proc = subprocess.run([sys.executable, "-m", "infrarsi.controller.cli.main", "contract", "check", str(path)],
                          capture_output=True, text=True)
    assert proc.returncode == 0 and "memory cap none)" in proc.stdout


def test_no_cap_reaches_the_search_as_practically_infinite(tmp_path: Path) -> None:
    import numpy as np

    from infrarsi.controller.campaign.searchglue import rebuild_controller

    c = load_contract(write(tmp_path, BASE + "memory_cap_gib: none\n"))
    rng = np.random.default_rng(0)
    doctor = Doctor(t0=0.1, reference_window_times=[list(0.1 + 0.001 * rng.standard_normal(16)) for _ in range(3)],
                    reference_peak_mem_gib=70.0, sigma_pair=0.01, big_knob_gate=0.02, promotion_margin=0.02)
    ctrl = rebuild_controller(c, Scope(commit="0" * 40), doctor, 0, [], {})
    assert ctrl.capacity == NO_CAP_GIB
    assert ctrl.ask(1)  # proposes something: 70 GiB is no problem without a cap


FIXED_BATCH = """\
name: fixed
launch:
  command: "python train.py --batch_size=4 --block_size=128 {knobs}"
workload:
  tokens_per_update: 4096
  seq_len: 128
knobs:
  - name: compile
    values: ["False", "True"]
    reference: "False"
    apply: {flag: "--compile={value}"}
"""


def test_fixed_batch_contract_passes(tmp_path: Path) -> None:
    # no batch_factor knob: the batch lives in the command; the verifier checks the receipt's tokens per update
    assert problems(tmp_path, FIXED_BATCH) == []


def test_batch_fixed_in_the_command_next_to_batch_knobs_is_explained(tmp_path: Path) -> None:
    text = FIXED_BATCH + """\
  - name: grad_accum
    values: [8]
    reference: 8
    batch_factor: true
    apply: {flag: "--grad_accum={value}"}
"""
    out = problems(tmp_path, text)
    assert len(out) == 1
    assert "workload.tokens_per_update: 4096 differs from the reference configuration's 1024" in out[0]
    assert "grad_accum=8 x world size 1 x seq_len 128" in out[0] and "fixed in the command" in out[0]
    assert "legal combination  gives" not in out[0]


def test_render_passes_values_as_written(tmp_path: Path) -> None:
    extra = """\
  - name: fused
    values: [false, true]
    reference: false
    render: {true: "1", false: "0"}
    apply: {env: FUSED}
  - name: dtype
    values: [bf16, "float32"]
    reference: "float32"
    render: {bf16: bfloat16}
    apply: {flag: "--dtype {value}"}
"""
    text = BASE.replace("    render: python\n", "").replace("couplings:\n", extra + "couplings:\n")
    c = load_contract(write(tmp_path, text))
    plan = render_launch(c, {"compile": False, "fused": True, "dtype": "bf16"})
    assert "--compile=false" in plan.argv and dict(plan.env)["FUSED"] == "1"
    assert plan.argv[-2:] == ("--dtype", "bfloat16")
    c2 = load_contract(write(tmp_path, BASE))
    plan2 = render_launch(c2, {"compile": False})
    assert "--compile=False" in plan2.argv and "--compile=false" not in plan2.argv
    assert "compile=False" in config_string(c2, {"compile": False, "attention": "math"})
    assert config_string(c, {"compile": False, "fused": True}) == "compile=false, fused=1"


def test_check_warns_about_yaml_booleans_without_render(tmp_path: Path) -> None:
    path = write(tmp_path, BASE.replace("    render: python\n", ""))
    assert check_contract(path)[1] == []
    warnings = check_warnings(path)
    assert len(warnings) == 1 and "knobs[2].values" in warnings[0] and "render: python" in warnings[0]
    assert check_warnings(write(tmp_path, BASE, "rendered.yaml")) == []
    proc = subprocess.run([sys.executable, "-m", "infrarsi.controller.cli.main", "contract", "check", str(path)],
                          capture_output=True, text=True)
    assert proc.returncode == 0 and ": ok (" in proc.stdout and "warning: YAML booleans" in proc.stderr


def test_render_key_must_name_a_value(tmp_path: Path) -> None:
    out = problems(tmp_path, BASE.replace("render: python", "render: {yes: 'True'}"))
    assert len(out) == 1 and "knobs[2].render.yes" in out[0]


def test_priors_reach_the_search_space(tmp_path: Path) -> None:
    text = BASE.replace("    render: python\n", """    render: python
    priors:
      - {value: true, log_speedup: 0.4, spread: 0.25, memory_gib: -1.5}
""")
    c = load_contract(write(tmp_path, text))
    spec = {k.name: k for k in search_space(c, []).knobs}["compile"]
    assert spec.prior_of(True) == pytest.approx(0.4) and spec.prior_sd == pytest.approx(0.25)
    assert spec.mem_prior_of(True) == pytest.approx(-1.5)
    assert {k.name: k for k in search_space(c, []).knobs}["attention"].prior_mean is None


@pytest.mark.parametrize("prior, fragment", [
    ("{value: 128, log_speedup: 0.1}", "'128' is not one of values"),
    ("{value: 8, log_speedup: 0.1}", "is the reference value"),
])
def test_bad_prior_is_refused(tmp_path: Path, prior: str, fragment: str) -> None:
    text = BASE.replace("    kind: ordered\n    batch_factor: true\n    apply: {flag: \"--batch_size={value}\"}\n",
                        f"    kind: ordered\n    batch_factor: true\n    apply: {{flag: \"--batch_size={{value}}\"}}\n"
                        f"    priors: [{prior}]\n", 1)
    out = problems(tmp_path, text)
    assert len(out) == 1 and "knobs[0].priors[0].value" in out[0] and fragment in out[0], out


def test_flops_per_token_is_declarable(tmp_path: Path) -> None:
    from infrarsi.controller.campaign.artifacts import flops_per_token_of

    c = load_contract(write(tmp_path, BASE.replace("  seq_len: 64\n", "  seq_len: 64\n  flops_per_token: 1.5e6\n")))
    assert flops_per_token_of(c, {"flops_per_token": 9}) == (1.5e6, "contract (workload.flops_per_token)")
    c0 = load_contract(write(tmp_path, BASE))
    assert flops_per_token_of(c0, {"flops_per_token": 9}) == (9.0, "receipt header (extra.flops_per_token)")
    assert flops_per_token_of(c0, {}) == (None, None)


def test_search_never_asks_for_a_forbidden_configuration(tmp_path: Path) -> None:
    import numpy as np

    from infrarsi.controller.campaign.searchglue import rebuild_controller
    from infrarsi.controller.contract.checks import forbidden_by

    c = load_contract(write(tmp_path, BASE + "forbid:\n  - {compile: true, attention: math}\n  - {batch_size: 16}\n"))
    rng = np.random.default_rng(1)
    doctor = Doctor(t0=0.1, reference_window_times=[list(0.1 + 0.001 * rng.standard_normal(16)) for _ in range(3)],
                    sigma_pair=0.01, big_knob_gate=0.02, promotion_margin=0.02)
    asked = rebuild_controller(c, Scope(commit="0" * 40), doctor, 0, [], {}).ask(6)
    assert asked
    for cand in asked:
        full = dict(c.reference_config, **cand.as_dict())
        full["grad_accum"] = 64 // full["batch_size"]
        assert forbidden_by(c, full) is None, cand


DIGEST_STABLE = """\
name: digest-stable
launch:
  command: "python train.py {knobs}"
  gpus_per_node: 1
workload:
  tokens_per_update: 4096
  seq_len: 64
editable_files: [train.py]
memory_cap_gib: 40
knobs:
  - name: micro_batch
    values: [4, 8, 16, 64]
    reference: 4
    kind: ordered
    batch_factor: true
    apply: {flag: "--micro-batch={value}"}
  - name: grad_accum
    values: [1, 4, 8, 16]
    reference: 16
    kind: ordered
    batch_factor: true
    apply: {flag: "--grad-accum={value}"}
  - name: dtype
    values: [fp32, bf16]
    reference: fp32
    apply: {env: DTYPE}
couplings:
  - product: [micro_batch, grad_accum]
    equals: 64
    solve: grad_accum
"""
#: contract_digest of DIGEST_STABLE before forbid/render/priors/flops_per_token/trial_args/inputs/proposers existed
#: (computed with controller/contract/model.py of commit 590f797)
DIGEST_BEFORE = "f650463e235b90ab5269984b771feea3fffebfc94652524c627541384fc54deb"


def test_contracts_written_before_the_new_fields_keep_their_digest(tmp_path: Path) -> None:
    from infrarsi.controller.contract import contract_digest

    assert contract_digest(load_contract(write(tmp_path, DIGEST_STABLE))) == DIGEST_BEFORE
    with_forbid = DIGEST_STABLE + "forbid:\n  - {dtype: bf16, micro_batch: 64}\n"
    assert contract_digest(load_contract(write(tmp_path, with_forbid))) != DIGEST_BEFORE


def test_inputs_init_would_refuse_are_refused_at_check(tmp_path: Path) -> None:
    """`contract check` applies init's input rules (controller/campaign/inputs.py) with one line per input."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.bin").write_bytes(b"tokens")
    (tmp_path / "model.py").write_text("# frozen\n")
    (tmp_path / "outside").symlink_to("/etc")
    good = BASE + "frozen_files: [model.py]\ninputs:\n  - {path: data}\n"
    assert problems(tmp_path, good) == []
    bad = BASE + ("frozen_files: [model.py]\ninputs:\n"
                  "  - {path: data/missing.bin}\n"        # 0: does not exist
                  "  - {path: outside}\n"                 # 1: a link leading out of the repo
                  "  - {path: ../elsewhere}\n"            # 2: leaves the repo
                  "  - {path: data, at: model.py}\n"      # 3: hides a frozen file
                  "  - {path: data, at: ../up}\n"         # 4: at leaves the job's directory
                  "  - {path: data/train.bin, at: weights/train.bin}\n")  # 5: a file input elsewhere: fine
    out = problems(tmp_path, bad)
    by_index = {int(line.split("inputs[")[1].split("]")[0]): line for line in out if "inputs[" in line}
    assert "does not exist" in by_index[0]
    assert "outside the repository" in by_index[1] and "/etc" in by_index[1]
    assert "leaves the repository" in by_index[2]
    assert "would hide model.py" in by_index[3] and "inputs[3].at" in by_index[3]
    assert "inside the job's working directory" in by_index[4]
    assert 5 not in by_index
    assert all(line.count("\n") == 0 for line in out)
    overlap = problems(tmp_path, BASE + "inputs:\n  - {path: data}\n  - {path: data/train.bin, at: data/x.bin}\n")
    assert len(overlap) == 1 and "overlaps inputs[0]" in overlap[0], overlap


def test_check_warns_when_two_values_share_one_canonical_value(tmp_path: Path) -> None:
    """Attack on the bank's keys: a knob whose values the catalog pools (default and max-autotune are both
    graph_compile=on) would file both states' records as one; `contract check` says so and names the fix."""
    pooled = BASE.replace("""    values: [math, flash]
    reference: math""", """    values: [math, fa2, fa3]
    reference: math""")
    path = write(tmp_path, pooled)
    assert check_contract(path)[1] == []
    warnings = check_warnings(path)
    assert len(warnings) == 1 and "knobs[3].values" in warnings[0]
    assert "'fa2' and 'fa3'" in warnings[0] and "attention_kernel=flash" in warnings[0] and "canonical:" in warnings[0]
    apart = pooled.replace("    reference: math\n", "    reference: math\n    canonical: {fa3: flash3}\n")
    assert check_contract(write(tmp_path, apart, "apart.yaml"))[1] == []
    assert check_warnings(write(tmp_path, apart, "apart.yaml")) == []


def test_no_shipped_example_pools_two_values() -> None:
    examples = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*/infrarsi*.yaml"))
    assert examples
    for path in examples:
        assert not [w for w in check_warnings(path) if "experience bank" in w], path
