"""Adapters that fit real loops (issue 16, item 6): ``begin`` per micro-batch (or after the loop) still digests the
whole update and the receipt reports the update's mean loss; DDP ranks combine at ``end``; the adapters import in a
trial whose interpreter has no infrarsi (the wrapper's copy on PYTHONPATH); without the wrapper they stay a no-op."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from infrarsi.verifier import jobpath  # noqa: E402
from infrarsi.verifier.adapters.torch_loop import BatchDigest, ReceiptLogger, batch_digest  # noqa: E402
from infrarsi.verifier.emit import Receipts  # noqa: E402

ONBOARDING = Path(__file__).resolve().parents[1] / "onboarding" / "scripts"


def _train(style: str, accum: int = 4, updates: int = 3) -> list[dict]:
    """A tiny loop logged in one of four styles; returns the receipt lines."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(32, 8), torch.nn.Flatten(), torch.nn.Linear(8 * 6, 32))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    buf = io.StringIO()
    rl = ReceiptLogger(model, opt, seq_len=6, receipts=Receipts(buf))
    g = torch.Generator().manual_seed(3)
    for _ in range(updates):
        x = torch.randint(0, 32, (16, 6), generator=g)
        y = torch.randint(0, 32, (16,), generator=g)
        if style == "whole":
            rl.begin(x)
        loss_sum = 0.0
        for xm, ym in zip(x.chunk(accum), y.chunk(accum)):
            loss = torch.nn.functional.cross_entropy(model(xm), ym)
            if style == "micro":
                rl.begin(xm, loss=loss)
            elif style == "micro_sum":
                rl.begin(xm)
            (loss / accum).backward()
            loss_sum += float(loss.detach()) / accum
        if style == "after":
            rl.begin(x)
        rl.grads()
        opt.step()
        opt.zero_grad()
        rl.end() if style == "micro" else rl.end(loss_sum)
    rl.finish()
    return [json.loads(line) for line in buf.getvalue().splitlines()]


def test_every_way_of_calling_begin_describes_the_same_update():
    ref = _train("whole")
    for style in ("micro", "micro_sum", "after"):
        got = _train(style)
        assert got[0]["tokens_per_update"] == ref[0]["tokens_per_update"] == 96
        assert got[0]["model_digest"] == ref[0]["model_digest"]
        for a, b in zip(ref[1:-1], got[1:-1]):
            assert (b["batch_digest"], b["tokens"], b["samples"]) == (a["batch_digest"], a["tokens"], a["samples"])
            assert b["loss"] == pytest.approx(a["loss"], rel=1e-6) and b["grad_norm"] == pytest.approx(a["grad_norm"])
    assert _train("micro", accum=1)[1]["batch_digest"] == ref[1]["batch_digest"]  # however the update is cut


def test_the_update_loss_is_the_mean_of_the_micro_batch_losses():
    model = torch.nn.Linear(2, 1)
    buf = io.StringIO()
    rl = ReceiptLogger(model, None, seq_len=2, receipts=Receipts(buf))
    for loss in (1.0, 2.0, torch.tensor(6.0)):
        rl.begin(torch.ones(2, 2), loss=loss)
    rl.end()
    update = json.loads(buf.getvalue().splitlines()[1])
    assert update["loss"] == pytest.approx(3.0) and update["samples"] == 6 and update["tokens"] == 12


def test_digest_of_parts_equals_the_digest_of_the_concatenation():
    x = torch.randint(0, 50_000, (12, 9))
    for k in (1, 2, 3, 12):
        d = BatchDigest()
        for part in x.chunk(k):
            d.add(part)
        assert d.hexdigest() == batch_digest(x)
        combined = BatchDigest.combine([_local(p) for p in x.chunk(k)])
        assert BatchDigest.text(combined) == batch_digest(x)
    assert batch_digest(x) != batch_digest(x.flip(0)) and batch_digest(torch.tensor(2.0)) != batch_digest(x)


def _local(t):
    d = BatchDigest()
    d.add(t)
    return d.local()


def test_misuse_is_a_clear_error():
    rl = ReceiptLogger(torch.nn.Linear(2, 1), None, receipts=Receipts(None))
    with pytest.raises(RuntimeError, match=r"end\(\) without begin\(\)"):
        rl.end(1.0)
    rl.begin(torch.ones(2, 2))
    with pytest.raises(ValueError, match="no loss"):
        rl.end()


def test_ddp_micro_batches_equal_a_single_process_run(tmp_path):
    """The onboarding DDP script: 2 gloo ranks x 2 micro-steps vs 1 process x 4 and 1 x 1 (same global batch)."""
    runs = {"single4": ["--gradient_accumulation_steps=4"], "single1": ["--batch_size=32", "--gradient_accumulation_steps=1"],
            "ddp2": ["--gradient_accumulation_steps=2"]}
    outs = {}
    for name, extra in runs.items():
        rx = tmp_path / f"{name}.jsonl"
        cmd = [sys.executable, "train.py", "--max_iters=3", "--eval_interval=0", *extra]
        if name.startswith("ddp"):
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", *cmd[1:]]
        env = dict(os.environ, INFRARSI_RECEIPT_PATH=str(rx), OMP_NUM_THREADS="1")
        for k in ("INFRARSI_RECEIPT_FD", "RANK", "WORLD_SIZE", "LOCAL_RANK"):
            env.pop(k, None)
        for _attempt in (1, 2):  # torchrun's gloo teardown on a loaded box can abort after the run: retry once
            rx.unlink(missing_ok=True)
            proc = subprocess.run(cmd, cwd=ONBOARDING / "globals", env=env, capture_output=True, text=True, timeout=180)
            if proc.returncode == 0:
                break
        assert proc.returncode == 0, proc.stderr[-2000:]
        outs[name] = [json.loads(x) for x in rx.read_text().splitlines()]
    a, b, c = outs["single4"], outs["single1"], outs["ddp2"]
    assert c[0]["world_size"] == 2 and a[0]["tokens_per_update"] == c[0]["tokens_per_update"] == 512
    for ua, ub, uc in zip(a[1:-1], b[1:-1], c[1:-1]):
        assert ua["batch_digest"] == ub["batch_digest"] == uc["batch_digest"]
        assert ua["samples"] == uc["samples"] == 32 and ua["tokens"] == uc["tokens"] == 512
        assert uc["loss"] == pytest.approx(ua["loss"], rel=1e-5) and ub["loss"] == pytest.approx(ua["loss"], rel=1e-5)
    assert len(c) == 5  # rank 1 wrote nothing


JOB = """
import sys, torch
from infrarsi.verifier.adapters.torch_loop import ReceiptLogger
print("adapter from", sys.modules["infrarsi.verifier.adapters.torch_loop"].__file__, flush=True)
m = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(m.parameters(), lr=0.1)
rl = ReceiptLogger(m, opt, seq_len=4)
for i in range(3):
    for xm in torch.randn(8, 4).chunk(2):
        loss = m(xm).pow(2).mean()
        rl.begin(xm, loss=loss)
        loss.backward()
    rl.grads(); opt.step(); opt.zero_grad(); rl.end()
rl.finish()
"""


def _torch_only_env(tmp_path: Path) -> dict[str, str]:
    """An environment whose ``python -S`` sees torch (its site-packages as a plain path) but not infrarsi (the
    editable install's path hook lives in a .pth file, which -S never reads)."""
    site = str(Path(torch.__file__).resolve().parents[1])
    env = {k: v for k, v in os.environ.items() if not k.startswith("INFRARSI_")}
    env["PYTHONPATH"] = site
    return env


def test_the_trial_imports_the_adapters_without_infrarsi_installed(tmp_path):
    (tmp_path / "job.py").write_text(textwrap.dedent(JOB))
    env = _torch_only_env(tmp_path)
    bare = subprocess.run([sys.executable, "-S", "job.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert bare.returncode != 0 and "No module named 'infrarsi'" in bare.stderr  # this interpreter has no infrarsi
    out = tmp_path / "out"
    wrapped = subprocess.run([sys.executable, "-m", "infrarsi.verifier.exec", "--out", str(out), "--quiet",
                              "--pass-env", "PYTHONPATH", "--", sys.executable, "-S", "job.py"],
                             cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    log = (out / "job.log").read_text()
    assert wrapped.returncode == 0, log[-2000:] + wrapped.stderr
    assert "/infrarsi-rx-" in log and "/py/infrarsi/verifier/adapters/torch_loop.py" in log  # the wrapper's copy
    receipt = json.loads((out / "receipt.json").read_text())
    assert [u["samples"] for u in receipt["updates"]] == [8, 8, 8] and receipt["footer"]["completed"] == 3


def test_without_the_wrapper_the_adapters_write_nothing(tmp_path):
    (tmp_path / "job.py").write_text(textwrap.dedent(JOB))
    env = {k: v for k, v in os.environ.items() if not k.startswith("INFRARSI_")}
    proc = subprocess.run([sys.executable, "job.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.py"]  # no receipt file anywhere here


def test_the_job_copy_is_self_contained(tmp_path):
    lib = jobpath.write_job_lib(tmp_path / "lib")
    files = {p.relative_to(lib).as_posix() for p in lib.rglob("*.py")}
    assert {"infrarsi/verifier/__init__.py", "infrarsi/verifier/emit.py", "infrarsi/verifier/adapters/torch_loop.py",
            "infrarsi/verifier/adapters/ddp.py", "infrarsi/verifier/adapters/hf.py"} <= files
    assert not (lib / "infrarsi" / "__init__.py").exists()  # a namespace package, as installed
    # with nothing but the copy on the path (no site-packages, no torch): the emitter and the adapter modules import
    code = ("import infrarsi.verifier.emit, infrarsi.verifier.adapters.torch_loop, infrarsi.verifier.adapters.ddp, "
            "infrarsi.verifier.adapters.hf, sys; assert 'torch' not in sys.modules; print('ok')")
    proc = subprocess.run([sys.executable, "-S", "-c", code], env={"PYTHONPATH": str(lib)}, capture_output=True,
                          text=True, timeout=60)
    assert proc.stdout.strip() == "ok", proc.stderr
    assert jobpath.job_pythonpath(lib, "/a:/b") == f"{lib}{os.pathsep}/a:/b" and jobpath.job_pythonpath(lib, None) == str(lib)


HF_TRAIN = """
import sys, torch, transformers
from infrarsi.verifier.adapters.hf import receipt_callback  # infrarsi +1

class DS(torch.utils.data.Dataset):
    def __len__(self):
        return 64
    def __getitem__(self, i):
        ids = (torch.arange(8) * (i % 5 + 1) + i) % 64
        return {"input_ids": ids, "labels": ids}

batch, accum = int(sys.argv[1]), int(sys.argv[2])
torch.manual_seed(0)
model = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=64,
                                                             n_positions=16, resid_pdrop=0.0, embd_pdrop=0.0,
                                                             attn_pdrop=0.0))
args = transformers.TrainingArguments(sys.argv[3], per_device_train_batch_size=batch, gradient_accumulation_steps=accum,
                                      max_steps=3, logging_steps=1, report_to=[], use_cpu=True, seed=1)
trainer = transformers.Trainer(model=model, args=args, train_dataset=DS(),
                               callbacks=[receipt_callback(seq_len=8)])  # infrarsi +2
trainer.train()
"""


def test_hf_trainer_lines_counted_and_micro_batches_digested(tmp_path):
    """The docs' HF Trainer lines (2, counted by their markers) in a real Trainer: with gradient accumulation the
    digest covers every micro-batch of the update (4 x 2 equals 8 x 1) and the loss is the update's mean."""
    pytest.importorskip("transformers")
    import re

    docs = (Path(__file__).resolve().parents[2] / "docs" / "adapters.md").read_text()
    heading = next(ln for ln in docs.splitlines() if ln.startswith("## ") and "Hugging Face Trainer" in ln)
    marks = [int(m) for m in re.findall(r"# infrarsi \+(\d+)", HF_TRAIN)]
    assert marks == [1, 2] and f"({len(marks)} added lines)" in heading
    script = tmp_path / "hf_train.py"
    script.write_text(textwrap.dedent(HF_TRAIN))
    outs = {}
    for batch, accum in ((4, 2), (8, 1)):
        rx = tmp_path / f"rx{batch}.jsonl"
        env = {k: v for k, v in os.environ.items() if not k.startswith("INFRARSI_")}
        env.update(INFRARSI_RECEIPT_PATH=str(rx), OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
        proc = subprocess.run([sys.executable, str(script), str(batch), str(accum), str(tmp_path / f"o{batch}")],
                              env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        outs[batch] = [json.loads(x) for x in rx.read_text().splitlines()]
    a, b = outs[4], outs[8]
    assert a[0]["tokens_per_update"] == b[0]["tokens_per_update"] == 64
    ua, ub = a[1:-1], b[1:-1]
    assert [u["index"] for u in ua] == [1, 2, 3] and len(ub) == 3
    for x, y in zip(ua, ub):
        assert x["samples"] == y["samples"] == 8 and x["tokens"] == y["tokens"] == 64
        assert x["batch_digest"] == y["batch_digest"] != ""
        assert x["loss"] == pytest.approx(y["loss"], rel=1e-4)
    assert len({u["batch_digest"] for u in ua}) == 3
