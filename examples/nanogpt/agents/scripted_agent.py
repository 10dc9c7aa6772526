"""A scripted stand-in for a coding agent (``claude -p``, ``codex exec``, ``aider --message-file``), for CI and the
example contract ``infrarsi.agent.yaml``: it reads the prompt infrarsi wrote (a file path as the first argument, or
stdin), makes one source edit in the working directory (a scratch copy of the training repo) and prints a one-line
rationale.  infrarsi takes the diff it leaves as its proposal.

Usage: ``python3 agents/scripted_agent.py PROMPT_FILE [--edit NAME]`` with NAME one of :data:`EDITS`
(default ``no-recompute``).  Exit 1 (a failed proposal) when the prompt is empty or the edit no longer applies.
Standard library only, no network.
"""

from __future__ import annotations

import sys
from pathlib import Path

#: name -> (file, text to find, replacement, rationale)
EDITS = {
    "no-recompute": (
        "model.py",
        "            if self.cfg.activation_checkpointing and self.training:\n",
        "            if False:  # the tiny model fits easily: skip activation recomputation\n",
        "drop activation recomputation: the model fits in memory, recomputing blocks only costs time"),
    "no-item-sync": (
        "train.py",
        "            loss_sum += loss.item()\n",
        "            loss_sum += loss.detach()  # no host sync per micro-step\n",
        "accumulate the loss on the device instead of a host sync per micro-step"),
}


def main(argv: list[str]) -> int:
    args = list(argv)
    edit = "no-recompute"
    if "--edit" in args:
        i = args.index("--edit")
        edit = args[i + 1]
        del args[i:i + 2]
    prompt = Path(args[0]).read_text() if args else sys.stdin.read()
    if not prompt.strip():
        print("empty prompt", file=sys.stderr)
        return 1
    rel, old, new, why = EDITS[edit]
    path = Path(rel)
    text = path.read_text()
    if old not in text:
        print(f"{rel}: the line to change is not there", file=sys.stderr)
        return 1
    path.write_text(text.replace(old, new, 1))
    print(why)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
