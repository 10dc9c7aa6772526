"""Experience packs: versioned JSON/YAML files that carry a bank's records between clusters (issue 13, item 4).

Format (version 1; JSON Schema ``pack.schema.json`` next to this module, described in docs/experience.md)::

    {"format": "infrarsi.experience-pack", "version": 1, "exported_at": "...", "source": "...",
     "environments": [{"digest": "<sha256>", "gpu_sku": "H20", ...}],
     "observations": [{"environment": "<digest>", "campaign": "...", "trial": "...", ...}],
     "effects": [{"environment": "<digest>", "mechanism": "...", "value": "...", "klass": "kernel", ...}]}

Contract of :func:`read_pack`: the whole file is checked before anything is returned, and the first problem is
raised as :class:`PackError` with one line ``<file>: <path>: <what is wrong>``: not JSON/YAML, not a mapping, a
wrong ``format`` or ``version``, a missing or unknown field, a wrong type or out-of-range number (NaN and
infinities included), an unknown mechanism class or evidence tier, a class that contradicts the catalog, an
environment whose digest does not match its fields, a record naming an environment the pack does not carry, a
bad timestamp.  :func:`import_pack` writes nothing unless the whole pack is valid, and writes idempotently (the
store's unique keys), so importing a pack twice adds nothing the second time.
"""

from __future__ import annotations

import io
import json
import math
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence

from infrarsi.controller.errors import InfrarsiError
from infrarsi.controller.experience.mechanisms import CATALOG
from infrarsi.controller.experience.records import Effect, Environment, Observation, requirement_tuples

FORMAT = "infrarsi.experience-pack"
VERSION = 1
SCHEMA_PATH = Path(__file__).with_name("pack.schema.json")
#: largest pack read (bytes)
MAX_PACK_BYTES = 256 * 1024 * 1024


class PackError(InfrarsiError):
    """A malformed experience pack (one line: file, path, problem)."""


@lru_cache(maxsize=1)
def schema() -> dict[str, Any]:
    """The JSON Schema of version-1 packs (shipped with the package)."""
    return json.loads(SCHEMA_PATH.read_text())


# ------------------------------------------------------------------------------------------------- export
def _time(t: datetime | None) -> str | None:
    return t.astimezone(timezone.utc).isoformat() if t is not None else None


def environment_doc(env: Environment) -> dict[str, Any]:
    return {"digest": env.digest(), **env.to_dict()}


def observation_doc(o: Observation) -> dict[str, Any]:
    return {"environment": o.environment, "campaign": o.campaign, "trial": o.trial, "config": dict(o.config),
            "canonical": dict(o.canonical), "patches": list(o.patches), "step_time_s": o.step_time_s,
            "peak_mem_gib": o.peak_mem_gib, "verdicts": dict(o.verdicts), "oom_shortfall_gib": o.oom_shortfall_gib,
            "conflicts": [[list(p) for p in c] for c in o.conflicts], "created_at": _time(o.created_at),
            # only when there are some: a pack without them stays readable by an infrarsi from before the field
            **({"requirements": [[list(p) for p in r] for r in o.requirements]} if o.requirements else {})}


def effect_doc(e: Effect) -> dict[str, Any]:
    return {"environment": e.environment, "mechanism": e.mechanism, "value": e.value, "klass": e.klass,
            "log_speedup": e.log_speedup, "noise_floor": e.noise_floor, "conditioning": dict(e.conditioning),
            "tier": e.tier, "campaign": e.campaign, "trial": e.trial, "knob": e.knob, "raw_value": e.raw_value,
            "mem_delta_gib": e.mem_delta_gib, "created_at": _time(e.created_at)}


def build_pack(environments: dict[str, Environment], observations: Sequence[Observation],
               effects: Sequence[Effect], source: str = "") -> dict[str, Any]:
    """A version-1 pack document of these records; only environments that a record references are included."""
    used = {o.environment for o in observations} | {e.environment for e in effects}
    return {"format": FORMAT, "version": VERSION, "exported_at": _time(datetime.now(timezone.utc)),
            "source": source[:200],
            "environments": [environment_doc(env) for d, env in environments.items() if d in used],
            "observations": [observation_doc(o) for o in observations],
            "effects": [effect_doc(e) for e in effects]}


def dump_pack(doc: dict[str, Any], fmt: str = "json") -> str:
    """The pack as JSON (default) or YAML text."""
    if fmt == "json":
        return json.dumps(doc, indent=1, sort_keys=False, allow_nan=False) + "\n"
    from ruamel.yaml import YAML

    buf = io.StringIO()
    yaml = YAML(typ="safe")
    yaml.default_flow_style = False
    yaml.dump(doc, buf)
    return buf.getvalue()


def export_pack(store: Any, *, mechanisms: Sequence[str] | None = None, gpu_sku: str | None = None,
                model_family: str | None = None, campaign: str | None = None, observations: bool = True,
                source: str = "") -> dict[str, Any]:
    """The pack of a store's records matching the filters (observations of the exported effects' campaigns, or of
    ``campaign``, unless ``observations`` is False)."""
    effects = store.effects(mechanisms=mechanisms, gpu_sku=gpu_sku, model_family=model_family, campaign=campaign)
    obs: list[Observation] = []
    if observations:
        camps = sorted({e.campaign for e in effects} | ({campaign} if campaign else set()))
        for camp in camps:
            obs += [o for o in store.experience_observations(campaign=camp)]
        envs_all = store.environments()
        if gpu_sku is not None or model_family is not None:
            obs = [o for o in obs if o.environment in envs_all
                   and (gpu_sku is None or envs_all[o.environment].gpu_sku == gpu_sku)
                   and (model_family is None or envs_all[o.environment].model_family == model_family)]
    envs = store.environments(sorted({e.environment for e in effects} | {o.environment for o in obs}))
    return build_pack(envs, obs, effects, source)


# ------------------------------------------------------------------------------------------------- import
def _where(path: Sequence[Any]) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(top level)"


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number a pack may hold")


def parse_pack_text(text: str, name: str = "pack") -> Any:
    """JSON, else YAML (safe); PackError when neither parses."""
    stripped = text.lstrip()
    if stripped.startswith("{") or stripped.startswith("["):
        try:
            return json.loads(text, parse_constant=_no_constant)
        except ValueError as exc:
            raise PackError(f"{name}: not valid JSON: {str(exc).splitlines()[0]}") from None
    try:
        from ruamel.yaml import YAML

        return _plain_times(YAML(typ="safe").load(io.StringIO(text)))
    except Exception as exc:  # noqa: BLE001 - any YAML error is a malformed pack
        raise PackError(f"{name}: not valid JSON or YAML: {str(exc).splitlines()[0] if str(exc) else exc}") from None


def _plain_times(doc: Any) -> Any:
    """YAML reads unquoted timestamps as datetimes: back to ISO strings, as in JSON."""
    if isinstance(doc, datetime):
        return doc.isoformat()
    if isinstance(doc, dict):
        return {k: _plain_times(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_plain_times(v) for v in doc]
    return doc


def _finite(doc: Any, path: list[Any]) -> None:
    if isinstance(doc, float) and not math.isfinite(doc):
        raise ValueError(f"{_where(path)}: {doc} is not a finite number")
    if isinstance(doc, dict):
        for k, v in doc.items():
            _finite(v, path + [k])
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            _finite(v, path + [i])


def _when(v: Any, where: str) -> datetime | None:
    if v is None:
        return None
    try:
        t = datetime.fromisoformat(str(v))
    except ValueError:
        raise ValueError(f"{where}: '{v}' is not an ISO 8601 time") from None
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


def validate_pack(doc: Any, name: str = "pack") -> tuple[dict[str, Environment], list[Observation], list[Effect]]:
    """Check a parsed pack completely; return its records or raise PackError (one line)."""
    import jsonschema

    if not isinstance(doc, dict):
        raise PackError(f"{name}: a pack is a mapping with format, version, environments, effects")
    if doc.get("format") != FORMAT:
        raise PackError(f"{name}: format: expected '{FORMAT}', got {doc.get('format')!r}")
    if doc.get("version") != VERSION:
        raise PackError(f"{name}: version {doc.get('version')!r} is not supported (this infrarsi reads version "
                        f"{VERSION})")
    try:
        _finite(doc, [])
    except ValueError as exc:
        raise PackError(f"{name}: {exc}") from None
    validator = jsonschema.Draft202012Validator(schema())
    errors = sorted(validator.iter_errors(doc), key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))))
    if errors:
        err = min(errors, key=lambda e: (list(map(str, e.absolute_path)), len(e.absolute_path)))
        msg = err.message if len(err.message) <= 200 else err.message[:197] + "..."
        if err.validator == "enum" and err.absolute_path and err.absolute_path[-1] == "klass":
            msg = f"unknown mechanism class {err.instance!r} (kernel or balance)"
        elif err.validator == "enum" and err.absolute_path and err.absolute_path[-1] == "tier":
            msg = (f"unknown evidence tier {err.instance!r} "
                   "(verified-rerun, verified-search, verified-model or legacy)")
        raise PackError(f"{name}: {_where(list(err.absolute_path))}: {msg}")
    try:
        envs: dict[str, Environment] = {}
        for i, raw in enumerate(doc.get("environments") or []):
            fields = {k: v for k, v in raw.items() if k != "digest"}
            env = Environment.from_dict(fields)
            if env.digest() != raw["digest"]:
                raise ValueError(f"environments[{i}].digest does not match its fields (expected {env.digest()[:12]}...)")
            envs[raw["digest"]] = env
        obs = []
        for i, raw in enumerate(doc.get("observations") or []):
            where = f"observations[{i}]"
            if raw["environment"] not in envs:
                raise ValueError(f"{where}.environment: no environment {raw['environment'][:12]}... in this pack")
            obs.append(Observation(
                environment=raw["environment"], campaign=raw["campaign"], trial=raw["trial"],
                config=dict(raw["config"]), canonical=dict(raw["canonical"]), patches=tuple(raw.get("patches") or ()),
                step_time_s=raw.get("step_time_s"), peak_mem_gib=raw.get("peak_mem_gib"),
                verdicts=dict(raw.get("verdicts") or {}), oom_shortfall_gib=raw.get("oom_shortfall_gib"),
                conflicts=tuple(tuple((str(a), str(b)) for a, b in c) for c in raw.get("conflicts") or ()),
                requirements=requirement_tuples(raw.get("requirements")),
                created_at=_when(raw.get("created_at"), f"{where}.created_at")))
        effects = []
        for i, raw in enumerate(doc.get("effects") or []):
            where = f"effects[{i}]"
            if raw["environment"] not in envs:
                raise ValueError(f"{where}.environment: no environment {raw['environment'][:12]}... in this pack")
            known = CATALOG.get(raw["mechanism"])
            if known is not None and known.klass != raw["klass"]:
                raise ValueError(f"{where}.klass: {raw['mechanism']} is {known.klass} in the catalog, not "
                                 f"{raw['klass']}")
            effects.append(Effect(
                environment=raw["environment"], mechanism=raw["mechanism"], value=raw["value"], klass=raw["klass"],
                log_speedup=float(raw["log_speedup"]), noise_floor=raw.get("noise_floor"),
                conditioning=dict(raw.get("conditioning") or {}), tier=raw["tier"], campaign=raw["campaign"],
                trial=raw["trial"], knob=raw.get("knob"), raw_value=raw.get("raw_value"),
                mem_delta_gib=raw.get("mem_delta_gib"), created_at=_when(raw.get("created_at"), f"{where}.created_at"),
                env=envs[raw["environment"]]))
    except (ValueError, TypeError) as exc:
        raise PackError(f"{name}: {exc}") from None
    return envs, obs, effects


def read_pack(path: str | Path) -> tuple[dict[str, Environment], list[Observation], list[Effect]]:
    """Read and validate a pack file (JSON or YAML)."""
    p = Path(path)
    try:
        if p.stat().st_size > MAX_PACK_BYTES:
            raise PackError(f"{p}: larger than {MAX_PACK_BYTES // 2**20} MiB")
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise PackError(f"{p}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise PackError(f"{p}: not UTF-8 text") from None
    return validate_pack(parse_pack_text(text, str(p)), str(p))


def import_pack(store: Any, path: str | Path) -> dict[str, int]:
    """Validate the whole pack, then store it idempotently; returns counts of new records.

    A pack exported before selective activation checkpointing had its own canonical value is re-keyed on the way
    in (:mod:`infrarsi.controller.experience.rekey`), as migration 0011 re-keys a database."""
    from infrarsi.controller.experience.rekey import rekey

    envs, obs, effects, _ = rekey(*read_pack(path))
    for env in envs.values():
        store.add_environment(env)
    n_obs = store.add_observations(obs) if obs else 0
    n_eff = store.add_effects(effects) if effects else 0
    return {"environments": len(envs), "observations": n_obs, "effects": n_eff}


__all__ = ["FORMAT", "VERSION", "SCHEMA_PATH", "PackError", "schema", "build_pack", "dump_pack", "export_pack",
           "parse_pack_text", "validate_pack", "read_pack", "import_pack"]
