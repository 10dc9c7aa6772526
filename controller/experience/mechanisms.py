"""The canonical mechanism catalog and the knob normalizer (issue 13, item 2).

A *mechanism* is what a knob changes in the training job, independent of how one repository spells the flag:
``--compile=1``, ``TORCH_COMPILE=true`` and ``use_compile: on`` are all :data:`CATALOG` ``["graph_compile"]`` with
canonical value ``"on"``.  Experience records are keyed by (mechanism, canonical value), so they move between
repositories whose flags have other names.

Each mechanism has a *class*:

- ``kernel``: the effect comes from the work one GPU does (a fused kernel, a precision, a batch shape); it tends to
  carry over between jobs of the same model family on other layouts.
- ``balance``: the effect trades compute against communication or memory (parallel degrees, bucket sizes,
  offload); it depends on the SKU, the fabric, the node count and the layout, and may flip sign between GPU
  generations.  A mechanism the catalog lacks is treated as ``balance`` (the conservative choice).

A kernel mechanism may also be *hardware-bound* (``Mechanism.hardware_bound``, :func:`hardware_bound`): FP8 GEMMs
and FP8 attention are kernels, but whether they help depends on how compute-bound the SKU is (the paper's H20 vs
H100/H200), so retrieval covers their records only on the same SKU and never carries their sign to another.

Priors are honest typical values, deliberately small with wide spreads: ``prior_log_speedup`` is the typical
ln(reference step time / step time) of the mechanism's usual non-default setting against the framework default
(``None`` where no single number is meaningful, e.g. ordered sizes); ``prior_spread`` is its standard deviation
across jobs; ``mem_gib`` a typical per-GPU memory delta in GiB when on (negative saves memory; ``None`` unknown).
They are starting points for a cold search only; any experience record or target observation overrides them.

Value canonicalisation (:func:`normalize`) applies, in order: the knob's own ``canonical`` map (contract field
``Knob.canonical``, landscape key ``"canonical"``), the mechanism's ``value_aliases``, then, for on/off mechanisms,
the common spellings of true and false.  Unmapped values are canonical as they are, in the string form of
:func:`value_key`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, Mapping

MechanismClass = Literal["kernel", "balance"]
CLASSES: tuple[str, ...] = ("kernel", "balance")

#: canonical values of an on/off mechanism
ON_OFF: tuple[str, ...] = ("off", "on")
_TRUE = {"1", "true", "on", "yes", "y", "enabled", "enable"}
_FALSE = {"0", "false", "off", "no", "n", "disabled", "disable", "none", "null"}


@dataclass(frozen=True)
class Mechanism:
    """One catalog entry (immutable).

    ``aliases`` are common flag/knob/env names for it (lower-case, ``-`` spelled ``_``); every alias is unique
    across the catalog.  ``canonical_values`` lists the canonical spellings when the value set is closed (``None``
    for open sets such as sizes).  ``value_aliases`` maps other spellings of a value (lower-case strings) to a
    canonical value.
    """

    name: str
    klass: MechanismClass
    description: str
    aliases: tuple[str, ...] = ()
    prior_log_speedup: float | None = None
    prior_spread: float | None = None
    mem_gib: float | None = None
    canonical_values: tuple[str, ...] | None = None
    value_aliases: tuple[tuple[str, str], ...] = field(default=())
    hardware_bound: bool = False

    @property
    def on_off(self) -> bool:
        """True when the mechanism is a switch: its canonical values include ``off`` and ``on`` (activation
        checkpointing also has ``selective``, a third state that is neither)."""
        return self.canonical_values is not None and set(ON_OFF) <= set(self.canonical_values)


def _m(name: str, klass: MechanismClass, description: str, aliases: tuple[str, ...] = (),
       prior: float | None = None, spread: float | None = None, mem: float | None = None,
       values: tuple[str, ...] | None = None, value_aliases: Mapping[str, str] | None = None,
       hardware_bound: bool = False) -> Mechanism:
    return Mechanism(name, klass, description, aliases, prior, spread, mem, values,
                     tuple(sorted((value_aliases or {}).items())), hardware_bound)


_PRECISION = {"float32": "fp32", "32": "fp32", "full": "fp32", "amp-bf16": "bf16", "bfloat16": "bf16",
              "amp_bf16": "bf16", "bf16-mixed": "bf16", "float16": "fp16", "half": "fp16", "amp-fp16": "fp16",
              "amp_fp16": "fp16", "16-mixed": "fp16", "16": "fp16"}

_ENTRIES: tuple[Mechanism, ...] = (
    # ---------------------------------------------------------------- kernel: precision and compilation
    _m("low_precision_gemm", "kernel", "FP8 (or lower) GEMMs with scaling, e.g. Transformer Engine fp8_autocast; "
       "helps when compute-bound, can hurt on small or bandwidth-bound shapes",
       ("fp8", "use_fp8", "fp8_gemm", "fp8_training", "transformer_engine_fp8", "fp8_recipe"),
       0.05, 0.25, -0.5, ("off", "on"), hardware_bound=True),
    _m("mixed_precision", "kernel", "parameters/activations computed in bf16 or fp16 instead of fp32 (autocast or "
       "cast model)", ("dtype", "precision", "amp", "use_amp", "autocast", "mixed_precision_dtype"),
       0.3, 0.4, -1.0, ("fp32", "bf16", "fp16"), _PRECISION),
    _m("tf32", "kernel", "TF32 tensor-core matmuls for fp32 tensors (Ampere and later; no effect on the CPU)",
       ("allow_tf32", "use_tf32", "matmul_tf32", "matmul_precision"), 0.1, 0.2, 0.0, ("off", "on"),
       {"highest": "off", "high": "on", "medium": "on"}),
    _m("graph_compile", "kernel", "graph capture and kernel fusion by a compiler (torch.compile, XLA, jit)",
       ("compile", "torch_compile", "use_compile", "compile_model", "jit", "use_jit"), 0.1, 0.2, None,
       ("off", "on"), {"default": "on", "reduce-overhead": "on", "max-autotune": "on"}),
    _m("cuda_graphs", "kernel", "capture the step in CUDA graphs to remove launch overhead",
       ("cuda_graph", "use_cuda_graphs", "enable_cuda_graph", "cudagraphs", "external_cuda_graph"),
       0.03, 0.1, 0.5, ("off", "on")),
    _m("cudnn_benchmark", "kernel", "cuDNN autotuner picks convolution/attention algorithms per shape",
       ("cudnn_benchmark", "torch_cudnn_benchmark", "benchmark_cudnn"), 0.01, 0.05, None, ("off", "on")),
    _m("memory_allocator", "kernel", "caching-allocator configuration (expandable segments, garbage threshold)",
       ("expandable_segments", "pytorch_cuda_alloc_conf", "alloc_conf", "allocator"), 0.0, 0.05, -0.5),
    # ---------------------------------------------------------------- kernel: fused kernels
    _m("attention_kernel", "kernel", "attention implementation: naive matmul-softmax, SDPA, FlashAttention, ...",
       ("attention", "attn_impl", "attn_implementation", "attention_impl", "attention_backend", "flash_attention",
        "use_flash_attn", "use_flash_attention", "sdpa"), 0.15, 0.25, -1.0, ("naive", "sdpa", "flash"),
       {"eager": "naive", "math": "naive", "vanilla": "naive", "torch": "sdpa", "flash_attention_2": "flash",
        "flash2": "flash", "flash_attn": "flash", "fa2": "flash", "fa3": "flash"}),
    _m("low_precision_attention", "kernel", "attention computed in FP8", ("fp8_attention", "fp8_dot_product_attention",
       "fp8_mha"), 0.03, 0.15, -0.3, ("off", "on"), hardware_bound=True),
    _m("optimizer_fusion", "kernel", "optimizer step as one fused/multi-tensor kernel instead of a per-parameter loop",
       ("optimizer_impl", "fused_optimizer", "fused_adam", "use_fused_adam", "optim_impl", "foreach", "adam_impl"),
       0.05, 0.1, 0.0, ("loop", "foreach", "fused"),
       {"for-loop": "loop", "forloop": "loop", "naive": "loop", "multi_tensor": "foreach", "apex": "fused"}),
    _m("grad_clip_foreach", "kernel", "gradient-norm clipping with multi-tensor kernels", ("clip_grad_foreach",
       "foreach_clip", "fused_grad_clip"), 0.01, 0.03, 0.0, ("off", "on")),
    _m("zero_grad_set_to_none", "kernel", "zero_grad frees gradients (set_to_none) instead of writing zeros",
       ("set_to_none", "zero_grad_none", "zero_grad_set_none"), 0.005, 0.02, -0.1, ("off", "on")),
    _m("fused_cross_entropy", "kernel", "loss and log-softmax in one kernel that never materialises full logits "
       "gradients (e.g. Liger, Apex xentropy)", ("fused_ce", "fused_cross_entropy_loss", "liger_cross_entropy",
       "cross_entropy_fusion", "cross_entropy_loss_fusion"), 0.03, 0.08, -1.0, ("off", "on")),
    _m("loss_chunking", "kernel", "output projection and loss computed over sequence chunks (chunked logits)",
       ("chunked_loss", "chunked_cross_entropy", "logits_chunking", "loss_chunks"), 0.0, 0.05, -1.0),
    _m("fused_layernorm", "kernel", "LayerNorm forward/backward as one fused kernel", ("fused_ln", "apex_layernorm",
       "layernorm_kernel", "use_fused_layernorm"), 0.02, 0.05, -0.1, ("off", "on")),
    _m("fused_rmsnorm", "kernel", "RMSNorm forward/backward as one fused kernel", ("rmsnorm_kernel", "fused_rms_norm",
       "use_fused_rmsnorm", "liger_rmsnorm"), 0.02, 0.05, -0.1, ("off", "on")),
    _m("rope_kernel", "kernel", "rotary position embedding applied by a fused kernel", ("fused_rope", "rope_fusion",
       "apply_rope_fusion", "rotary_kernel", "liger_rope"), 0.01, 0.03, 0.0, ("off", "on")),
    _m("fused_bias_activation", "kernel", "bias add and GeLU/SwiGLU activation fused", ("bias_gelu_fusion",
       "bias_swiglu_fusion", "fused_gelu", "fused_swiglu", "swiglu_kernel", "bias_activation_fusion"),
       0.02, 0.05, -0.2, ("off", "on")),
    _m("fused_bias_dropout", "kernel", "bias add, dropout and residual add fused", ("bias_dropout_fusion",
       "fused_dropout_add", "bias_dropout_add_fusion"), 0.01, 0.03, -0.1, ("off", "on")),
    _m("fused_softmax", "kernel", "scale, mask and softmax fused (for non-flash attention)", ("masked_softmax_fusion",
       "softmax_fusion", "scaled_masked_softmax"), 0.02, 0.05, -0.1, ("off", "on")),
    _m("fused_qkv", "kernel", "Q, K and V projections as one GEMM", ("qkv_fusion", "fuse_qkv", "packed_qkv"),
       0.01, 0.03, 0.0, ("off", "on")),
    _m("grouped_gemm", "kernel", "MoE experts computed by one grouped GEMM instead of a loop of GEMMs",
       ("moe_grouped_gemm", "use_grouped_gemm", "grouped_mlp"), 0.05, 0.15, 0.0, ("off", "on")),
    # ---------------------------------------------------------------- kernel: batch shape and memory for time
    _m("activation_checkpointing", "kernel", "recompute activations in backward instead of storing them (on costs "
       "about one extra forward, saves activation memory)", ("grad_checkpointing", "gradient_checkpointing",
       "recompute", "recompute_activations", "recompute_granularity", "checkpoint_activations", "ac"),
       -0.2, 0.15, -2.0, ("off", "selective", "on"), {"full": "on", "block": "on"}),
    _m("micro_batch", "kernel", "sequences per forward/backward (per GPU); larger fills the GPU better until memory "
       "runs out", ("micro_batch_size", "mbs", "per_device_train_batch_size", "batch_size_per_gpu",
       "train_micro_batch_size_per_gpu", "micro_bs")),
    _m("grad_accum", "kernel", "micro-batches accumulated per optimizer update (usually derived from micro_batch)",
       ("gradient_accumulation_steps", "gas", "grad_accumulation", "accum_steps", "grad_accum_steps",
        "accumulate_grad_batches", "gradient_accumulation")),
    _m("sequence_packing", "kernel", "several documents packed into one sequence to avoid padding",
       ("packing", "pack_sequences", "sample_packing", "packed_sequences"), 0.1, 0.3, 0.0, ("off", "on")),
    # ---------------------------------------------------------------- kernel: input pipeline
    _m("dataloader_workers", "kernel", "data-loader worker processes", ("num_workers", "dataloader_num_workers",
       "data_workers", "loader_workers")),
    _m("dataloader_prefetch", "kernel", "batches prefetched per data-loader worker", ("prefetch_factor",
       "dataloader_prefetch_factor")),
    _m("pin_memory", "kernel", "page-locked host buffers for host-to-device copies", ("dataloader_pin_memory",
       "pin_mem", "use_pin_memory"), 0.01, 0.03, 0.0, ("off", "on")),
    _m("non_blocking_copy", "kernel", "asynchronous host-to-device copies (non_blocking=True)", ("non_blocking",
       "async_h2d", "non_blocking_transfer"), 0.005, 0.02, 0.0, ("off", "on")),
    # ---------------------------------------------------------------- balance: parallel layout
    _m("tensor_parallel", "balance", "tensor-parallel degree (layers split across GPUs; all-reduce per layer)",
       ("tp", "tp_size", "tensor_parallel_size", "tensor_model_parallel_size", "tp_degree")),
    _m("pipeline_parallel", "balance", "pipeline-parallel degree (layers split into stages; bubble overhead)",
       ("pp", "pp_size", "pipeline_parallel_size", "pipeline_model_parallel_size", "pp_degree")),
    _m("virtual_pipeline", "balance", "interleaved (virtual) pipeline stages per GPU",
       ("virtual_pipeline_model_parallel_size", "vpp", "num_layers_per_virtual_pipeline_stage", "interleave")),
    _m("sequence_parallel", "balance", "norm/dropout activations split along the sequence across the TP group",
       ("sp", "use_sequence_parallel", "sequence_parallelism"), 0.02, 0.08, -1.0, ("off", "on")),
    _m("context_parallel", "balance", "context-parallel degree (attention split along the sequence)",
       ("cp", "cp_size", "context_parallel_size", "context_parallel_degree")),
    _m("expert_parallel", "balance", "expert-parallel degree for MoE layers", ("ep", "ep_size",
       "expert_model_parallel_size", "expert_parallel_size")),
    _m("moe_dispatcher", "balance", "MoE token dispatcher (all-to-all, all-gather, DeepEP, ...)",
       ("moe_token_dispatcher_type", "token_dispatcher", "moe_dispatcher_type")),
    _m("zero_stage", "balance", "optimizer/gradient/parameter sharding stage (ZeRO 0-3, FSDP strategy)",
       ("zero", "zero_optimization_stage", "zero_opt_stage", "fsdp_sharding_strategy", "sharding_strategy"),
       None, None, None, ("0", "1", "2", "3"),
       {"no_shard": "0", "shard_grad_op": "2", "full_shard": "3", "hybrid_shard": "3"}),
    _m("distributed_optimizer", "balance", "optimizer state sharded across data-parallel ranks (Megatron)",
       ("use_distributed_optimizer", "dist_optimizer"), 0.0, 0.1, -2.0, ("off", "on")),
    _m("fsdp_prefetch", "balance", "FSDP forward/backward parameter prefetch", ("forward_prefetch", "backward_prefetch",
       "limit_all_gathers")),
    # ---------------------------------------------------------------- balance: communication
    _m("grad_bucket", "balance", "gradient bucket size for data-parallel all-reduce (MiB)", ("bucket_cap_mb",
       "ddp_bucket_cap_mb", "grad_bucket_mb", "bucket_size", "reduce_bucket_size", "allreduce_bucket_size")),
    _m("comm_overlap", "balance", "gradient reduce / parameter gather overlapped with compute",
       ("overlap_grad_reduce", "overlap_comm", "overlap_param_gather", "ddp_overlap", "overlap_communication"),
       0.05, 0.15, 0.5, ("off", "on")),
    _m("tp_comm_overlap", "balance", "tensor-parallel communication overlapped with GEMMs (userbuffers)",
       ("tp_overlap", "ub_tp_comm_overlap"), 0.03, 0.15, 0.5, ("off", "on")),
    _m("grad_reduce_dtype", "balance", "precision of gradient reduction (fp32 vs bf16)", ("grad_reduce_in_fp32",
       "reduce_dtype", "allreduce_dtype", "grad_reduce_in_bf16"), None, None, None, None, _PRECISION),
    _m("nccl_algo", "balance", "NCCL collective algorithm (ring, tree, NVLS, ...)", ("nccl_algorithm",
       "nccl_algos"), None, None, None, None, {"default": "auto"}),
    _m("nccl_protocol", "balance", "NCCL protocol (LL, LL128, Simple)", ("nccl_proto",)),
    _m("nccl_channels", "balance", "NCCL channels per collective", ("nccl_min_nchannels", "nccl_max_nchannels",
       "nccl_nchannels")),
    _m("hierarchical_allreduce", "balance", "two-level (intra-node then inter-node) all-reduce",
       ("hierarchical_all_reduce", "two_level_allreduce"), 0.0, 0.1, 0.0, ("off", "on")),
    # ---------------------------------------------------------------- balance: offload
    _m("cpu_offload", "balance", "optimizer state or parameters offloaded to host memory (trades PCIe for GiB)",
       ("offload_optimizer", "optimizer_offload", "offload_param", "fsdp_cpu_offload", "offload"),
       -0.3, 0.3, -4.0, ("off", "on")),
    _m("activation_offload", "balance", "activations offloaded to host memory between forward and backward",
       ("offload_activations", "cpu_offload_activations"), -0.2, 0.2, -2.0, ("off", "on")),
)

#: every mechanism by canonical name (read-only)
CATALOG: Mapping[str, Mechanism] = MappingProxyType({m.name: m for m in _ENTRIES})


def _key(name: str) -> str:
    return name.strip().lower().replace("-", "_").lstrip("_")


def _alias_index() -> dict[str, str]:
    out: dict[str, str] = {}
    for m in _ENTRIES:
        for a in (m.name, *m.aliases):
            k = _key(a)
            if k in out and out[k] != m.name:
                raise RuntimeError(f"mechanism alias {a!r} names both {out[k]} and {m.name}")
            out[k] = m.name
    return out


_ALIASES: Mapping[str, str] = MappingProxyType(_alias_index())


def resolve(name: str | None) -> str | None:
    """The catalog name for ``name`` (a mechanism name or alias, any case, ``-`` or ``_``), or None if unknown."""
    if not name:
        return None
    k = _key(name)
    if k in _ALIASES:
        return _ALIASES[k]
    # flag spellings: --use-flash-attn, TORCH_COMPILE, optimizer.fused
    for cand in (k.split("=")[0], k.rsplit(".", 1)[-1]):
        if cand in _ALIASES:
            return _ALIASES[cand]
    return None


def mechanism_class(name: str | None) -> MechanismClass:
    """``kernel`` or ``balance`` for a mechanism name (or alias); unknown names are ``balance`` (conservative)."""
    c = resolve(name)
    return CATALOG[c].klass if c is not None else "balance"


def hardware_bound(name: str | None) -> bool:
    """True for a kernel mechanism whose effect's *sign* depends on the GPU's compute/bandwidth balance (FP8
    GEMMs and attention: they help on a compute-bound SKU and can hurt on a faster one); retrieval treats its
    records like a balance mechanism's across SKUs.  Balance and unknown mechanisms are not flagged (they are
    bound to the whole environment anyway)."""
    c = resolve(name)
    return bool(c is not None and CATALOG[c].hardware_bound)


def value_key(value: Any) -> str:
    """The string form of a knob value used as a canonical-map key and as an uncanonicalised canonical value:
    booleans ``true``/``false``, None ``null``, integral floats as integers (``2.0`` -> ``2``), other scalars
    ``str()``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def canonical_value(mechanism: str | None, value: Any, canonical_map: Mapping[Any, Any] | None = None) -> str:
    """The canonical string for ``value`` of a knob of ``mechanism`` (see the module docstring for the order)."""
    raw = value_key(value)
    v = raw
    if canonical_map:
        cmap = {value_key(k) if not isinstance(k, str) else k: value_key(c) for k, c in canonical_map.items()}
        if raw in cmap:
            v = cmap[raw]
        elif str(value) in cmap:
            v = cmap[str(value)]
    m = CATALOG.get(mechanism or "")
    if m is None:
        return v
    low = v.strip().lower()
    aliases = dict(m.value_aliases)
    if low in aliases:
        return aliases[low]
    if m.canonical_values is not None and low in m.canonical_values:
        return low
    if m.on_off:
        if low in _TRUE:
            return "on"
        if low in _FALSE:
            return "off"
    return v


def normalize(knob_name: str, mechanism_field: str | None, value: Any,
              canonical_map: Mapping[Any, Any] | None = None) -> tuple[str | None, str]:
    """Map one knob setting onto (mechanism name, canonical value).

    The mechanism is the knob's ``mechanism`` field resolved through the catalog (name or alias); a field the
    catalog lacks is kept as written (lower-cased), so knobs sharing that name still share records (class
    ``balance``); a field that names profiled phases (``optimizer+backward``) or is absent falls back to the knob
    name resolved through the aliases; None when nothing matches (the record does not transfer).  The value goes
    through :func:`canonical_value`.
    """
    mech = resolve(mechanism_field)
    if mech is None and mechanism_field and "+" not in mechanism_field and _key(mechanism_field) not in PHASE_NAMES:
        mech = _key(mechanism_field)
    if mech is None:
        mech = resolve(knob_name)
    return mech, canonical_value(mech, value, canonical_map)


def mechanism_for(knob_name: str, mechanism_field: str | None) -> str:
    """The mechanism an experience record of this knob is filed under: :func:`normalize`'s mechanism, else the knob
    name itself (lower-case, ``_``) as an uncatalogued mechanism (class ``balance``), so no record is dropped and
    same-named knobs of contracts without a mechanism still share records."""
    mech, _ = normalize(knob_name, mechanism_field, None)
    return mech if mech is not None else _key(knob_name)


#: profiled phase names that a knob's ``mechanism`` field may name for the phase-headroom ceiling
#: (search/controller.py); they say where time goes, not which mechanism, so they never key experience
PHASE_NAMES: frozenset[str] = frozenset({"forward", "backward", "optimizer", "dataloader", "data", "collectives",
                                         "comm", "communication", "attention", "loss", "step", "other", "io"})
