"""The receipt matrix's cases: each a real perturbation of the tiny job or its launch, with the expected verdict.

``expect`` is ``"accept"`` or the name of the invariant that must be among the
rejecting items (``"signature"`` for receipt-integrity cases).  ``post`` names a
change made to the signed receipt after the run (unsigned / edited / wrong schema /
replayed / forged) -- the only cases that touch receipt JSON, because those attacks
act on the receipt itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Case:
    """One matrix row.  ``launcher``: ``python`` (-m module), ``script`` (file path) or ``torchrun``."""

    name: str
    expect: str
    perturb: str = "none"
    args: tuple[str, ...] = ()
    launcher: str = "python"
    nproc: int = 1
    post: str | None = None
    timeout_s: float = 120.0
    note: str = ""
    kind: str = field(default="", compare=False)

    @property
    def benign(self) -> bool:
        """True for variants the verifier must accept."""
        return self.expect == "accept"


def _p(name: str, expect: str, perturb: str | None = None, note: str = "", **kw: object) -> Case:
    return Case(name=name, expect=expect, perturb=perturb or name, note=note, kind="perturbation", **kw)  # type: ignore[arg-type]


def _b(name: str, note: str, perturb: str = "none", **kw: object) -> Case:
    return Case(name=name, expect="accept", perturb=perturb, note=note, kind="benign", **kw)  # type: ignore[arg-type]


#: the reference configuration (run twice: the two repeats give sigma_l)
REFERENCE = Case(name="reference", expect="accept", note="untouched reference", kind="reference")

CASES: tuple[Case, ...] = (
    # ---- single perturbations: execution (L1)
    _p("fewer_updates", "completes", note="stops 4 updates early, footer and exit 0"),
    _p("early_exit_0", "completes", note="sys.exit(0) after update 9, no footer"),
    _p("hang", "completes", note="hangs at update 8; the wrapper's timeout kills it", timeout_s=10.0),
    _p("self_kill", "completes", note="SIGKILL at update 8"),
    _p("crash", "completes", note="uncaught exception at update 8"),
    _p("nan_loss", "no_errors", note="NaN loss from update 6"),
    _p("inf_loss", "no_errors", note="infinite loss at update 6"),
    _p("frozen_loss", "no_errors", note="reports the first loss from update 4 on"),
    _p("frozen_grad_norm", "no_errors", note="reports the first gradient norm from update 4 on"),
    _p("oom", "no_errors", note="torch.OutOfMemoryError at update 6 (requested/free GiB in the line)"),
    _p("traceback_exit0", "no_errors", note="prints a caught traceback, exits 0"),
    _p("nccl_error", "no_errors", note="NCCL WARN/error line in mid-run"),
    _p("cuda_error", "no_errors", note="CUDA illegal-memory-access line in mid-run"),
    _p("memory_over_cap", "memory_cap", note="allocates 1 GiB more at update 7"),
    # ---- workload, data, model, frozen files (L2)
    _p("half_tokens", "same_workload", perturb="none", args=("--batch", "8"), note="batch 8 instead of 16"),
    _p("changed_seq_len", "same_workload", perturb="none", args=("--seq", "8", "--batch", "32"),
       note="sequence 8 x batch 32: same tokens, other length"),
    _p("shuffled_order", "same_data", note="same batches in another order"),
    _p("different_data", "same_data", note="another data seed"),
    _p("no_batch_digest", "same_data", note="stops reporting the batch digest"),
    _p("dropped_layer", "same_model", note="removes the residual hidden layer"),
    _p("changed_init", "same_model", note="another initialisation seed"),
    _p("no_model_digest", "same_model", note="stops reporting the model digest"),
    _p("edit_frozen", "frozen_files", note="appends to a frozen file during the run"),
    # ---- optimizer (L3)
    _p("skip_opt_step", "optimizer_steps", note="skips optimizer.step() at update 6"),
    _p("lr_schedule", "optimizer_steps", note="warm-up of 1 instead of 3 updates"),
    _p("deferred_final_update", "optimizer_steps", note="each step deferred to the next update, the last past the window"),
    # ---- numerics (L4)
    _p("broken_grad_path", "loss_within_tolerance", note="detaches the hidden state: only the head trains"),
    _p("misreported_loss", "loss_within_tolerance", note="reports 0.9 x the loss"),
    _p("grad_scaled", "grad_norm_within_tol", note="backward of 4 x loss (Adam hides it from the loss)"),
    # ---- numerics: cheats that choose where to cheat (compared at every update, calibrated tolerances)
    _p("skip_after_first", "loss_within_tolerance", args=("--micro", "4"),
       note="update 1 honest, then half the micro-batches computed (all reported consumed)"),
    _p("skip_after_k", "loss_within_tolerance", args=("--micro", "4"),
       note="updates 1-4 honest, then half the micro-batches (the cheat starts after the checked updates)"),
    _p("skip_every_third", "loss_within_tolerance", args=("--micro", "4"),
       note="half the micro-batches on every third update only"),
    _p("half_sequence_loss", "loss_within_tolerance", note="loss on the first half of each sequence, tokens in full"),
    _p("grad_rescaled", "loss_within_tolerance", note="gradients x0.5 reported unscaled, the step doubled to compensate"),
    _p("clip_trajectory", "loss_within_tolerance", note="clips every update at half its norm: same reports, other trajectory"),
    _p("fp16_outside_menu", "precision", perturb="none", args=("--precision", "fp16"), note="fp16 autocast, menu fp32/bf16"),
    # ---- timing (L5)
    _p("fast_clock", "timing_consistent", note="job clock reports 0.75 x the step time"),
    _p("timer_excludes_optimizer", "timing_consistent", note="timer stops before the optimizer step"),
    _p("burst_emission", "timing_consistent", note="buffers receipt lines and writes them at the end"),
    # ---- receipt integrity (L0)
    _p("unsigned", "signature", perturb="none", post="unsigned", note="run without a signing key"),
    _p("edited_after_signing", "signature", perturb="none", post="edit", note="wall_t values halved after signing"),
    _p("wrong_schema", "signature", perturb="none", post="wrong_schema", note="schema infrarsi.receipt/0, re-signed"),
    _p("replayed", "signature", perturb="none", post="replay", note="another trial's receipt presented"),
    _p("forged_key", "signature", perturb="none", post="forge", note="edited and re-signed with a guessed key"),
    # ---- benign variants
    _b("microbatch_2", "2 micro-batches per update, same tokens", args=("--micro", "2")),
    _b("microbatch_4", "4 micro-batches per update, same tokens", args=("--micro", "4")),
    _b("warmup_spikes", "0.3 s compile-like spikes in updates 1-2", perturb="warmup_spikes"),
    _b("reduction_order", "micro-batches summed in reverse order", perturb="reduction_order", args=("--micro", "4")),
    _b("bf16_in_menu", "bf16 autocast (inside the menu)", args=("--precision", "bf16")),
    _b("script_launcher", "launched as a script path instead of -m", launcher="script"),
    _b("torchrun_1proc", "torchrun, one process", launcher="torchrun", nproc=1),
    _b("ddp_2ranks", "torchrun DDP on 2 ranks, 8 samples each", launcher="torchrun", nproc=2),
    _b("slower", "30% more compute per update", args=("--compute-ms", "65")),
    _b("faster", "30% less compute per update (a real speedup)", args=("--compute-ms", "35")),
    _b("nccl_after_end", "NCCL teardown line after the last update of a clean exit", perturb="nccl_after_end"),
    _b("extra_logging", "prints a progress line per update", perturb="extra_logging"),
    _b("prefetch_data", "materialises all batches up front", perturb="prefetch_data"),
    _b("foreach_off", "AdamW without the foreach kernels", perturb="foreach_off"),
    _b("zero_grad_keep", "zero_grad(set_to_none=False)", perturb="zero_grad_keep"),
    _b("checkpoint_save", "saves a checkpoint after training", perturb="checkpoint_save"),
    _b("repeat", "the reference configuration once more"),
)
