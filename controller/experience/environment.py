"""The :class:`~.records.Environment` of a real campaign, from its contract and what the doctor measured.

Contract (every field "as best known"; unknown stays None so that retrieval's scope check never matches on it):

- ``gpu_sku``: ``INFRARSI_GPU_SKU`` (or the older ``INFRARSI_GPU_CLASS``) when set, else the receipt header's
  ``extra.gpu_sku``, else ``cpu`` for a contract without GPUs and ``gpu`` otherwise;
- ``gpu_mem_gib``: ``INFRARSI_GPU_MEM_GIB``, else the contract's ``memory_cap_gib``;
- ``gpus_per_node``/``nodes``: the contract's launch; ``interconnect``: ``INFRARSI_INTERCONNECT``, else ``none``
  for a single-process trial, else unknown (None: balance mechanisms then never count as covered);
- ``software``: the reference receipt's header ``versions`` (python, torch, cuda, nccl);
- ``framework``: ``workload.static.framework``, else ``torch`` when the receipt names a torch version;
- ``model_family``: ``workload.static.model_family``, else the header's ``extra.model_family``, else the contract
  name; ``params``: ``workload.static.params``, else ``extra.params``, else flops_per_token / 6;
- ``seq_len``: ``workload.seq_len``; ``parallel``: ``tp{T}-pp{P}-dp{D}`` from the reference values of the knobs
  whose mechanism is tensor_parallel / pipeline_parallel (1 when absent) and the world size;
- ``reference_state``: mechanism -> canonical value of every knob's reference (:func:`reference_state_of`).
"""

from __future__ import annotations

import os
from typing import Any, Mapping

from infrarsi.controller.experience.records import Environment


def knob_mechanisms(contract: Any) -> dict[str, tuple[str | None, dict[str, str]]]:
    """knob name -> (mechanism, {value_key: canonical}) for every knob of ``contract`` (a Contract model).

    The mechanism is :func:`.mechanisms.mechanism_for`: the catalog's (through the knob's ``mechanism`` field or
    its name), else the knob name itself as an uncatalogued mechanism, so a record of a knob the catalog does not
    know is still written and still meets the same-named knob of the next campaign of that contract."""
    from infrarsi.controller.experience.mechanisms import canonical_value, mechanism_for, value_key

    out: dict[str, tuple[str | None, dict[str, str]]] = {}
    for k in contract.knobs:
        cmap = getattr(k, "canonical", None)
        mech = mechanism_for(k.name, k.mechanism)
        out[k.name] = (mech, {value_key(v): canonical_value(mech, v, cmap) for v in k.values})
    return out


def canonical_config(contract: Any, config: Mapping[str, Any]) -> dict[str, str]:
    """mechanism -> canonical value for the knobs of ``config`` that map onto a mechanism."""
    from infrarsi.controller.experience.mechanisms import value_key

    out = {}
    for name, (mech, canon) in knob_mechanisms(contract).items():
        if mech and name in config:
            key = value_key(config[name])
            out[mech] = canon.get(key, key)
    return out


def reference_state_of(contract: Any) -> dict[str, str]:
    """mechanism -> canonical value of the contract's reference configuration."""
    return canonical_config(contract, {k.name: k.reference for k in contract.knobs})


def _num(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if f > 0 else None


def campaign_environment(contract: Any, header_extra: Mapping[str, Any] | None = None,
                         versions: Mapping[str, Any] | None = None) -> Environment:
    """The Environment of a campaign of ``contract`` (see the module docstring)."""
    extra = dict(header_extra or {})
    static = dict(contract.workload.static or {})
    launch = contract.launch
    sku = (os.environ.get("INFRARSI_GPU_SKU") or os.environ.get("INFRARSI_GPU_CLASS") or extra.get("gpu_sku")
           or ("cpu" if not launch.gpus_per_node else "gpu"))
    mem = _num(os.environ.get("INFRARSI_GPU_MEM_GIB")) or _num(contract.memory_cap_gib)
    software = {str(k): str(v) for k, v in (versions or {}).items() if k in ("python", "torch", "cuda", "nccl")}
    framework = static.get("framework") or ("torch" if "torch" in software or not versions else None)
    params = _num(static.get("params")) or _num(extra.get("params"))
    if params is None:
        fpt = _num(contract.workload.flops_per_token) or _num(extra.get("flops_per_token"))
        params = fpt / 6.0 if fpt else None
    ref = reference_state_of(contract)
    tp = int(_num(ref.get("tensor_parallel")) or 1)
    pp = int(_num(ref.get("pipeline_parallel")) or 1)
    world = max(1, launch.nodes * max(1, launch.gpus_per_node))
    return Environment(
        gpu_sku=str(sku), gpu_mem_gib=mem, peak_tflops=_num(os.environ.get("INFRARSI_PEAK_TFLOPS")),
        bandwidth_gbs=_num(os.environ.get("INFRARSI_BANDWIDTH_GBS")), gpus_per_node=int(launch.gpus_per_node),
        nodes=int(launch.nodes),
        interconnect=os.environ.get("INFRARSI_INTERCONNECT") or ("none" if world == 1 else None), software=software,
        framework=str(framework) if framework else None,
        model_family=str(static.get("model_family") or extra.get("model_family") or contract.name),
        params=params, seq_len=int(contract.workload.seq_len),
        parallel=f"tp{tp}-pp{pp}-dp{max(1, world // (tp * pp))}", reference_state=ref)


__all__ = ["knob_mechanisms", "canonical_config", "reference_state_of", "campaign_environment"]
