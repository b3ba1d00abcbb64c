"""Confinement's facts: does bubblewrap really work here (probed once, cached), which paths a
sandbox's mounts cover (read from the ledger and the common dirs' admin dirs, no git process),
what must exist before the mounts are made, and what the sandbox cannot hold (its named gaps).

The probe runs bwrap as laneboard will (its own PID namespace, `/proc`, `/dev` and `/tmp`, a
read-only bind mount over a scratch directory, the seccomp filter) and checks that a write
there fails and a write elsewhere works: a kernel or AppArmor that refuses unprivileged user
namespaces, or a bwrap that is not installed, is named with its fix. The answer is cached in
the state dir, keyed by the bwrap binary (path, size, mtime), the kernel release and the user,
so every lane command after the first pays only a file read. Imports nothing heavy: it is on
the path of every `laneboard exec`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from laneboard.core.adapters.db import Database, from_db
from laneboard.core.domain.confine import (
    CHANNEL_DIR,
    CHANNEL_ENV,
    CHANNEL_SOCKET,
    CONFINED_ENV,
    Decision,
    Layout,
    Mode,
    Probe,
    bwrap_argv,
    decide,
    no_maintenance,
    seccomp_filter,
)
from laneboard.core.domain.identity import TOKEN_FILE

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
# refused here with a clear line (the read-only mounts stop them anyway; this says why).
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
    directory.mkdir(parents=True, exist_ok=True)
    partial = directory / f".git.{os.getpid()}"
    partial.write_text(script)
    partial.chmod(0o755)
    os.replace(partial, guard)
    return directory


BWRAP_ENV = "LANEBOARD_BWRAP"
"""The bwrap to use (a path or a name on PATH); default `bwrap`."""
KEEP = ".laneboard-keep"
"""A file in each of a task's ref directories: git removes a ref directory it empties (a
`pack-refs` outside, the task deleting its last branch), and a directory removed while it is
mounted in a sandbox would take the task's later ref updates with it. A name git never reads
as a ref (it starts with a dot), mounted read-only inside."""


def _cache_file(state: Path) -> Path:
    return state / "cache" / "confine.json"


def _key(bwrap: str) -> str:
    info = os.stat(bwrap)
    return f"{bwrap}:{info.st_size}:{info.st_mtime_ns}:{os.uname().release}:{os.getuid()}:2"


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
    with contextlib.suppress(OSError):  # only a cache: the probe simply runs again
        cache.parent.mkdir(parents=True, exist_ok=True)
        partial = cache.with_name(f".confine.{os.getpid()}.json")
        partial.write_text(json.dumps({"key": key, "works": found.works, "reason": found.reason}))
        os.replace(partial, cache)
    return found


def _try(bwrap: str) -> Probe:
    with tempfile.TemporaryDirectory(prefix="laneboard-probe-") as tmp:
        guarded, free = Path(tmp) / "guarded", Path(tmp) / "free"
        guarded.mkdir()
        free.mkdir()
        # The verdict is what the files show: a write under the read-only mount must not
        # land, one next to it must, with every namespace and mount a sandbox uses.
        script = f"touch {guarded}/x 2>/dev/null; touch {free}/x && env --default-signal=INT true"
        layout = Layout(worktree=str(free), admin_dir=str(free), repos=(str(guarded),))
        argv = bwrap_argv(bwrap, layout, ["/bin/sh", "-c", script])
        with seccomp_fd() as fd:
            if fd is not None:
                argv = bwrap_argv(bwrap, layout, ["/bin/sh", "-c", script], seccomp_fd=fd)
            try:
                done = subprocess.run(
                    argv,
                    capture_output=True,
                    timeout=10,
                    check=False,
                    pass_fds=() if fd is None else (fd,),
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


@contextlib.contextmanager
def seccomp_fd() -> Iterator[int | None]:
    """An inheritable descriptor holding the seccomp program for this machine (None when there
    is no program for it: `gaps` names that)."""
    program = seccomp_filter(os.uname().machine)
    if program is None:
        yield None
        return
    fd = os.memfd_create("laneboard-seccomp", 0)  # no MFD_CLOEXEC: bwrap inherits it
    try:
        os.write(fd, program)
        os.lseek(fd, 0, os.SEEK_SET)
        yield fd
    finally:
        os.close(fd)


# --- the paths of one sandbox ---------------------------------------------------------------


def repo_trees(db: Database) -> list[str]:
    """Every registered repository's trees that exist: its root, its common dir, each worktree
    area its tasks used, and every worktree its common dir lists (found from each admin dir's
    `gitdir`, no git process). Outermost first, no tree inside another."""
    found: list[str] = []
    for row in db.conn.execute("SELECT id, root, common_dir FROM repos ORDER BY id"):
        common = from_db(row["common_dir"]) or ""
        found += [from_db(row["root"]) or "", common]
        areas = db.conn.execute(
            "SELECT DISTINCT area FROM tasks WHERE repo_id = ? AND area IS NOT NULL", (row["id"],)
        )
        found += [from_db(area[0]) or "" for area in areas]
        found += _worktrees(common)
    return outermost(os.path.realpath(p) for p in found if p and os.path.isdir(p))


def _worktrees(common: str) -> list[str]:
    try:
        names = os.listdir(os.path.join(common, "worktrees"))
    except OSError:
        return []
    found = []
    for name in names:
        try:
            gitfile = os.fsdecode(Path(common, "worktrees", name, "gitdir").read_bytes().strip())
        except OSError:
            continue
        found.append(os.path.dirname(gitfile))
    return found


def outermost(paths: Iterable[str]) -> list[str]:
    """`paths` without those inside another of them, shortest first."""
    kept: list[str] = []
    for path in sorted(set(paths), key=len):
        if not any(path == k or path.startswith(k.rstrip(os.sep) + os.sep) for k in kept):
            kept.append(path)
    return kept


def _under_tmp(path: str) -> bool:
    return path == "/tmp" or path.startswith("/tmp/")


def runners() -> tuple[list[str], list[str]]:
    """Where command runners of the user listen: directories to mask, and single sockets to
    mask. tmux's socket directory
    (`$TMUX_TMPDIR/tmux-<uid>`), the session bus and service manager's runtime dir
    (`$XDG_RUNTIME_DIR`, `/run/user/<uid>`), `screen`'s directory, and a tmux socket named by
    path (`$TMUX`, `LANEBOARD_TMUX_SOCKET`) that lies elsewhere."""
    uid = os.getuid()
    directories = [
        os.path.join(os.environ.get("TMUX_TMPDIR") or "/tmp", f"tmux-{uid}"),
        os.environ.get("XDG_RUNTIME_DIR") or f"/run/user/{uid}",
        f"/run/user/{uid}",
        "/run/screen",
        "/var/run/screen",
    ]
    sockets = [
        os.environ.get("TMUX", "").split(",")[0],
        os.environ.get("LANEBOARD_TMUX_SOCKET", "")
        if "/" in os.environ.get("LANEBOARD_TMUX_SOCKET", "")
        else "",
    ]
    # Masked wherever they are, /tmp included: what lies under a path the sandbox keeps (a home
    # under /tmp) would otherwise be visible again.
    masked = [os.path.realpath(d) for d in directories if d and os.path.isdir(d)]
    single = [os.path.realpath(s) for s in sockets if s and os.path.exists(s)]
    return outermost(masked), sorted(set(single))


STARTUP = (
    ".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".profile", ".zshenv", ".zshrc",
    ".zprofile", ".zlogin", ".config/fish",
)  # fmt: skip
"""Shell startup files in the home, read-only inside where they exist (your next shell runs
them); one that does not exist yet is a named gap (creating it empty could change which one a
login shell reads)."""


def trusted() -> list[str]:
    """What runs or configures code outside, wherever it lies (the home is the task's to
    write): laneboard's install (its interpreter's prefix, its package's folder), the
    directories on PATH (the git, tmux and ssh that laneboard and you run; one in the home that
    does not exist is made, empty, so that nothing can be planted there), git's global
    configuration, tmux's configuration and `~/.ssh` (each made empty when missing, so that it
    cannot be planted), and the shell startup files that exist."""
    found = [os.path.realpath(sys.prefix), os.path.realpath(sys.base_prefix), _package()]
    home = os.path.realpath(os.path.expanduser("~"))
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        real = os.path.realpath(directory) if os.path.isabs(directory) else ""
        if real and _within(real, home) and real != home:
            with contextlib.suppress(OSError):  # an entry never made: empty, it runs nothing
                os.makedirs(real, exist_ok=True)
        # Never the home or what holds it: a PATH naming it would take its writability away.
        if real and os.path.isdir(real) and not _within(home, real):
            found.append(real)
    named = os.environ.get("GIT_CONFIG_GLOBAL")
    xdg = os.environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
    files = [named] if named else [os.path.join(home, ".gitconfig"), f"{xdg}/git/config"]
    files += [os.path.join(home, ".tmux.conf"), f"{xdg}/tmux/tmux.conf"]
    for path in files:
        if not os.path.lexists(path):
            with contextlib.suppress(OSError):
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "a"):
                    pass
        if os.path.isfile(path):
            found.append(os.path.realpath(path))
    ssh = os.path.join(home, ".ssh")
    with contextlib.suppress(OSError):
        os.makedirs(ssh, mode=0o700, exist_ok=True)
    found += [os.path.realpath(ssh)] if os.path.isdir(ssh) else []
    found += [
        os.path.realpath(os.path.join(home, name))
        for name in STARTUP
        if os.path.exists(os.path.join(home, name))
    ]
    return outermost(found)


def _within(path: str, directory: str) -> bool:
    """`path` is `directory` or lies below it (both real paths)."""
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def _package() -> str:
    """The directory laneboard itself is imported from (a checkout, for an editable install):
    a `laneboard` run inside a sandbox imports it from there."""
    import laneboard

    return os.path.dirname(os.path.dirname(os.path.realpath(laneboard.__file__)))


def layout(
    *,
    db: Database,
    state: Path,
    config: Path,
    worktree: Path,
    admin_dir: Path,
    objects: Path | None,
    namespace: Sequence[Path] = (),
    task_id: str | None = None,
    channel: Path | None = None,
) -> Layout:
    """The paths of one sandbox (all real paths): its own worktree, admin dir, ref directories
    and object directory writable; every registered repository read-only; laneboard's state and
    config masked, with the pieces the task uses lent back; the command runners masked."""
    real = os.path.realpath
    state_real, config_real = real(state), real(config)
    lent = [state / "hooks", state / "confine" / "bin"]
    owned: list[Path] = []
    if task_id is not None:
        lent += [state / "agents" / task_id, state / "shims" / task_id]
        owned.append(state / "events" / f"{task_id}.log")
        # what its agent keeps for itself outside the worktree (aider's history): a file
        # there would block a later discard, and laneboard reads nothing from it
        owned.append(state / "agentdata" / task_id)
    agent = os.environ.get("SSH_AUTH_SOCK", "")
    if agent and os.path.exists(agent):
        lent.append(Path(agent))
    masked, sockets = runners()
    masked = outermost([state_real, config_real, *masked])
    kept = [real(p) for p in (os.environ.get("HOME", ""),) if p and _under_tmp(real(p))]
    admin = real(admin_dir)
    # What git outside reads to find a worktree's git dir (`.git`, `commondir`, `gitdir`) and
    # its settings: a task that could flip them between laneboard's verification and its next
    # git run would choose the repository (and its config) that git opens.
    pointers = ("config.worktree", "commondir", "gitdir", TOKEN_FILE)  # and its pinned token
    sealed = [os.path.join(admin, name) for name in pointers]
    sealed.append(os.path.join(real(worktree), ".git"))
    sealed += [os.path.join(real(p), KEEP) for p in namespace]
    return Layout(
        worktree=real(worktree),
        admin_dir=admin,
        repos=tuple(repo_trees(db)),
        namespace=tuple(real(p) for p in namespace),
        objects=real(objects) if objects is not None else None,
        sealed=tuple(sealed),
        masked=tuple(masked),
        sockets=tuple(sockets),
        lent=tuple(real(p) for p in lent),
        owned=tuple(real(p) for p in owned),
        kept=tuple(kept),
        trusted=tuple(trusted()),
        channel=real(channel) if channel is not None else None,
    )


def prepare(admin_dir: Path, namespace: Sequence[Path], objects: Path | None) -> None:
    """What must exist before the mounts are made: the worktree's empty `config.worktree` (an
    empty file sets nothing; read-only once mounted), its ref directories with their markers,
    its object directory."""
    with contextlib.suppress(FileExistsError):
        (admin_dir / "config.worktree").touch(exist_ok=False)
    for directory in namespace:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / KEEP).touch()
    if objects is not None:
        for sub in ("info", "pack"):
            (objects / sub).mkdir(parents=True, exist_ok=True)


def environment(
    layout: Layout,
    env: dict[str, str],
    *,
    common_dir: Path,
    task_id: str | None,
    state: Path,
    settled: bool = False,
) -> dict[str, str]:
    """`env` as the confined command gets it: git writes new objects to its own directory
    (the common store an alternate it reads), never maintains the shared repository, finds the
    guard first; it knows its channel and its task. `settled`: a watcher moves its objects
    (`taskobjects.Watcher`), and git's ref updates wait for it (`hook_dir`)."""
    out = dict(env)
    hooks: list[tuple[str, str]] = []
    if settled and layout.objects is not None:
        out[USER_HOOKS_ENV] = user_hooks(Path(layout.worktree), common_dir)
        out[SETTLE_ENV] = "1"
        hooks.append(("core.hooksPath", str(hook_dir(state))))
    out.update(no_maintenance(out, hooks))
    if layout.objects is not None:
        out["GIT_OBJECT_DIRECTORY"] = layout.objects
        common = os.path.join(os.path.realpath(common_dir), "objects")
        extra = env.get("GIT_ALTERNATE_OBJECT_DIRECTORIES")
        out["GIT_ALTERNATE_OBJECT_DIRECTORIES"] = f"{common}:{extra}" if extra else common
    guards = guard_dir(state)
    if guards is not None:
        out["PATH"] = f"{guards}{os.pathsep}{out.get('PATH', os.defpath)}"
    if task_id is not None:
        out[CONFINED_ENV] = task_id
    if layout.channel is not None:
        out[CHANNEL_ENV] = os.path.join(CHANNEL_DIR, CHANNEL_SOCKET)
    for name in ("TMUX", "TMUX_PANE", "LANEBOARD_TMUX_SOCKET"):
        out.pop(name, None)
    return out


USER_HOOKS_ENV = "LANEBOARD_USER_HOOKS"
SETTLE_ENV = "LANEBOARD_SETTLE"
HOOKS = (
    "applypatch-msg", "pre-applypatch", "post-applypatch", "pre-commit", "pre-merge-commit",
    "prepare-commit-msg", "commit-msg", "post-commit", "pre-rebase", "post-checkout",
    "post-merge", "pre-push", "pre-receive", "update", "proc-receive", "post-receive",
    "post-update", "push-to-checkout", "pre-auto-gc", "post-rewrite", "sendemail-validate",
    "fsmonitor-watchman", "p4-changelist", "p4-prepare-changelist", "p4-post-changelist",
    "p4-pre-submit", "post-index-change",
)  # fmt: skip
"""Every hook git (2.39) runs, besides `reference-transaction`: each is passed on as it is."""
PASS_ON = """#!/bin/sh
# laneboard: the repository's own hook, run as git would have run it.
h="$LANEBOARD_USER_HOOKS/${0##*/}"
[ -x "$h" ] && exec "$h" "$@"
exit 0
"""
SETTLE = """#!/bin/sh
# laneboard: a ref update of a confined task waits, in its `prepared` state, until the objects
# its git wrote have been moved into the repository's store (by a pass of laneboard's watcher
# that began after this hook did), so that no ref outside ever names an object not there yet.
# Then the repository's own hook, as git would have run it.
if [ "$1" = prepared ] && [ -n "$LANEBOARD_SETTLE" ] && [ -n "$GIT_OBJECT_DIRECTORY" ]; then
    lines=$(cat)
    since=$(date +%s%N)
    : > "$GIT_OBJECT_DIRECTORY/laneboard-wake"
    moved="$GIT_OBJECT_DIRECTORY/info/laneboard-moved"
    i=0
    while [ "$(cat "$moved" 2>/dev/null || echo 0)" -lt "$since" ]
    do
        i=$((i + 1)); [ $i -gt 2000 ] && break  # a watcher that is gone holds nothing up
        sleep 0.005
    done
    h="$LANEBOARD_USER_HOOKS/reference-transaction"
    [ -x "$h" ] && { printf '%s\n' "$lines" | "$h" "$@"; exit $?; }
    exit 0
fi
h="$LANEBOARD_USER_HOOKS/reference-transaction"
[ -x "$h" ] && exec "$h" "$@"
exit 0
"""


def hook_dir(state: Path) -> Path:
    """laneboard's hooks directory for confined git (`core.hooksPath` inside): every hook
    passed on to the repository's own (`$LANEBOARD_USER_HOOKS`), and `reference-transaction`
    waiting for the watcher first. Written when missing or different; lent read-only."""
    directory = state / "hooks" / "git"
    wanted = {name: PASS_ON for name in HOOKS} | {"reference-transaction": SETTLE}
    for name, text in wanted.items():
        path = directory / name
        try:
            if path.read_text() == text:
                continue
        except OSError:
            pass
        directory.mkdir(parents=True, exist_ok=True)
        partial = directory / f".{name}.{os.getpid()}"
        partial.write_text(text)
        partial.chmod(0o755)
        os.replace(partial, path)
    return directory


def user_hooks(worktree: Path, common_dir: Path) -> str:
    """Where the repository's own hooks are: its `core.hooksPath` (relative to the worktree's
    top, as git takes it), else the common dir's `hooks/`."""
    done = subprocess.run(
        ["git", "-C", str(worktree), "config", "--get", "core.hooksPath"],
        capture_output=True,
        check=False,
    )
    configured = os.fsdecode(done.stdout.strip())
    if configured:
        return os.path.expanduser(configured)
    return os.path.join(os.path.realpath(common_dir), "hooks")


def decision(mode: str, state: Path) -> tuple[Decision, Probe]:
    """How a task of a repo with `[confine] mode` runs here."""
    found = probe(state) if mode != Mode.OFF.value else Probe(False)
    return decide(Mode(mode), found), found


def gaps() -> list[str]:
    """What a sandbox here cannot hold, named (shown by `show` and `doctor`): a command runner
    listening on an abstract socket (the network namespace is shared, so it is reachable), and
    a machine the seccomp filter does not know."""
    found: list[str] = []
    if seccomp_filter(os.uname().machine) is None:
        found.append(
            f"no seccomp filter for {os.uname().machine}: a confined process could type into "
            "its own terminal (TIOCSTI)"
        )
    try:
        with open("/proc/net/unix", "rb") as table:
            names = {line.split()[-1].decode(errors="replace") for line in table.readlines()[1:]}
    except OSError:
        names = set()
    abstract = sorted(n for n in names if n.startswith("@") and ("X11-unix" in n or "dbus" in n))
    for name in abstract:
        found.append(
            f"{name} is an abstract socket (an X server or a D-Bus): the network is shared, so "
            "a confined process can reach it"
        )
    return found


__all__ = [
    "CHANNEL_DIR",
    "CHANNEL_SOCKET",
    "Decision",
    "Layout",
    "bwrap_argv",
    "decision",
    "environment",
    "gaps",
    "guard_dir",
    "layout",
    "prepare",
    "probe",
    "repo_trees",
    "seccomp_fd",
]
