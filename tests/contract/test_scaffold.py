"""`infrarsi contract scaffold`: contracts proposed from three differently written scripts pass `contract check`,
recognise the canonical mechanisms, keep tokens per update fixed through a solved coupling, take the command's
values as the reference, and render values so the scripts' own parsers accept them (the scripts are run with the
rendered arguments for every legal configuration where that is cheap)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from infrarsi.controller.contract import check_contract, legal_configs, load_contract, render_launch
from infrarsi.controller.contract.scaffold import role_of, scaffold
from infrarsi.controller.contract.scaffold_read import read_launch
from infrarsi.controller.errors import ContractError

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = Path(__file__).resolve().parent / "scripts"


def _copy(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / src.name
    shutil.copytree(src, dst)
    return dst


def _write(repo: Path, argv: list[str], **kw: object) -> Path:
    text = scaffold(argv, cwd=repo, repo=repo, **kw).yaml()  # type: ignore[arg-type]
    path = repo / "infrarsi.yaml"
    path.write_text(text)
    return path


def _mechanisms(path: Path) -> dict[str, str]:
    return {k.name: k.mechanism or "" for k in load_contract(path).knobs}


def test_configurator_globals_script(tmp_path: Path) -> None:
    repo = _copy(SCRIPTS / "gptglobals", tmp_path)
    path = _write(repo, ["python", "train.py", "config/train_small.py", "--batch_size=4", "--compile=False",
                         "--max_iters=100"], gpus=0)
    assert check_contract(path)[1] == []
    c = load_contract(path)
    assert _mechanisms(path) == {"batch_size": "micro_batch", "gradient_accumulation_steps": "grad_accum",
                                 "dtype": "mixed_precision", "compile": "graph_compile", "flash": "attention_kernel",
                                 "fused_adamw": "optimizer_fusion"}
    # reference = the command's values over the config file's over the script's
    assert c.reference_config["batch_size"] == 4 and c.reference_config["gradient_accumulation_steps"] == 4
    assert c.reference_config["compile"] is False and c.reference_config["dtype"] == "bfloat16"
    assert c.workload.seq_len == 256 and c.workload.tokens_per_update == 4 * 4 * 256
    assert c.couplings[0].solve == "gradient_accumulation_steps" and c.couplings[0].equals == 16
    assert "--batch_size" not in c.launch.command and "--compile" not in c.launch.command
    assert c.launch.command.endswith("{knobs}") and "config/train_small.py" in c.launch.command
    assert c.launch.trial_args == ["--max_iters=30"]
    assert "configurator.py" in c.frozen_files and "config/train_small.py" in c.frozen_files
    assert c.knob("compile").render == "python"
    assert "# TODO:" in path.read_text()


def test_configurator_accepts_every_rendered_configuration(tmp_path: Path) -> None:
    repo = _copy(SCRIPTS / "gptglobals", tmp_path)
    path = _write(repo, ["python", "train.py", "config/train_small.py", "--max_iters=100"], gpus=0)
    c = load_contract(path)
    configs = list(legal_configs(c))
    assert len(configs) >= 8
    seen_tokens = set()
    for cfg in configs[:: max(1, len(configs) // 6)]:
        plan = render_launch(c, cfg)
        argv = [sys.executable] + list(plan.argv[1:]) + ["--max_iters=0"]
        proc = subprocess.run(argv, cwd=repo, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, (argv, proc.stderr[-500:])  # the configurator's type assertion holds
        seen_tokens.add(int(re.search(r"tokens per iteration will be: ([\d,]+)", proc.stdout)[1].replace(",", "")))
    assert seen_tokens == {c.workload.tokens_per_update}


def test_argparse_script(tmp_path: Path) -> None:
    repo = _copy(SCRIPTS / "argtrainer", tmp_path)
    path = _write(repo, ["python", "trainer.py", "-m", "8", "--precision", "bf16", "--compile", "--max-steps", "50"])
    assert check_contract(path)[1] == []
    c = load_contract(path)
    assert _mechanisms(path) == {
        "micro_batch_size": "micro_batch", "gradient_accumulation_steps": "grad_accum", "precision": "mixed_precision",
        "compile": "graph_compile", "attn_impl": "attention_kernel", "fused_adam": "optimizer_fusion",
        "gradient_checkpointing": "activation_checkpointing", "allow_tf32": "tf32"}
    ref = c.reference_config
    assert ref["micro_batch_size"] == 8 and ref["precision"] == "bf16" and ref["compile"] is True
    assert c.workload.tokens_per_update == 8 * 4 * 512
    assert c.knob("attn_impl").values == ["eager", "sdpa", "flash_attention_2"]
    assert c.knob("fused_adam").apply == {"when_true": "--fused-adam", "when_false": "--no-fused-adam"}
    assert "amp-bf16" in c.precision_menu and "tf32" in c.precision_menu
    assert c.editable_files == ["trainer.py", "layers.py"] and "dataset.py" in c.frozen_files
    assert c.launch.command == "python trainer.py --max-steps 50 {knobs}"
    for cfg in list(legal_configs(c))[:: 97][:4]:
        plan = render_launch(c, cfg)
        proc = subprocess.run([sys.executable] + list(plan.argv[1:]), cwd=repo, capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode == 0, proc.stderr[-500:]
        parsed = eval(proc.stdout)  # noqa: S307 - our own script prints vars(args)
        assert parsed["micro_batch_size"] * parsed["gradient_accumulation_steps"] == 32
        assert parsed["compile"] is cfg["compile"] and parsed["fused_adam"] is cfg["fused_adam"]


def test_nanogpt_example(tmp_path: Path) -> None:
    repo = _copy(ROOT / "examples" / "nanogpt", tmp_path)
    path = _write(repo, ["python3", "train.py", "--size", "tiny", "--updates", "16", "--seed", "1337"], gpus=0)
    assert check_contract(path)[1] == []
    mech = _mechanisms(path)
    assert mech == {"micro_batch": "micro_batch", "dtype": "mixed_precision", "compile": "graph_compile",
                    "attention": "attention_kernel", "optimizer_impl": "optimizer_fusion",
                    "activation_checkpointing": "activation_checkpointing", "tf32": "tf32"}
    text = path.read_text()
    # grad accumulation is derived inside the script (default None): explained, batch kept fixed
    assert "--grad-accum has no literal value" in text and "set seq_len" in text
    c = load_contract(path)
    assert c.knob("optimizer_impl").values == ["loop", "foreach", "fused"]
    assert {"model.py", "train.py"} <= set(c.editable_files) and "data.py" in c.frozen_files


def test_torchrun_command(tmp_path: Path) -> None:
    repo = _copy(SCRIPTS / "gptglobals", tmp_path)
    path = _write(repo, ["torchrun", "--standalone", "--nproc_per_node=2", "train.py", "--batch_size=8"])
    assert check_contract(path)[1] == []
    c = load_contract(path)
    assert c.launch.launcher == "torchrun" and c.launch.gpus_per_node == 2
    assert c.launch.command.startswith("train.py ")
    assert c.workload.tokens_per_update == 8 * 40 * 1024 * 2
    assert "counts all ranks" in path.read_text()


def test_cli_writes_and_refuses_to_overwrite(tmp_path: Path) -> None:
    repo = _copy(SCRIPTS / "argtrainer", tmp_path)
    out = repo / "infrarsi.yaml"
    cmd = [sys.executable, "-m", "infrarsi.controller.cli.main", "contract", "scaffold", "-o", str(out),
           "--repo", str(repo), "--", "python", "trainer.py", "--seq-len", "128"]
    proc = subprocess.run(cmd, cwd=repo, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "contract check" in proc.stderr and load_contract(out).workload.seq_len == 128
    again = subprocess.run(cmd, cwd=repo, capture_output=True, text=True)
    assert again.returncode != 0 and "exists" in again.stderr
    check = subprocess.run([sys.executable, "-m", "infrarsi.controller.cli.main", "contract", "check", str(out)],
                           capture_output=True, text=True)
    assert check.returncode == 0 and check.stderr == ""  # no boolean-render warnings either


def test_bad_commands_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(ContractError, match="no training script"):
        read_launch(["python", "-c", "print(1)"])
    with pytest.raises(ContractError, match="does not exist"):
        scaffold(["python", "missing.py"], cwd=tmp_path)
    (tmp_path / "bad.py").write_text("def (:\n")
    with pytest.raises(ContractError, match="not valid Python"):
        scaffold(["python", "bad.py"], cwd=tmp_path)


@pytest.mark.parametrize("name, role", [("batch_size", "micro_batch"), ("per_device_train_batch_size", "micro_batch"),
                                        ("gradient-accumulation-steps", "grad_accum"), ("dtype", "mixed_precision"),
                                        ("torch_compile", "graph_compile"), ("attn_implementation", "attention_kernel"),
                                        ("fused_adamw", "optimizer_fusion"), ("gradient_checkpointing",
                                                                              "activation_checkpointing"),
                                        ("allow_tf32", "tf32"), ("learning_rate", None), ("seed", None)])
def test_role_names(name: str, role: str | None) -> None:
    assert role_of(name) == role


def test_onboarding_scripts_when_present(tmp_path: Path) -> None:
    """Helper scripts of tests/onboarding (written independently) scaffold to contracts that pass check."""
    scripts = ROOT / "tests" / "onboarding" / "scripts"
    dirs = sorted(p for p in scripts.iterdir() if (p / "train.py").is_file()) if scripts.is_dir() else []
    if not dirs:
        pytest.skip("tests/onboarding/scripts is not there")
    for src in dirs:
        repo = _copy(src, tmp_path)
        path = _write(repo, ["python", "train.py"], gpus=0)
        assert check_contract(path)[1] == [], src.name
        mech = set(_mechanisms(path).values())
        assert {"micro_batch", "grad_accum"} <= mech, (src.name, mech)


def test_choices_reveal_the_mechanism(tmp_path: Path) -> None:
    (tmp_path / "t.py").write_text("import argparse\np = argparse.ArgumentParser()\n"
                                   "p.add_argument('--optimizer', choices=['loop', 'foreach', 'fused'], default='loop')\n"
                                   "p.add_argument('--kernel', choices=['naive', 'flash'], default='naive')\n")
    path = _write(tmp_path, ["python", "t.py"])
    assert _mechanisms(path) == {"optimizer": "optimizer_fusion", "kernel": "attention_kernel"}


def test_computed_global_is_a_todo_and_a_command_value_wins(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(
        "import torch\nbatch_size = 12\ngradient_accumulation_steps = 5 * 8\nblock_size = 1024\n"
        "dtype = 'bfloat16' if torch.cuda.is_available() else 'float16'\n"
        "exec(open('configurator.py').read())\n")
    path = _write(tmp_path, ["python", "train.py"])
    assert check_contract(path)[1] == []
    assert "dtype (mixed_precision) is computed by the script" in path.read_text()
    assert load_contract(path).workload.tokens_per_update == 12 * 40 * 1024
    path = _write(tmp_path, ["python", "train.py", "--dtype=float16"])
    assert load_contract(path).knob("dtype").reference == "float16"
