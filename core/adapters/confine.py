"""Confinement's facts: does bubblewrap really work here (probed once, cached), and which paths
a task's mounts cover (read from the common dir's admin dirs, no git process).

The probe runs bwrap as laneboard will (`--dev-bind / /` with a read-only bind mount over a
scratch directory) and checks that a write there fails and a write elsewhere works: a kernel or
AppArmor that refuses unprivileged user namespaces, or a bwrap that is not installed, is named
with its fix. The answer is cached in the state dir, keyed by the bwrap binary (path, size,
mtime), the kernel release and the user, so every lane command after the first pays only a file
read. Imports nothing heavy: it is on the path of every `laneboard exec`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

from laneboard.core.domain.confine import (
    CONFINED_ENV,
    Decision,
    Layout,
    Mode,
    Probe,
    bwrap_argv,
    decide,
)
from laneboard.core.domain.values import replace

FIX = {
    "uid map": "unprivileged user namespaces are refused (on Ubuntu 23.10+ by AppArmor: "
    "`sudo sysctl kernel.apparmor_restrict_unprivileged_userns=0`, or install an AppArmor "
    "profile for bwrap)",
    "No permissions to create new namespace": "the kernel refuses new user namespaces "
    "(`sudo sysctl kernel.unprivileged_userns_clone=1` or user.max_user_namespaces > 0)",
    "Operation not permitted": "the kernel refuses the namespaces bwrap needs "
    "(user.max_user_namespaces, or a container without them)",
}


GUARD = """#!/bin/sh
# laneboard: git inside a confined task. Commands that rewrite what every worktree shares are
# refused here with a clear line (most would fail on the read-only mounts anyway, but `prune`
# and `repack` only touch objects/, which a task may write).
refuse() {
    echo "laneboard: \\`git $1\\` is not run inside a confined task: it changes the repository" \\
        "every worktree shares; run it with \\`laneboard exec --root -- git $1\\`" >&2
    exit 1
}
check() {
    while [ $# -gt 0 ]; do
        case "$1" in
            -c|-C|--git-dir|--work-tree|--namespace|--config-env|--exec-path) shift; shift ;;
            -*) shift ;;
            *) break ;;
        esac
    done
    case "$1" in
        gc|prune|repack|maintenance|pack-refs|prune-packed) refuse "$1" ;;
        worktree) case "$2" in list|"") ;; *) refuse "worktree $2" ;; esac ;;
    esac
}
check "$@"
exec {git} "$@"
"""


def guard_dir(state: Path) -> Path | None:
    """The directory of laneboard's `git` guard (written, or rewritten when the real git moved),
    put first on a confined command's PATH; None when git is not installed."""
    from laneboard.core.adapters.process import find_command

    directory = state / "confine" / "bin"
    here = os.environ.get("PATH", "")
    path = os.pathsep.join(p for p in here.split(os.pathsep) if p and Path(p) != directory)
    real = find_command("git", path)
    if real is None:
        return None
    script = GUARD.replace("{git}", shlex.quote(real))
    guard = directory / "git"
    try:
        if guard.read_text() == script:
            return directory
    except OSError:
        pass
    try:
        directory.mkdir(parents=True, exist_ok=True)
        partial = directory / f".git.{os.getpid()}"
        partial.write_text(script)
        partial.chmod(0o755)
        os.replace(partial, guard)
    except OSError:  # read-only here (inside another task's confinement): use it as it is
        return directory if guard.exists() else None
    return directory


PROTECTED = ("cache", "confine", "hooks", "shims", "agents")
"""Parts of the state dir a confined command may read but not write (`Layout.protected`)."""
BWRAP_ENV = "LANEBOARD_BWRAP"
"""The bwrap to use (a path or a name on PATH); default `bwrap`."""


def _cache_file(state: Path) -> Path:
    return state / "cache" / "confine.json"


def _key(bwrap: str) -> str:
    info = os.stat(bwrap)
    return f"{bwrap}:{info.st_size}:{info.st_mtime_ns}:{os.uname().release}:{os.getuid()}"


def probe(state: Path) -> Probe:
    """Whether bwrap confines commands on this machine (cached; see the module)."""
    named = os.environ.get(BWRAP_ENV)
    bwrap = shutil.which(named or "bwrap")
    if bwrap is None:
        what = f"{named} (${BWRAP_ENV})" if named else "bwrap"
        return Probe(
            False, None, f"{what} is not installed (Debian/Ubuntu: apt install bubblewrap)"
        )
    key = _key(bwrap)
    cache = _cache_file(state)
    try:
        known = json.loads(cache.read_text())
        works = known["works"] if isinstance(known, dict) and known.get("key") == key else None
        if isinstance(works, bool):
            reason = known.get("reason")
            return Probe(works, bwrap, reason if isinstance(reason, str) else None)
    except (OSError, ValueError, KeyError):
        pass  # missing or damaged: probe again
    found = _try(bwrap)
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        partial = cache.with_name(f".confine.{os.getpid()}.json")
        partial.write_text(json.dumps({"key": key, "works": found.works, "reason": found.reason}))
        os.replace(partial, cache)
    except OSError:
        pass  # only a cache (read-only inside confinement): the probe simply runs again
    return found


def _try(bwrap: str) -> Probe:
    with tempfile.TemporaryDirectory(prefix="laneboard-probe-") as tmp:
        guarded, free = Path(tmp) / "guarded", Path(tmp) / "free"
        guarded.mkdir()
        free.mkdir()
        # The verdict is what the files show: a write under the read-only mount must not
        # land, one next to it must.
        script = f"touch {guarded}/x 2>/dev/null; touch {free}/x && env --default-signal=INT true"
        argv = [bwrap, "--dev-bind", "/", "/", "--ro-bind", str(guarded), str(guarded)]
        try:
            done = subprocess.run(
                [*argv, "--", "/bin/sh", "-c", script],
                capture_output=True,
                timeout=10,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as err:
            return Probe(False, bwrap, f"bwrap could not be run: {err}")
        if done.returncode == 0 and (free / "x").exists() and not (guarded / "x").exists():
            return Probe(True, bwrap)
        said = done.stderr.decode(errors="replace").strip().splitlines()
        line = said[-1] if said else f"exit {done.returncode}"
        fix = next((text for marker, text in FIX.items() if marker in line), None)
        if "default-signal" in line:
            fix = "`env --default-signal` is missing (coreutils 8.31 or newer is needed)"
        return Probe(
            False, bwrap, f"bwrap does not work here: {line}" + (f"; {fix}" if fix else "")
        )


def layout(root: Path, common_dir: Path, area: Path, worktree: Path, admin_name: str) -> Layout:
    """The paths of a task's mounts: every registered worktree is found from its admin dir's
    `gitdir` file (the path of that worktree's `.git`)."""
    common = os.path.realpath(common_dir)
    admin = os.path.join(common, "worktrees", admin_name)
    others: list[str] = []
    try:
        names = sorted(os.listdir(os.path.join(common, "worktrees")))
    except OSError:
        names = []
    for name in names:
        if name == admin_name:
            continue
        try:
            gitfile = Path(common, "worktrees", name, "gitdir").read_text().strip()
        except OSError:
            continue
        path = os.path.realpath(os.path.dirname(gitfile))
        if os.path.isdir(path):
            others.append(path)
    area_real = os.path.realpath(area)
    return Layout(
        root=os.path.realpath(root),
        common_dir=common,
        area=area_real if os.path.isdir(area_real) else os.path.realpath(root),
        worktree=os.path.realpath(worktree),
        admin_dir=admin,
        other_worktrees=tuple(others),
    )


def confined_argv(
    mode: str,
    state: Path,
    paths: Layout,
    task_id: str,
    argv: list[str],
    env: dict[str, str],
) -> tuple[list[str], Decision]:
    """`argv` as it runs under the repo's policy: wrapped in bwrap (and `env` told so) when
    confined; unchanged otherwise. A command already confined for this task (a lane command
    from its confined pane) runs as it is. `Decision.refused`: the caller must not run it."""
    if os.environ.get(CONFINED_ENV) == task_id and not os.access(paths.root, os.W_OK):
        # Already inside this task's confinement (a lane command from its pane): the variable
        # alone proves nothing, the read-only root does.
        return argv, Decision(True, "confined by its pane")
    found = probe(state) if mode != Mode.OFF.value else Probe(False)
    decision = decide(Mode(mode), found)
    if not decision.confined or found.bwrap is None:
        return argv, decision
    env[CONFINED_ENV] = task_id
    own_config = Path(paths.admin_dir) / "config.worktree"
    if not own_config.exists():
        with contextlib.suppress(OSError):  # empty: no setting; read-only once mounted
            own_config.touch()
    guards = guard_dir(state)
    if guards is not None:
        env["PATH"] = f"{guards}{os.pathsep}{env.get('PATH', os.defpath)}"
        if os.path.basename(argv[0]) == "git":
            argv = [str(guards / "git"), *argv[1:]]
    from laneboard.core.adapters.config import config_dir

    user = config_dir()
    if os.path.realpath(user) == os.path.realpath(state):
        user = user / "config.toml"  # next to the ledger: only the file, made if missing
        if not user.exists():
            with contextlib.suppress(OSError):
                user.touch()
    else:
        with contextlib.suppress(OSError):
            user.mkdir(parents=True, exist_ok=True)
    kept = [state / name for name in PROTECTED] + [user, own_config]
    protected = tuple(os.path.realpath(p) for p in kept if os.path.lexists(p))
    paths = replace(paths, protected=protected)
    return bwrap_argv(found.bwrap, paths, argv), decision
