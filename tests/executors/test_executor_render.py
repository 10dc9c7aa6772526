"""sbatch rendering: golden files, shell quoting, refusal of unsafe directive values."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from infrarsi.controller.errors import ExecutorError
from infrarsi.controller.executors.base import TrialSpec
from infrarsi.controller.executors.render import render_sbatch, slurm_time

GOLDEN = Path(__file__).parent / "golden"
INJECT = ("$(touch pwned)", '"; scancel -u $USER', "`id`", "a'b", "multi\nline")


def _spec(launcher: str, **kw: object) -> TrialSpec:
    base: dict[str, object] = dict(
        trial_id="c7-t0042", workdir=Path("/scratch/infrarsi/c7/t0042/src"),
        outdir=Path("/scratch/infrarsi/c7/t0042/out"),
        argv=("train.py", "--lr", "3e-4", "--name", "$(touch pwned)"),
        env=(("KNOB_COMPILE", "1"), ("KNOB_NOTE", '"; scancel -u $USER')),
        launcher=launcher, gpus_per_node=4 if launcher != "python" else 0,
        partition="gpu", account="proj-42", time_limit_s=900, mem_gb=64, cpus_per_task=8,
        key_file=Path("/scratch/infrarsi/c7/t0042/out/key"),
        frozen_manifest=Path("/scratch/infrarsi/c7/frozen.json"), memory_cap_gib=70.0,
        src_dir=Path("/scratch/infrarsi/c7/t0042/src"), scratch_dir=Path("/scratch/infrarsi/c7/t0042/scratch"),
        updates=30,
    )
    if launcher == "torchrun-multinode":
        base["nodes"] = 2
    base.update(kw)
    return TrialSpec(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize("launcher,golden", [
    ("python", "python.sbatch"),
    ("torchrun", "torchrun.sbatch"),
    ("torchrun-multinode", "torchrun_multinode.sbatch"),
])
def test_render_matches_golden(launcher: str, golden: str) -> None:
    text = render_sbatch(_spec(launcher), "/opt/infrarsi/bin/python", extra_sbatch=["--qos=short"])
    path = GOLDEN / golden
    if os.environ.get("INFRARSI_UPDATE_GOLDEN") == "1":
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8")
    assert render_sbatch(_spec(launcher), "/opt/infrarsi/bin/python", extra_sbatch=["--qos=short"]) == text


def test_submit_sbatch_options_render_golden() -> None:
    """``infrarsi submit``'s options (issue 16): --gres verbatim instead of gpu:N, and the campaign's own
    directives after the site's extra_sbatch (Slurm takes the last: the researcher's --qos wins)."""
    spec = _spec("torchrun", gres="gpu:h200:4", partition="h200", account="proj-42",
                 sbatch_extra=("--qos=high", "--constraint=h200&ib", "--exclusive", "--mail-user=ana@example.org",
                               "--mail-type=END,FAIL"))
    text = render_sbatch(spec, "/opt/infrarsi/bin/python", extra_sbatch=["--qos=short"])
    path = GOLDEN / "torchrun_submit_options.sbatch"
    if os.environ.get("INFRARSI_UPDATE_GOLDEN") == "1":
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8")
    assert "#SBATCH --gres=gpu:h200:4\n" in text and "--gres=gpu:4" not in text
    assert text.index("--qos=short") < text.index("--qos=high")


@pytest.mark.parametrize("extra", ["--qos=a b", "--qos=$(id)", "qos=x", "--mail-user=a'b", "--x=\nrm"])
def test_campaign_directives_are_refused_when_unsafe(extra: str) -> None:
    with pytest.raises(ExecutorError, match="sbatch_extra"):
        render_sbatch(_spec("python", sbatch_extra=(extra,)), "/usr/bin/python3")


def test_rendered_scripts_parse_in_bash(tmp_path: Path) -> None:
    for launcher in ("python", "torchrun", "torchrun-multinode"):
        script = tmp_path / f"{launcher}.sbatch"
        script.write_text(render_sbatch(_spec(launcher, argv=("t.py", *INJECT)), sys.executable))
        r = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr


def test_values_arrive_verbatim_when_the_script_runs(tmp_path: Path, dump_job: Path) -> None:
    """Run the rendered script with bash (no Slurm): hostile argv and env values are data."""
    work, out = tmp_path / "work", tmp_path / "out"
    work.mkdir()
    out.mkdir()
    dump = out / "dump.json"
    spec = TrialSpec(trial_id="inj", workdir=work, outdir=out,
                     argv=(str(dump_job), str(dump), *INJECT),
                     env=tuple((f"KNOB_{i}", v) for i, v in enumerate(INJECT)), time_limit_s=60)
    script = tmp_path / "job.sbatch"
    # the "wrapper" is a no-op that execs what follows "--"
    noop = [sys.executable, "-c", "import os,sys; a=sys.argv[1:]; i=a.index('--'); os.execvp(sys.executable, [sys.executable]+a[i+1:])"]
    script.write_text(render_sbatch(spec, sys.executable, wrapper=noop))
    r = subprocess.run(["bash", str(script)], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert r.returncode == 0, r.stderr
    data = json.loads(dump.read_text())
    assert data["argv"] == list(INJECT)
    assert data["env"] == {**{f"KNOB_{i}": v for i, v in enumerate(INJECT)}, "INFRARSI_TRIAL_ID": "inj"}
    assert data["cwd"] == str(work)
    assert not any(p.name == "pwned" for p in tmp_path.rglob("*"))


@pytest.mark.parametrize("kw,field", [
    ({"partition": "gpu --account=x"}, "partition"),
    ({"account": "a\nb"}, "account"),
    ({"outdir": Path("/tmp/with space")}, "outdir"),
    ({"workdir": Path("/tmp/100%")}, "workdir"),
    ({"env": (("BAD NAME", "x"),)}, "env"),
    ({"env": (("$(x)", "x"),)}, "env"),
    ({"mem_gb": -1.0}, "mem_gb"),
])
def test_unsafe_values_are_refused_naming_the_field(kw: dict[str, object], field: str) -> None:
    with pytest.raises(ExecutorError, match=field):
        render_sbatch(_spec("python", **kw), "/usr/bin/python3")


def test_extra_sbatch_must_be_one_option() -> None:
    with pytest.raises(ExecutorError, match="extra_sbatch"):
        render_sbatch(_spec("python"), "/usr/bin/python3", extra_sbatch=["--qos=x\nrm -rf /"])


def test_single_node_launcher_refuses_several_nodes() -> None:
    with pytest.raises(ExecutorError, match="nodes"):
        render_sbatch(_spec("torchrun", nodes=2), "/usr/bin/python3")


def test_slurm_time_format() -> None:
    assert slurm_time(59) == "0-00:00:59"
    assert slurm_time(3600 + 61) == "0-01:01:01"
    assert slurm_time(86400 * 2 + 5) == "2-00:00:05"


def test_spec_validation() -> None:
    with pytest.raises(ExecutorError, match="launcher"):
        TrialSpec(trial_id="x", workdir=Path("/w"), outdir=Path("/o"), argv=("a",), launcher="deepspeed")
    with pytest.raises(ExecutorError, match="argv"):
        TrialSpec(trial_id="x", workdir=Path("/w"), outdir=Path("/o"), argv=())
