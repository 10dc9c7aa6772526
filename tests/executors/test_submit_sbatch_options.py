"""sbatch habits (issue 16, item 10): ``infrarsi submit -p/-A/--qos/-t/--gres/-N/--constraint/--exclusive/
--mail-*``, their ``INFRARSI_*`` environment defaults, validation (by Slurm itself where it has a say), admin
limits, and the options arriving in a real Slurm job.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from infrarsi.controller.campaign.sbatch_options import (
    SbatchOptions, check_limits, gres_gpus, parse_sbatch_time,
)
from infrarsi.controller.campaign.trialspec import build_spec
from infrarsi.controller.contract import load_contract
from infrarsi.controller.errors import InfrarsiError
from infrarsi.controller.executors.base import JobStatus
from infrarsi.controller.executors.render import render_sbatch
from infrarsi.controller.executors.slurm import SlurmExecutor
from infrarsi.controller.store import open_store
from infrarsi.controller.store.records import WorkloadRecord
from infrarsi.controller.store.stage_records import Scope
from tests.campaign.helpers import cli_env, infrarsi

PY = sys.executable
SCOPE = Scope(commit="0" * 40)  # build_spec reads only the frozen manifest and the inputs


@pytest.mark.parametrize("value,seconds", [
    ("30", 1800), ("5:30", 330), ("01:02:03", 3723), ("2-3", 2 * 86400 + 3 * 3600),
    ("1-00:10", 86400 + 600), ("1-02:03:04", 86400 + 7384),
])
def test_every_slurm_time_format(value: str, seconds: int) -> None:
    assert parse_sbatch_time(value) == seconds


@pytest.mark.parametrize("value,why", [
    ("1:2:3:4", "not a Slurm time"), ("0", "more than 0"), ("UNLIMITED", "needs a time limit"),
    ("400-00", "365 days"), ("ten", "not a Slurm time"),
])
def test_bad_times_are_one_line_naming_the_option(value: str, why: str) -> None:
    with pytest.raises(InfrarsiError, match=why) as info:
        parse_sbatch_time(value)
    assert str(info.value).startswith("-t/--time: ") and "\n" not in str(info.value)


def test_gres_sets_gpus_per_node() -> None:
    assert [gres_gpus(g) for g in ("gpu:4", "gpu:h200:2", "gpu", "shard:2,gpu:a100:8", "shard:2")] == [4, 2, 1, 8,
                                                                                                        None]


@pytest.mark.parametrize("kw,flag", [
    ({"partition": "gpu;rm"}, "-p/--partition"), ({"account": "a b"}, "-A/--account"), ({"qos": "$(id)"}, "--qos"),
    ({"gres": "gpu:"}, "--gres"), ({"nodes": 0}, "-N/--nodes"), ({"constraint": "a b"}, "--constraint"),
    ({"mail_user": "a'b"}, "--mail-user"), ({"mail_type": "END,SOMETIMES"}, "--mail-type"),
])
def test_bad_values_are_refused_naming_the_option(kw: dict[str, Any], flag: str) -> None:
    with pytest.raises(InfrarsiError) as info:
        SbatchOptions(**kw).validated()
    assert str(info.value).startswith(flag) and "\n" not in str(info.value)


def test_options_override_the_contracts_launch_and_reach_the_sbatch_script(tmp_path: Path, toy_repo: Path) -> None:
    contract = load_contract(toy_repo / "infrarsi.yaml")
    opts = SbatchOptions(partition="gpu", account="proj", qos="high", time="90", gres="gpu:h200:2",
                         constraint="h200&ib", exclusive=True, mail_user="ana", mail_type="end,fail").validated()
    launch = opts.launch(contract.launch)
    assert (launch.partition, launch.account, launch.time_limit_s, launch.gpus_per_node) == ("gpu", "proj", 5400, 2)
    assert contract.launch.time_limit_s == 120  # the contract itself is unchanged
    assert SbatchOptions.from_dict(opts.to_dict()) == opts
    out = tmp_path / "t" / "out"
    spec = build_spec(contract, SCOPE, contract.reference_config, "k" * 32, tmp_path, out, b"m" * 32,
                      "cpu", sbatch=opts)
    assert (spec.partition, spec.account, spec.time_limit_s, spec.gpus_per_node, spec.gres) == \
        ("gpu", "proj", 5400, 2, "gpu:h200:2")
    text = render_sbatch(spec, PY)
    for line in ("--partition=gpu", "--account=proj", "--time=0-01:31:00", "--gres=gpu:h200:2", "--qos=high",
                 "--constraint=h200&ib", "--exclusive", "--mail-user=ana", "--mail-type=END,FAIL"):
        assert f"#SBATCH {line}\n" in text


def _workload(**kw: Any) -> WorkloadRecord:
    from datetime import datetime, timezone

    base: dict[str, Any] = dict(id=1, name="toy", owner="admin", contract_yaml="", contract_digest="d",
                                partition="cpu", max_concurrent=2, created_at=datetime.now(timezone.utc))
    base.update(kw)
    return WorkloadRecord(**base)


def test_admin_limits_refuse_in_one_line(toy_repo: Path) -> None:
    contract = load_contract(toy_repo / "infrarsi.yaml")
    with pytest.raises(InfrarsiError, match="workload 'toy' may use partition cpu only"):
        check_limits(SbatchOptions(partition="gpu"), contract, _workload())
    check_limits(SbatchOptions(partition="cpu"), contract, _workload())  # the workload's own partition is fine
    with pytest.raises(InfrarsiError, match="the admins allow no trials on this partition"):
        check_limits(SbatchOptions(partition="debug"), contract, None, {"debug": 0})
    with pytest.raises(InfrarsiError, match="launcher python runs on one node"):
        check_limits(SbatchOptions(nodes=2), contract, None)
    registered = _workload(contract_yaml=(toy_repo / "infrarsi.yaml").read_text().replace(
        "  time_limit:", "  gpus_per_node: 2\n  time_limit:"))
    with pytest.raises(InfrarsiError, match="registered for 1 node\\(s\\) x 2 GPU\\(s\\)"):
        check_limits(SbatchOptions(gres="gpu:4"), contract, registered)
    check_limits(SbatchOptions(gres="gpu:2"), contract, registered)


@pytest.mark.slurm
def test_submit_cli_validates_with_slurm_and_stores_the_options(slurm_cluster: str, tmp_path: Path,
                                                                toy_repo: Path) -> None:
    env = cli_env(tmp_path / "home")
    contract = str(toy_repo / "infrarsi.yaml")
    bad = infrarsi("submit", contract, "-p", "nosuchpartition", env=env, check=False)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
    assert "Slurm would not accept these options: invalid partition specified: nosuchpartition" in bad.stderr
    bad = infrarsi("submit", contract, "-t", "1:2:3:4", env=env, check=False)
    assert bad.returncode == 2 and bad.stderr.startswith("infrarsi: error: -t/--time: '1:2:3:4' is not a Slurm time")
    bad = infrarsi("submit", contract, "--executor", "local", "--qos", "high", env=env, check=False)
    assert bad.returncode == 2 and "--qos: a Slurm option" in bad.stderr
    # the environment supplies defaults the way SBATCH_* does; the command line wins
    env_d = {**env, "INFRARSI_PARTITION": "cpu", "INFRARSI_TIMELIMIT": "10", "INFRARSI_MAIL_TYPE": "FAIL"}
    out = infrarsi("submit", contract, "-p", "gpu", "--parsable", env=env_d)
    assert out.stdout.strip().isdigit() and out.stdout.count("\n") == 1  # --parsable: the id alone
    cid = int(out.stdout)
    c = open_store(f"sqlite:///{tmp_path / 'home' / 'infrarsi.sqlite'}").get_campaign(cid)
    assert c.sbatch == {"partition": "gpu", "time": "10", "mail_type": "FAIL"} and c.partition == "gpu"
    local = infrarsi("submit", contract, "--executor", "local", env=env_d)  # Slurm-only env defaults are ignored
    assert "executor local" in local.stdout and "partition" not in local.stdout


Waiter = Callable[..., dict[str, JobStatus]]


@pytest.mark.slurm
def test_options_arrive_in_the_real_slurm_job(slurm_cluster: str, slurm_tmp: Path, standin: list[str],
                                              toy_repo: Path, wait_all: Waiter) -> None:
    contract = load_contract(toy_repo / "infrarsi.yaml")
    opts = SbatchOptions(partition="gpu", time="3", gres="gpu:1", exclusive=True, mail_user="ana",
                         mail_type="END,FAIL").validated()
    out = slurm_tmp / "t1" / "out"
    spec = build_spec(contract, SCOPE, contract.reference_config, "s" * 32, slurm_tmp, out, b"m" * 32,
                      None, sbatch=opts)
    spec = type(spec)(**{**spec.__dict__, "argv": (PY, "-c", "import time; time.sleep(1)"), "key_file": None,
                         "frozen_manifest": None})
    ex = SlurmExecutor(wrapper=standin, backoff=(0.2,), steady_interval_s=0.3, receipt_grace_s=1.0,
                       state_dir=slurm_tmp / "state")
    h = ex.submit(spec)
    shown = subprocess.run(["scontrol", "show", "job", "-o", h.job_id], capture_output=True, text=True).stdout
    deadline = time.monotonic() + 30
    while not shown and time.monotonic() < deadline:  # accounting may lag the submit by a moment
        shown = subprocess.run(["scontrol", "show", "job", "-o", h.job_id], capture_output=True, text=True).stdout
    st = wait_all(ex, [h], timeout=90)
    assert st[spec.trial_id].finished
    fields = dict(kv.split("=", 1) for kv in shown.split() if "=" in kv)
    assert fields["Partition"] == "gpu"
    assert fields["TimeLimit"] == "00:04:00"  # -t 3 minutes + the wrapper's grace minute
    assert fields["MailUser"] == "ana" and set(fields["MailType"].split(",")) == {"END", "FAIL"}
    assert fields["OverSubscribe"] == "NO"  # --exclusive
    assert "gpu:1" in fields.get("TresPerNode", "") or "gpu=1" in fields.get("TRES", ""), shown
