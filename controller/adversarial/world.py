"""The attacked world of one adversarial case: a tiny target git repo, its contract, its attack patches, victims.

:func:`build_world` creates, under a fresh temporary root::

    root/repo/            the user's repo (git, one commit): train.py, infrarsi.yaml, patches/*.diff, extras
    root/home/            INFRARSI_HOME of the controller (signing.key, the master key, lives here)
    root/campaign/        the campaign workdir (trials/<key16>/{src,scratch,out})
    root/outside/         victim files outside the repo (symlink targets)

Attack patches are real unified diffs against the committed tree: new files are added with ``--- /dev/null``
hunks, and ``train.py`` gets an ``import adv_<case>`` line (the attacker's code runs inside the training job).
Payload files live in ``payloads/`` next to this module; ``@@MARK@@`` in them is replaced by a per-world marker
(used in /tmp beacons and process command lines so that the runner can find what the attack left behind).
"""

from __future__ import annotations

import difflib
import hashlib
import subprocess
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path

PAYLOADS = Path(__file__).with_name("payloads")
GIT_ID = ["-c", "user.name=infrarsi-adversarial", "-c", "user.email=adv@infrarsi.invalid",
          "-c", "core.hooksPath=/dev/null"]

CONTRACT = """\
name: adversarial
repo: .
launch:
  command: "python3 train.py {{knobs}}"
  time_limit: "00:02:00"
workload:
  tokens_per_update: 64
  seq_len: 1
trial:
  updates: 10
  window: [3, 10]
editable_files: ["*.py", "**/*.py", "conf.json", "cfgdir/*"]
frozen_files: [infrarsi.yaml]
precision_menu: [fp32]
memory_cap_gib: 8
knobs:
{knobs}
patches:
  dir: patches
  max_changed_lines: 2000
budget:
  gpu_hours: 1.0
  trials: 4
verification:
  reference_repeats: 2
  rerun_pairs: 1
  promotion_candidates: 1
"""
ENV_KNOB = """\
  - name: batch
    values: [64]
    reference: 64
    batch_factor: true
    apply: {env: ADV_BATCH}
"""
CONFIG_KNOB = ENV_KNOB + """\
  - name: lr_scale
    values: [1, 2]
    reference: 1
    kind: ordered
    apply: {config: {file: conf.json, key: lr_scale}}
"""


@dataclass
class World:
    """Everything one case's trials need; paths are absolute."""

    root: Path
    repo: Path
    home: Path
    campaign: Path
    outside: Path
    mark: str
    victims: dict[Path, bytes] = field(default_factory=dict)

    @property
    def contract_path(self) -> Path:
        return self.repo / "infrarsi.yaml"

    @property
    def key_file(self) -> Path:
        return self.home / "signing.key"


def git(repo: Path, *args: str) -> str:
    """``git -C repo`` with hooks disabled; returns stdout, raises CalledProcessError on failure."""
    return subprocess.run(["git", "-C", str(repo), *GIT_ID, *args], check=True, capture_output=True,
                          text=True).stdout


def payload(name: str, mark: str) -> str:
    """The text of one payload file with its marker filled in."""
    return (PAYLOADS / name).read_text().replace("@@MARK@@", mark)


def new_file_diff(path: str, text: str) -> str:
    """A unified diff creating ``path`` with ``text`` (a ``--- /dev/null`` hunk)."""
    lines = text.splitlines()
    body = "".join(f"+{ln}\n" for ln in lines)
    return (f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n"
            f"@@ -0,0 +1,{len(lines)} @@\n{body}")


def edit_diff(path: str, old: str, new: str) -> str:
    """A unified diff turning ``old`` into ``new`` for ``path`` (git-apply compatible headers)."""
    body = "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{path}", f"b/{path}"))
    return f"diff --git a/{path} b/{path}\n{body}"


def import_patch(train: str, module: str, mark: str, extra: dict[str, str] | None = None) -> str:
    """A patch adding ``<module>.py`` (from payloads/, plus ``extra`` files) and an import of it to train.py."""
    new_train = train.replace("from infrarsi.verifier.emit import Receipts\n",
                              f"from infrarsi.verifier.emit import Receipts\nimport {module}  # noqa: F401\n", 1)
    parts = [edit_diff("train.py", train, new_train), new_file_diff(f"{module}.py", payload(f"{module}.py", mark))]
    for rel, text in (extra or {}).items():
        parts.append(new_file_diff(rel, text))
    return "".join(parts)


def binary_patches(train: str) -> dict[str, str]:
    """Two binary-hunk patches made with real git in a scratch repo: a ``GIT binary patch`` creating a .py file,
    and the same hunk hidden after ``--- /dev/null`` / ``+++`` headers next to a one-line text change."""
    evil = 'import os\nos.system("touch /tmp/infrarsi-adversarial-binary-pwned")\n'
    with tempfile.TemporaryDirectory(prefix="infrarsi-adv-bin-") as tmp:
        r = Path(tmp)
        git(r, "init", "-q")
        (r / "evil.py").write_text(evil)
        (r / ".git" / "info").mkdir(parents=True, exist_ok=True)
        (r / ".git" / "info" / "attributes").write_text("evil.py -diff\n")
        git(r, "add", "evil.py")
        binary = git(r, "diff", "--cached", "--binary", "--", "evil.py")
    text_change = edit_diff("train.py", train, train.replace("UPDATES = 10\n", "UPDATES = 10  # tuned\n", 1))
    hidden = binary.replace("GIT binary patch", "--- /dev/null\n+++ b/evil.py\nGIT binary patch", 1)
    return {"git_binary.diff": binary, "binary_after_devnull.diff": text_change + hidden}


def build_world(case_name: str, tmp_root: Path | None = None) -> World:
    """Create the repo for ``case_name`` (its attack patch committed under patches/) and return the World."""
    root = Path(tempfile.mkdtemp(prefix=f"infrarsi-adv-{case_name}-", dir=tmp_root))
    mark = f"infrarsi-adv-{uuid.uuid4().hex[:12]}"
    w = World(root=root, repo=root / "repo", home=root / "home", campaign=root / "campaign",
              outside=root / "outside", mark=mark)
    for d in (w.repo, w.home, w.campaign, w.outside, w.repo / "patches"):
        d.mkdir(parents=True, exist_ok=True)
    train = payload("train.py", mark)
    (w.repo / "train.py").write_text(train)
    knobs = ENV_KNOB
    patches: dict[str, str] = {}
    if case_name == "symlink_escape":
        knobs = CONFIG_KNOB
        victim = w.outside / "victim.json"
        victim.write_text('{"owner": "someone else", "lr_scale": 7}\n')
        (w.outside / "dir").mkdir()
        (w.outside / "dir" / "settings.py").write_text("SECRET = 'do not touch'\n")
        (w.repo / "conf.json").symlink_to(victim)
        (w.repo / "cfgdir").symlink_to(w.outside / "dir")
        w.victims = {victim: victim.read_bytes(), w.outside / "dir" / "settings.py":
                     (w.outside / "dir" / "settings.py").read_bytes()}
        patches["edit_through_symlink_dir.diff"] = edit_diff(
            "cfgdir/settings.py", "SECRET = 'do not touch'\n", "SECRET = 'pwned'\n")
    elif case_name == "binary_hunk":
        patches.update(binary_patches(train))
    elif case_name == "wrapper_shadow":
        fake = payload("fake_wrapper.py", mark)
        inits = {p: "# makes the fake a regular package, which wins over a namespace portion\n" for p in (
            "verifier/__init__.py", "infrarsi/__init__.py", "infrarsi/verifier/__init__.py")}
        fakes = {p: fake for p in ("verifier/exec.py", "infrarsi/verifier/exec.py", "controller/__init__.py")}
        patches["wrapper_shadow.diff"] = "".join(new_file_diff(p, t) for p, t in {**inits, **fakes}.items())
    elif case_name != "reference":
        patches[f"{case_name}.diff"] = import_patch(
            train, f"adv_{case_name}", mark,
            extra={"adv_forger.py": payload("adv_forger.py", mark)} if case_name in (
                "forge_after_exit", "key_read") else None)
    (w.repo / "infrarsi.yaml").write_text(CONTRACT.format(knobs=knobs))
    for name, text in patches.items():
        (w.repo / "patches" / name).write_text(text)
    git(w.repo, "init", "-q")
    git(w.repo, "add", "-A")
    git(w.repo, "commit", "-qm", "target")
    return w


def snapshot(w: World) -> dict[str, str]:
    """What must not change: the user's repo status, HEAD and hooks, the victim files and the master key."""
    hooks = w.repo / ".git" / "hooks"
    listing = sorted(p.name for p in hooks.iterdir()) if hooks.is_dir() else []
    snap = {
        "repo status": git(w.repo, "status", "--porcelain", "--ignored"),
        "repo HEAD": git(w.repo, "rev-parse", "HEAD").strip(),
        "repo hooks": " ".join(n for n in listing if not n.endswith(".sample")),
        "master key": hashlib.sha256(w.key_file.read_bytes()).hexdigest() if w.key_file.exists() else "",
    }
    for p in w.victims:
        snap[f"victim {p.name}"] = hashlib.sha256(p.read_bytes()).hexdigest() if p.exists() else "(missing)"
    return snap
