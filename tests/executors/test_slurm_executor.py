"""SlurmExecutor on the real single-node Slurm (marker ``slurm``), plus the
requeue / reused-id logic against a scripted runner (no Slurm needed)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import pytest

from infrarsi.controller.executors.base import JobHandle, JobStatus, TrialSpec
from infrarsi.controller.executors.slurm import SlurmExecutor

PY = sys.executable
Waiter = Callable[..., dict[str, JobStatus]]
INJECT = ("$(touch pwned)", '"; scancel -u $USER')


def _ex(tmp: Path, standin: list[str], **kw: Any) -> SlurmExecutor:
    opts: dict[str, Any] = dict(wrapper=standin, backoff=(0.2,), steady_interval_s=0.3, receipt_grace_s=1.0,
                                state_dir=tmp / "state")
    opts.update(kw)
    return SlurmExecutor(**opts)


def _spec(tmp: Path, tid: str, argv: Sequence[str], **kw: Any) -> TrialSpec:
    return TrialSpec(trial_id=tid, workdir=tmp, outdir=tmp / tid, argv=tuple(argv), time_limit_s=120, **kw)


@pytest.mark.slurm
def test_submit_poll_cancel(slurm_cluster: str, slurm_tmp: Path, standin: list[str], wait_all: Waiter) -> None:
    ex = _ex(slurm_tmp, standin)
    key = slurm_tmp / "k.key"
    key.write_bytes(b"k" * 32)
    ok = ex.submit(_spec(slurm_tmp, "ok", [PY, "-c", "print('hello from slurm')"], key_file=key))
    slow = ex.submit(_spec(slurm_tmp, "slow", [PY, "-c", "import time; time.sleep(120)"]))
    assert ok.backend == "slurm" and ok.job_id.isdigit() and abs(ok.submit_time - time.time()) < 30
    deadline = time.monotonic() + 60
    while ex.poll([slow])["slow"].state != "running":
        assert time.monotonic() < deadline, "slow trial never started"
        time.sleep(0.3)
    ex.cancel(slow)
    st = wait_all(ex, [ok, slow], timeout=60)
    assert (st["ok"].outcome, st["ok"].exit_code) == ("ok", 0), st["ok"].reason
    assert "hello from slurm" in (slurm_tmp / "ok" / "job.log").read_text()
    assert not key.exists(), "the wrapper deleted the key file"
    assert st["slow"].outcome == "cancelled", st["slow"].reason
    assert st["ok"].start_time and st["ok"].end_time and st["ok"].end_time >= st["ok"].start_time
    out = subprocess.run(["squeue", "-h", "-j", slow.job_id, "-o", "%T"], capture_output=True, text=True)
    assert "RUNNING" not in out.stdout


@pytest.mark.slurm
def test_mem_overrun_is_oom(slurm_cluster: str, slurm_tmp: Path, standin: list[str], wait_all: Waiter) -> None:
    ex = _ex(slurm_tmp, standin)
    h = ex.submit(_spec(slurm_tmp, "hog", [PY, "-c", "a = bytearray(700 * 2**20); import time; time.sleep(20)"],
                        mem_gb=0.15))
    st = wait_all(ex, [h], timeout=60)["hog"]
    assert st.outcome == "oom", st.reason
    assert "memory" in st.reason


@pytest.mark.slurm
def test_batch_polled_with_one_squeue_per_cycle(slurm_cluster: str, slurm_tmp: Path, standin: list[str],
                                                counting_runner: Any, wait_all: Waiter) -> None:
    ex = _ex(slurm_tmp, standin, runner=counting_runner, backoff=(1.0,), steady_interval_s=0.5)
    hs = [ex.submit(_spec(slurm_tmp, f"b{i}", [PY, "-c", f"import time; time.sleep(0.5); print({i})"]))
          for i in range(3)]
    # within the backoff window after a submit, repeated polls do not hit Slurm
    ex.poll(hs)
    before = counting_runner.count("squeue")
    ex.poll(hs)
    ex.poll(hs)
    assert counting_runner.count("squeue") == before
    polls = 0

    def count(_: dict[str, JobStatus]) -> None:
        nonlocal polls
        polls += 1

    st = wait_all(ex, hs, timeout=90, on_poll=count, interval=0.2)
    assert all(s.outcome == "ok" for s in st.values()), {k: v.reason for k, v in st.items()}
    squeues = [a for a in counting_runner.argvs if a[0] == "squeue"]
    assert 1 <= len(squeues) <= polls + 3
    first_ids = next(a for a in squeues if a[1].startswith("--jobs="))[1].split("=", 1)[1].split(",")
    assert sorted(first_ids) == sorted(h.job_id for h in hs), "one query carries every live job"
    assert counting_runner.count("sacct") <= 3  # only for jobs that left the queue, batched
    assert counting_runner.count("scontrol") == 0


@pytest.mark.slurm
def test_receipt_never_appears_is_crash(slurm_cluster: str, slurm_tmp: Path, standin: list[str],
                                        wait_all: Waiter) -> None:
    ex = _ex(slurm_tmp, standin)
    h = ex.submit(_spec(slurm_tmp, "norec", [PY, "-c", "print('ran')"], env=(("STANDIN_NO_RECEIPT", "1"),)))
    st = wait_all(ex, [h], timeout=60)["norec"]
    assert st.outcome == "crash"
    assert "no receipt" in st.reason and st.receipt_path is None


@pytest.mark.slurm
def test_injection_values_arrive_verbatim(slurm_cluster: str, slurm_tmp: Path, standin: list[str], dump_job: Path,
                                          wait_all: Waiter) -> None:
    ex = _ex(slurm_tmp, standin)
    dump = slurm_tmp / "dump.json"
    h = ex.submit(_spec(slurm_tmp, "inj", [PY, str(dump_job), str(dump), *INJECT],
                        env=(("KNOB_CMD", INJECT[0]), ("KNOB_QUOTE", INJECT[1]))))
    st = wait_all(ex, [h], timeout=60)["inj"]
    assert st.outcome == "ok", st.reason
    data = json.loads(dump.read_text())
    assert data["argv"] == list(INJECT)
    assert data["env"] == {"KNOB_CMD": INJECT[0], "KNOB_QUOTE": INJECT[1], "INFRARSI_TRIAL_ID": "inj"}
    assert not list(slurm_tmp.rglob("pwned")) and not Path("pwned").exists()
    assert "$(touch pwned)" in (slurm_tmp / "inj" / "job.sbatch").read_text()


@pytest.mark.slurm
def test_gpu_gres_and_adoption(slurm_cluster: str, slurm_tmp: Path, standin: list[str], dump_job: Path,
                               wait_all: Waiter) -> None:
    ex1 = _ex(slurm_tmp, standin)
    dump = slurm_tmp / "gpu.json"
    h = ex1.submit(_spec(slurm_tmp, "gpu", [PY, "-c", "import runpy, sys, time; time.sleep(1); "
                                                      f"sys.argv = ['d', {str(dump)!r}]; "
                                                      f"runpy.run_path({str(dump_job)!r}, run_name='__main__')"],
                         gpus_per_node=1, partition="gpu"))
    stored = json.loads(json.dumps(h.to_dict()))
    ex2 = _ex(slurm_tmp, standin)  # a restarted daemon adopts the handle
    st = wait_all(ex2, [JobHandle.from_dict(stored)], timeout=60)["gpu"]
    assert st.outcome == "ok" and st.gpus == 1, st.reason
    assert json.loads(dump.read_text())["cuda_visible_devices"] in ("0", "1")


@pytest.mark.slurm
def test_pending_past_deadline_is_cancelled(slurm_cluster: str, slurm_tmp: Path, standin: list[str],
                                            wait_all: Waiter) -> None:
    ex = _ex(slurm_tmp, standin, extra_sbatch=["--begin=now+600"])
    h = ex.submit(_spec(slurm_tmp, "late", [PY, "-c", "print('never')"], pending_deadline_s=1.0))
    assert ex.poll([h])["late"].state in ("pending", "finished")
    time.sleep(1.2)
    st = wait_all(ex, [h], timeout=30)["late"]
    assert st.outcome == "cancelled" and "deadline" in st.reason
    time.sleep(0.5)
    out = subprocess.run(["squeue", "-h", "--states=all", "-j", h.job_id, "-o", "%T"], capture_output=True, text=True)
    assert out.stdout.strip() in ("CANCELLED", "")


# ---------------------------------------------------------------- scripted runner (no Slurm)
class ScriptedSlurm:
    """Answers sbatch/squeue/sacct/scontrol like Slurm would, from a mutable table."""

    def __init__(self) -> None:
        self.state = "RUNNING"
        self.submit = time.strftime("%Y-%m-%dT%H:%M:%S")
        self.argvs: list[list[str]] = []

    def __call__(self, argv: Sequence[str]) -> "subprocess.CompletedProcess[str]":
        argv = list(argv)
        self.argvs.append(argv)
        out, rc, err = "", 0, ""
        if argv[0] == "sbatch":
            out = "77\n"
        elif argv[0] == "squeue":
            out = f"77|{self.state}|{self.submit}|{self.submit}|Unknown|None\n" if self.state else ""
        elif argv[0] == "sacct":
            out = ""
        elif argv[:2] == ["scontrol", "requeue"]:
            self.state = "PENDING"
        return subprocess.CompletedProcess(argv, rc, out, err)


def test_node_fail_is_requeued_with_the_key_restored(tmp_path: Path, standin: list[str]) -> None:
    fake = ScriptedSlurm()
    ex = _ex(tmp_path, standin, runner=fake, backoff=(), steady_interval_s=0.0, max_requeues=1)
    key = tmp_path / "trial.key"
    key.write_bytes(b"per-trial-key")
    h = ex.submit(_spec(tmp_path, "nf", [PY, "-c", "pass"], key_file=key))
    assert ex.poll([h])["nf"].state == "running"
    key.unlink()  # the wrapper deleted it when the job started
    (tmp_path / "nf" / "receipt.json").write_text(json.dumps({"wrapper": {"exit_code": None, "signal": 9}}))
    fake.state = "NODE_FAIL"
    st = ex.poll([h])["nf"]
    assert st.state == "pending" and "requeued after NODE_FAIL" in st.reason
    assert ["scontrol", "requeue", "77"] in fake.argvs
    assert key.read_bytes() == b"per-trial-key"
    assert (tmp_path / "nf" / "receipt.attempt0.json").exists() and not (tmp_path / "nf" / "receipt.json").exists()
    fake.state = "PREEMPTED"
    st = ex.poll([h])["nf"]
    assert (st.state, st.outcome) == ("finished", "crash") and "gave up" in st.reason
    assert not list((tmp_path / "state" / "keys").iterdir()), "the key copy is removed when the trial ends"


def test_reused_job_id_is_not_mistaken_for_ours(tmp_path: Path, standin: list[str]) -> None:
    fake = ScriptedSlurm()
    ex = _ex(tmp_path, standin, runner=fake, backoff=(), steady_interval_s=0.0)
    h = ex.submit(_spec(tmp_path, "old", [PY, "-c", "pass"]))
    fake.submit = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() + 3600))  # someone else's job 77
    st = ex.poll([h])["old"]
    assert st.state == "lost" and "unknown to squeue" in st.reason
    # a receipt of ours settles it from the receipt
    (tmp_path / "old" / "receipt.json").write_text(json.dumps({"wrapper": {"exit_code": 0, "signal": None}}))
    ex2 = _ex(tmp_path, standin, runner=fake, backoff=(), steady_interval_s=0.0)
    assert ex2.poll([h])["old"].outcome == "ok"


DDP_JOB = '''
import json, os, sys
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(1) * (dist.get_rank() + 1)
dist.all_reduce(t)
if dist.get_rank() == 0:
    json.dump({"world": dist.get_world_size(), "sum": t.item(), "argv": sys.argv[1:]}, open(os.environ["KNOB_OUT"], "w"))
dist.destroy_process_group()
'''


@pytest.mark.slurm
def test_torchrun_templates_run_a_real_rendezvous(slurm_cluster: str, slurm_tmp: Path, standin: list[str],
                                                  wait_all: Waiter) -> None:
    """Single-node torchrun with 2 (fake) GPUs -> 2 ranks; the multi-node template
    (srun + c10d rendezvous on the first node) on a 1-node allocation."""
    pytest.importorskip("torch")
    script = slurm_tmp / "ddp.py"
    script.write_text(DDP_JOB)
    ex = _ex(slurm_tmp, standin)
    hs = [
        ex.submit(_spec(slurm_tmp, "tr", [str(script), INJECT[0]], launcher="torchrun", gpus_per_node=2,
                        partition="gpu", env=(("KNOB_OUT", str(slurm_tmp / "tr.json")),))),
        ex.submit(_spec(slurm_tmp, "mn", [str(script), INJECT[1]], launcher="torchrun-multinode", nodes=1,
                        gpus_per_node=1, partition="gpu", env=(("KNOB_OUT", str(slurm_tmp / "mn.json")),))),
    ]
    st = wait_all(ex, hs, timeout=120)
    assert all(s.outcome == "ok" for s in st.values()), {k: v.reason for k, v in st.items()}
    tr = json.loads((slurm_tmp / "tr.json").read_text())
    mn = json.loads((slurm_tmp / "mn.json").read_text())
    assert (tr["world"], tr["sum"], tr["argv"]) == (2, 3.0, [INJECT[0]])
    assert (mn["world"], mn["sum"], mn["argv"]) == (1, 1.0, [INJECT[1]])


def test_pyslurm_requested_but_absent_falls_back_to_the_cli(tmp_path: Path, standin: list[str]) -> None:
    try:
        import pyslurm  # noqa: F401
        pytest.skip("pyslurm is importable here; the fallback is not exercised")
    except ImportError:
        pass
    fake = ScriptedSlurm()
    ex = _ex(tmp_path, standin, runner=fake, backoff=(), steady_interval_s=0.0, use_pyslurm=True)
    h = ex.submit(_spec(tmp_path, "p", [PY, "-c", "pass"]))
    assert ex.poll([h])["p"].state == "running"
    assert ex.use_pyslurm is False and any(a[0] == "squeue" for a in fake.argvs)


@pytest.mark.slurm
def test_pyslurm_queue_rows_match_squeue(slurm_cluster: str, slurm_tmp: Path, standin: list[str],
                                         wait_all: Waiter) -> None:
    pytest.importorskip("pyslurm", reason="pyslurm needs a build matching the installed Slurm")
    ex = _ex(slurm_tmp, standin, use_pyslurm=True)
    h = ex.submit(_spec(slurm_tmp, "ps", [PY, "-c", "print('x')"]))
    st = wait_all(ex, [h], timeout=60)["ps"]
    assert st.outcome == "ok" and ex.cli.calls.get("pyslurm.Jobs.load", 0) >= 1


def test_sbatch_failure_is_an_executor_error(tmp_path: Path, standin: list[str]) -> None:
    from infrarsi.controller.errors import ExecutorError

    def refuse(argv: Sequence[str]) -> "subprocess.CompletedProcess[str]":
        return subprocess.CompletedProcess(list(argv), 1, "", "sbatch: error: invalid partition specified: nope\n")

    ex = _ex(tmp_path, standin, runner=refuse)
    key = tmp_path / "k"
    key.write_bytes(b"x")
    with pytest.raises(ExecutorError, match="invalid partition"):
        ex.submit(_spec(tmp_path, "bad", [PY, "-c", "pass"], partition="nope", key_file=key))
    assert not (tmp_path / "state" / "keys").exists() or not list((tmp_path / "state" / "keys").iterdir())
    local = JobHandle(trial_id="l", backend="local", job_id="local-abc", submit_time=time.time(), outdir=str(tmp_path))
    assert ex.poll([local])["l"].state == "lost"


@pytest.mark.slurm
def test_adopt_after_a_crash_between_sbatch_and_bookkeeping(slurm_cluster: str, slurm_tmp: Path,
                                                             standin: list[str], wait_all: Waiter) -> None:
    ex1 = _ex(slurm_tmp, standin)
    h = ex1.submit(_spec(slurm_tmp, "crashy", [PY, "-c", "import time; time.sleep(1)"]))
    ex2 = _ex(slurm_tmp, standin)
    assert ex2.adopt("crashy", slurm_tmp / "crashy") == h  # from slurm-job.json
    (slurm_tmp / "crashy" / "slurm-job.json").unlink()    # as if the submitter died right after sbatch
    ex3 = _ex(slurm_tmp, standin)
    found = ex3.adopt("crashy", slurm_tmp / "crashy")
    assert found is not None and found.job_id == h.job_id and abs(found.submit_time - h.submit_time) < 5
    assert ex3.adopt("never-submitted", slurm_tmp / "nothing-here") is None
    assert wait_all(ex3, [found], timeout=60)["crashy"].outcome == "ok"


@pytest.mark.slurm
def test_job_that_left_the_queue_is_read_from_accounting(slurm_cluster: str, slurm_tmp: Path, standin: list[str],
                                                         wait_all: Waiter) -> None:
    """After MinJobAge a finished job is gone from squeue: one batched sacct call
    (slurmdbd, or -c for the jobcomp file) supplies the state and exit code."""
    hide_queue = {"on": False}

    def runner(argv: Sequence[str]) -> "subprocess.CompletedProcess[str]":
        cp = subprocess.run(list(argv), capture_output=True, text=True, timeout=60)
        if hide_queue["on"] and argv[0] == "squeue":
            return subprocess.CompletedProcess(list(argv), 0, "", "")
        return cp

    ex = _ex(slurm_tmp, standin, runner=runner)
    hs = [ex.submit(_spec(slurm_tmp, f"gone{i}", [PY, "-c", f"raise SystemExit({3 + i})"],
                          env=(("STANDIN_NO_RECEIPT", "1"),))) for i in range(2)]
    ids = [h.job_id for h in hs]
    deadline = time.monotonic() + 60
    while True:
        out = subprocess.run(["squeue", "-h", "--states=all", f"--jobs={','.join(ids)}", "-o", "%T"],
                             capture_output=True, text=True).stdout.split()
        if len(out) == 2 and all(s in ("FAILED", "COMPLETED") for s in out):
            break
        assert time.monotonic() < deadline
        time.sleep(0.3)
    hide_queue["on"] = True
    st = wait_all(ex, hs, timeout=30)
    for i in range(2):
        s = st[f"gone{i}"]
        assert (s.outcome, s.exit_code) == ("crash", 3 + i), s.reason
        assert "no receipt" in s.reason and "FAILED" in s.reason and f"exit {3 + i}" in s.reason
    assert ex.cli.acct_mode in ("db", "comp")
    assert ex.cli.calls["sacct"] <= 2  # detection (at most one failed mode) + one batched query
