"""Read-only inputs that are not in git: data directories and tokenizer files every trial sees at the same path.

A contract's ``inputs:`` names them (``controller/contract/model.py``, :class:`Input`): ``path`` relative to the
target repo (typically a git-ignored ``data/`` folder) or absolute (shared cluster storage), and ``at``, where the
trial sees it (relative to the job's working directory; default: ``path`` itself).  Nothing is copied:

* ``init`` (:func:`lock_inputs`) resolves each input, refuses what a job could use to reach out (a relative path
  that is, or lies under, a symlink leaving the repo; anything under ``.git`` or holding the repository's ``.git``;
  anything holding or inside the controller's home or scratch, where the signing key and the trials' ``out/`` live;
  a link inside the input that leads out of it; a FIFO, socket or device), refuses an ``at`` that would hide a
  frozen, editable or config-knob file, and -- with ``digest: lock``, the default -- writes a manifest of
  ``(relpath, size, mtime_ns, sha256, ctime_ns)`` (links: their target) into the campaign's workdir, hashed the way the exec
  wrapper hashes frozen files (:func:`infrarsi.verifier.exec.hash_file`: no link is followed, no special file read).
* before every launch (:func:`check_inputs`) the manifest is re-checked cheaply: one ``lstat`` per entry, and a full
  re-hash only of a file whose size, mtime or ctime moved (ctime cannot be set back by ``touch``, so content
  rewritten with its old size and mtime restored is still re-hashed).  A changed, missing or new file raises :class:`InputChanged`
  (one line naming the input and the file), which fails the campaign: trials measured on different data would not
  be comparable.
* the trial's source tree gets an empty mount point at ``at`` (:func:`make_mount_points`; committed files there are
  removed, so the trial sees exactly the input), and the exec wrapper binds the input over it read-only
  (``bwrap --ro-bind``: a write gets ``EROFS``).  With ``INFRARSI_ISOLATION=none`` there is no mount namespace: the
  wrapper replaces the mount point with a symlink to the input instead (no copy; nothing then stops a trusted,
  unsandboxed job from writing through it, but the next launch's check fails the campaign if it did).

Under Slurm the wrapper runs on the compute node, so an input must live on storage the compute nodes mount at the
same path (like the campaign's scratch); the wrapper refuses to start a job whose input it cannot see.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Any, Iterable

from infrarsi.controller.errors import ScopeError
from infrarsi.controller.store.stage_records import Scope

MANIFEST_DIR = "inputs"


class InputChanged(ScopeError):
    """A locked input differs from its manifest (or a manifest was tampered with); the campaign fails."""


def _rel_ok(rel: str) -> bool:
    p = Path(rel)
    return bool(rel) and not p.is_absolute() and ".." not in p.parts and ".git" not in p.parts and p.parts != ()


def _contains(outer: Path, inner: Path) -> bool:
    """Whether ``inner`` is ``outer`` or lies under it (both resolved)."""
    return inner == outer or outer in inner.parents


def _first_link(root: Path, rel: str) -> Path | None:
    """The first existing component of ``root/rel`` (below ``root``) that is a symlink, else None."""
    p = root
    for part in Path(rel).parts:
        p = p / part
        try:
            if stat.S_ISLNK(os.lstat(p).st_mode):
                return p
        except FileNotFoundError:
            return None
    return None


def resolve_input(repo: Path, inp: Any, forbidden: Iterable[Path] = ()) -> dict[str, Any]:
    """``{name, path, at, kind, digest}`` for one contract input: ``path`` resolved on this host, ``at`` the
    (normalised) place the trial sees it, ``kind`` ``dir`` or ``file``.  ScopeError (one line naming the input)
    for anything :mod:`this module <infrarsi.controller.campaign.inputs>` refuses."""
    repo = Path(repo)
    root = repo.resolve()
    name = inp.path
    raw = Path(inp.path)
    if raw.is_absolute():
        host = raw.resolve()
        at = inp.at if inp.at is not None else str(host)
    else:
        if not _rel_ok(inp.path):
            raise ScopeError(f"inputs: '{name}' leaves the repository or lies under .git (use an absolute path for "
                             f"shared storage)")
        host = (repo / raw).resolve()
        if not _contains(root, host):
            raise ScopeError(f"inputs: '{name}' points to {host}, outside the repository {root}: refusing a link "
                             f"that leads out (give the absolute path {host} instead)")
        at = inp.at if inp.at is not None else Path(inp.path).as_posix()
    if not os.path.lexists(host):
        raise ScopeError(f"inputs: '{name}' ({host}) does not exist")
    if ".git" in host.parts:
        raise ScopeError(f"inputs: '{name}' ({host}) lies under a .git directory")
    if (host / ".git").exists() or _contains(host, root):
        raise ScopeError(f"inputs: '{name}' ({host}) holds a git repository (the target repo's .git or another): "
                         f"name the data folder itself")
    for f in forbidden:
        fr = Path(f).resolve()
        if _contains(host, fr) or _contains(fr, host):
            raise ScopeError(f"inputs: '{name}' ({host}) overlaps infrarsi's own state {fr} (signing key, trial "
                             f"outputs): refusing to show it to a job")
    st = os.stat(host)
    if stat.S_ISDIR(st.st_mode):
        kind = "dir"
    elif stat.S_ISREG(st.st_mode):
        kind = "file"
    else:
        raise ScopeError(f"inputs: '{name}' ({host}) is neither a directory nor a regular file")
    if Path(at).is_absolute():
        if not raw.is_absolute():
            raise ScopeError(f"inputs: '{name}': at '{at}' must be relative to the job's working directory")
        at = str(Path(at))
    else:
        if not _rel_ok(at) or Path(at) == Path("."):
            raise ScopeError(f"inputs: '{name}': at '{at}' must be a path inside the job's working directory "
                             f"(no '..', not '.', not under .git)")
        at = Path(at).as_posix()
        link = _first_link(repo, at)
        if link is not None:
            raise ScopeError(f"inputs: '{name}': at '{at}' passes through the symlink {link}: a trial's mount "
                             f"point must not follow links")
    return {"name": name, "path": str(host), "at": at, "kind": kind, "digest": inp.digest}


def _walk(host: Path, kind: str, name: str) -> dict[str, tuple[str, int, int, int]]:
    """``{relpath: (type, size, mtime_ns, ctime_ns)}`` of everything in the input, read with ``lstat`` (type ``f`` or
    ``l``; directories are implied).  A file input is the single entry ``""``.  ScopeError for special files."""
    if kind == "file":
        st = os.lstat(host)
        return {"": ("f", st.st_size, st.st_mtime_ns, st.st_ctime_ns)}
    out: dict[str, tuple[str, int, int, int]] = {}
    for dirpath, dirnames, filenames in os.walk(host, followlinks=False):
        for n in sorted(dirnames + filenames):
            p = os.path.join(dirpath, n)
            st = os.lstat(p)
            rel = os.path.relpath(p, host)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("l", st.st_size, st.st_mtime_ns, st.st_ctime_ns)
            elif stat.S_ISREG(st.st_mode):
                out[rel] = ("f", st.st_size, st.st_mtime_ns, st.st_ctime_ns)
            elif not stat.S_ISDIR(st.st_mode):
                raise ScopeError(f"inputs: '{name}': {rel} is not a regular file, directory or link")
    return out


def _hash(host: Path, kind: str, rel: str) -> str:
    """SHA-256 of one regular file of an input, read without following links (the wrapper's frozen-file hash)."""
    from infrarsi.verifier.exec import hash_file

    digest, _ = hash_file(host.parent, host.name) if kind == "file" else hash_file(host, rel)
    return digest or "missing"


def _link_target(host: Path, rel: str, name: str) -> str:
    """The target text of the link ``host/rel``; ScopeError when it resolves outside the input."""
    p = host / rel
    target = os.readlink(p)
    if not _contains(host, Path(os.path.realpath(p))):
        raise ScopeError(f"inputs: '{name}': link {rel} points to {os.path.realpath(p)}, outside the input {host}")
    return target


def build_manifest(item: dict[str, Any]) -> dict[str, Any]:
    """The manifest of one resolved input: ``{"files": {rel: [size, mtime_ns, sha256, ctime_ns]}, "links": {rel:
    target}}``."""
    host, kind, name = Path(item["path"]), item["kind"], item["name"]
    files: dict[str, list[Any]] = {}
    links: dict[str, str] = {}
    for rel, (typ, size, mtime, ctime) in sorted(_walk(host, kind, name).items()):
        if typ == "l":
            links[rel] = _link_target(host, rel, name)
        else:
            files[rel] = [size, mtime, _hash(host, kind, rel), ctime]
    return {"files": files, "links": links}


def _manifest_sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def lock_inputs(repo: Path, contract: Any, workdir: Path, forbidden: Iterable[Path] = (),
                locked_files: Iterable[str] = ()) -> list[dict[str, Any]]:
    """Resolve and lock every ``contract.inputs`` entry; returns the scope's ``inputs`` list.

    Each item: ``{name, path, at, kind, digest, files, bytes, manifest, manifest_sha256}``; with ``digest: lock`` the
    manifest is written to ``workdir/inputs/<i>.json`` and its SHA-256 kept in the item (a manifest edited later is
    refused).  ``forbidden``: folders no input may overlap (the controller's home and scratch).
    ``locked_files``: repo-relative files trials must see from the commit (frozen, editable, config-knob files):
    an ``at`` that would hide one is refused.  ScopeError (one line) for any problem.
    """
    items: list[dict[str, Any]] = []
    locked = sorted(set(locked_files))
    for i, inp in enumerate(getattr(contract, "inputs", None) or []):
        item = resolve_input(repo, inp, forbidden)
        if not Path(item["at"]).is_absolute():
            hidden = [f for f in locked if f == item["at"] or f.startswith(item["at"].rstrip("/") + "/")]
            if hidden:
                raise ScopeError(f"inputs: '{item['name']}' at '{item['at']}' would hide {hidden[0]}, which trials "
                                 f"must take from the locked commit (frozen, editable or a config knob's file)")
        for other in items:
            a, b = Path(item["at"]), Path(other["at"])
            if a == b or a in b.parents or b in a.parents:
                raise ScopeError(f"inputs: '{item['name']}' at '{item['at']}' overlaps '{other['name']}' at "
                                 f"'{other['at']}'")
        if item["digest"] == "lock":
            man = build_manifest(item)
            text = json.dumps(man, sort_keys=True)
            mdir = Path(workdir) / MANIFEST_DIR
            mdir.mkdir(parents=True, exist_ok=True)
            mpath = mdir / f"{i}.json"
            mpath.write_text(text)
            item.update(files=len(man["files"]) + len(man["links"]),
                        bytes=sum(v[0] for v in man["files"].values()),
                        manifest=str(mpath), manifest_sha256=_manifest_sha(text))
        items.append(item)
    return items


#: (path, size, mtime_ns, ctime_ns, ino) -> sha256 of files re-hashed once already (a touched but unchanged file)
_REHASHED: dict[tuple[str, int, int, int, int], str] = {}


def _load_manifest(item: dict[str, Any]) -> dict[str, Any]:
    path = Path(item["manifest"])
    try:
        text = path.read_text()
    except OSError as exc:
        raise InputChanged(f"inputs: '{item['name']}': manifest {path} is unreadable ({exc.strerror})") from None
    if _manifest_sha(text) != item["manifest_sha256"]:
        raise InputChanged(f"inputs: '{item['name']}': manifest {path} was modified after init")
    return json.loads(text)


def check_input(item: dict[str, Any]) -> None:
    """Re-check one locked input against its manifest: ``lstat`` every entry, re-hash a file only when its size or
    mtime or ctime moved.  InputChanged naming the input and the first file that differs (changed, missing, new, link)."""
    if item.get("digest") != "lock":
        if not os.path.lexists(item["path"]):
            raise InputChanged(f"inputs: '{item['name']}': {item['path']} is gone")
        return
    host, kind, name = Path(item["path"]), item["kind"], item["name"]
    man = _load_manifest(item)
    where = f"inputs: '{name}'"
    try:
        now = _walk(host, kind, name)
    except FileNotFoundError:
        raise InputChanged(f"{where}: {host} is gone since init") from None
    except ScopeError as exc:
        raise InputChanged(str(exc)) from None
    files, links = man["files"], man["links"]
    for rel in sorted(set(files) | set(links)):
        if rel not in now:
            raise InputChanged(f"{where}: {rel or host.name} is missing since init")
    for rel, (typ, size, mtime, ctime) in sorted(now.items()):
        label = rel or host.name
        if typ == "l":
            if rel not in links or os.readlink(host / rel) != links[rel]:
                raise InputChanged(f"{where}: link {label} is new or points elsewhere since init")
            continue
        if rel not in files:
            raise InputChanged(f"{where}: {label} is new since init")
        lsize, lmtime, lsha, lctime = files[rel]
        if (size, mtime, ctime) == (lsize, lmtime, lctime):
            continue
        p = host if kind == "file" else host / rel
        ino = os.lstat(p).st_ino
        key = (str(p), size, mtime, ctime, ino)
        sha = _REHASHED.get(key) or _hash(host, kind, rel)
        if sha != lsha:
            raise InputChanged(f"{where}: {label} changed since init (sha256 {sha[:12]}, locked {lsha[:12]})")
        _REHASHED[key] = sha


def check_inputs(items: Iterable[dict[str, Any]] | None) -> None:
    """:func:`check_input` for every locked input (the per-launch check)."""
    for item in items or []:
        check_input(item)


def mount_points(workdir: Path, items: Iterable[dict[str, Any]] | None) -> list[tuple[str, str]]:
    """``[(host path, path inside the trial)]`` binds for the exec wrapper: relative ``at`` under ``workdir`` (the
    job's working directory in ``src/``), absolute ``at`` as written."""
    out = []
    for item in items or []:
        at = Path(item["at"])
        out.append((item["path"], str(at if at.is_absolute() else Path(workdir) / at)))
    return out


def make_mount_points(src: Path, workdir: Path, items: Iterable[dict[str, Any]] | None) -> None:
    """Create an empty mount point in the trial tree for every relative input (a directory, or an empty file for a
    file input), removing what the export put there.  ScopeError when a component of the path in the tree is a
    symlink (a crafted commit could aim the bind elsewhere)."""
    from infrarsi.controller.campaign.sourcetree import _force_rmtree

    src, workdir = Path(src), Path(workdir)
    for item in items or []:
        if Path(item["at"]).is_absolute():
            continue
        rel_to_src = (workdir / item["at"]).relative_to(src)
        link = _first_link(src, str(rel_to_src))
        if link is not None:
            raise ScopeError(f"inputs: '{item['name']}': {link.relative_to(src)} in the locked commit is a symlink: "
                             f"refusing to mount the input through it")
        dest = src / rel_to_src
        if os.path.lexists(dest):
            _force_rmtree(dest)
        if item["kind"] == "dir":
            dest.mkdir(parents=True)
        else:
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(b"")




def lock_scope_inputs(repo: Path, contract: Any, scope: Scope, workdir: Path, settings: Any) -> list[dict[str, Any]]:
    """:func:`lock_inputs` for ``init``: the files trials take from the commit are the scope's frozen and editable
    files plus every config knob's file; no input may overlap ``settings.home``, ``settings.scratch`` or the key."""
    from infrarsi.controller.contract.model import ConfigApply

    locked = [*scope.frozen, *scope.editable]
    locked += [app.file for k in contract.knobs if isinstance(app := k.applier(), ConfigApply)]
    forbidden = [p for p in (getattr(settings, "home", None), getattr(settings, "scratch", None),
                             getattr(settings, "key_file", None)) if p is not None]
    return lock_inputs(repo, contract, workdir, forbidden, locked)


__all__ = ["InputChanged", "build_manifest", "check_input", "check_inputs", "lock_inputs", "lock_scope_inputs",
           "make_mount_points", "mount_points", "resolve_input"]
