"""The git commands integration and publish run: commit creation without a checkout, the
compare-and-swap of a ref, the fast-forward of a clean root, a rebase inside laneboard's own
scratch worktree, and push / ls-remote with timeouts.

Every command here runs with `core.hooksPath=/dev/null`: integration is the trusted side, and
a hook (which an agent may have planted in `.git/hooks`) must not run inside it. Network
commands run with a timeout and never prompt.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

from laneboard.core.adapters.git import first_line, git_env, run_git
from laneboard.core.domain.errors import GitError, LaneboardError

NO_HOOKS = ("-c", "core.hooksPath=/dev/null")
REBASE_OPTIONS = ("--no-autostash", "--no-autosquash", "--no-update-refs", "--rebase-merges")
"""A rebase laneboard runs: never a stash, never a reordering, never another branch moved
(`rebase.updateRefs`), merges kept (a plain rebase drops what a merge commit itself changed)."""
ZERO = "0" * 40


def quiet_git(
    args: list[str],
    cwd: Path,
    *,
    check: bool = True,
    env: dict[str, str] | None = None,
    input: bytes | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """git with hooks off, in a process group of its own, so a Ctrl-C at the terminal reaches
    neither it nor what it runs (a smudge filter) half-way through moving a ref or the root's
    files. A first interrupt of laneboard waits for git to finish and is raised after it; a
    second one stops git (the operator insists: a filter may hang)."""
    argv = ["git", *NO_HOOKS, *args]
    # An interrupt while git is being started (Popen waits for its exec) would leave it
    # running unwatched: one that comes then is noted, and counts as the first.
    caught: list[int] = []
    main = threading.current_thread() is threading.main_thread()
    handler = signal.signal(signal.SIGINT, lambda n, _f: caught.append(n)) if main else None
    # (None also when the handler was set outside Python: then Python's own goes back)
    try:
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=git_env(read=False, extra=env),
            stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            process_group=0,
        )
    except FileNotFoundError:
        raise GitError("git is not installed or not on PATH") from None
    finally:
        if main:
            signal.signal(
                signal.SIGINT, handler if handler is not None else signal.default_int_handler
            )
    pending: BaseException | None = KeyboardInterrupt() if caught else None
    while True:
        try:
            out, err = proc.communicate(input)
            break
        except KeyboardInterrupt as interrupt:
            input = None  # sent already: communicate goes on reading
            if pending is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                raise
            pending = interrupt
    if pending is not None:
        raise pending
    done = subprocess.CompletedProcess(argv, proc.returncode, out, err)
    if check and done.returncode != 0:
        raise GitError(f"git {args[0]} failed: {first_line(err)}")
    return done


def identity(root: Path) -> tuple[str, str]:
    """The user's git identity (name, email) as commits here would carry it: the committer
    variables, else `user.name` / `user.email` from git's config. Refused when either is
    missing: laneboard never invents one from the host name."""
    env = os.environ

    def config(key: str) -> str:
        found = run_git(["config", "--get", key], cwd=root, check=False)
        return found.stdout.decode(errors="replace").strip() if found.returncode == 0 else ""

    name = env.get("GIT_COMMITTER_NAME") or config("user.name")
    email = env.get("GIT_COMMITTER_EMAIL") or config("user.email")
    if not name or not email:
        raise LaneboardError(
            "no git identity: laneboard commits as you; set `git config --global user.name "
            '"Your Name"` and `git config --global user.email you@example.com`'
        )
    return name, email


def _who(who: tuple[str, str], *, author: bool = True) -> dict[str, str]:
    name, email = who
    env = {"GIT_COMMITTER_NAME": name, "GIT_COMMITTER_EMAIL": email}
    if author:
        env.update(GIT_AUTHOR_NAME=name, GIT_AUTHOR_EMAIL=email)
    return env


def commit_tree(
    root: Path, tree: str, parents: list[str], message: str, who: tuple[str, str]
) -> str:
    """A new commit object of `tree` with `parents`, authored and committed by `who`; nothing
    but the object is written."""
    args = ["commit-tree", tree]
    for parent in parents:
        args += ["-p", parent]
    made = quiet_git(args, root, env=_who(who), input=message.encode())
    return made.stdout.decode().strip()


def tree_of(root: Path, commit: str) -> str:
    return run_git(["rev-parse", f"{commit}^{{tree}}"], cwd=root).stdout.decode().strip()


def update_ref(root: Path, ref: str, new: str, old: str, message: str) -> str | None:
    """Move `ref` from `old` to `new` (`old` all zeros: create it) only if it is at `old` now,
    atomically (git's compare-and-swap). None when it moved; else git's reason, and nothing
    changed (the ref was not at `old`, or it is locked)."""
    found = quiet_git(["update-ref", "--no-deref", "-m", message, ref, new, old], root, check=False)
    return None if found.returncode == 0 else first_line(found.stderr)


def root_dirty(root: Path) -> list[str]:
    """The root's tracked paths with staged or unstaged changes, and unmerged ones (untracked
    files do not stop a fast-forward unless it would overwrite them, which git refuses)."""
    out = run_git(
        ["status", "--porcelain=v1", "-z", "--untracked-files=no", "--no-renames"], cwd=root
    ).stdout
    return [
        entry[3:].decode(errors="surrogateescape") for entry in out.split(b"\0") if len(entry) > 3
    ]


def _in_the_way(root: Path, old: str, new: str) -> list[str]:
    """What in the checkout at `root` a fast-forward from `old` to `new` would write over that
    git does not track: an existing file, directory or link where `new` adds a path, or a file
    or link where it needs a directory for one (git refuses for an untracked file, but takes an
    ignored one as expendable). A path `old` tracks and `new` removes is git's own to replace."""

    def changed(kind: str) -> list[str]:
        out = run_git(
            ["diff", "--name-only", "-z", "--no-renames", f"--diff-filter={kind}", old, new],
            cwd=root,
        ).stdout
        return [raw.decode(errors="surrogateescape") for raw in out.split(b"\0") if raw]

    removed = set(changed("D"))
    found: list[str] = []
    for path in changed("A"):
        parts = path.split("/")
        for depth in range(1, len(parts)):
            prefix = "/".join(parts[:depth])
            place = root / prefix
            if prefix not in removed and (place.is_symlink() or place.is_file()):
                found.append(prefix)
                break
        else:
            if os.path.lexists(root / path):
                found.append(path)
    return sorted(set(found))


def fast_forward(
    root: Path,
    old: str,
    new: str,
    merge: Callable[[list[str]], subprocess.CompletedProcess[bytes]] | None = None,
) -> str | None:
    """Fast-forward the branch checked out at `root` (the repository's root, or a task's
    worktree) from `old` to `new` (`merge --ff-only`, which updates index and files with the
    ref). None on success, else git's reason; nothing moved then (git checks before it
    writes). `merge` runs git's merge instead of running it here (in a task's sandbox: git
    moves whatever the worktree's HEAD names, and a task can rewrite its HEAD)."""
    head = run_git(["rev-parse", "HEAD"], cwd=root, check=False).stdout.decode().strip()
    if head != old:
        return f"HEAD there is {head[:12]}, not {old[:12]}"
    in_the_way = _in_the_way(root, old, new)
    if in_the_way:
        more = f" and {len(in_the_way) - 5} more" if len(in_the_way) > 5 else ""
        return (
            "files there that git does not track would be overwritten (git replaces ignored "
            f"files without asking): {', '.join(in_the_way[:5])}{more}"
        )
    args = ["merge", "--ff-only", "--no-stat", "--no-edit", "--no-autostash", new]
    found = quiet_git(args, root, check=False) if merge is None else merge(args)
    if found.returncode == 0:
        return None
    said = found.stderr or found.stdout
    named = [line.strip() for line in said.decode(errors="replace").splitlines()]
    files = [
        line
        for line in named
        if line and not line.startswith(("error:", "fatal:", "Please", "Aborting", "hint:"))
    ]
    more = f": {', '.join(files[:5])}" + (f" and {len(files) - 5} more" if len(files) > 5 else "")
    return first_line(said) + (more if files else "")


def scratch_add(root: Path, path: Path, sha: str, reason: str) -> None:
    """A detached worktree at `path` checking out `sha`, locked with `reason` (proof it is
    laneboard's own integration worktree)."""
    quiet_git(["worktree", "add", "--detach", "--lock", "--reason", reason, str(path), sha], root)


def scratch_remove(root: Path, path: Path) -> None:
    """Remove laneboard's scratch worktree (its files are a checkout of an integration result
    and what the gate built: nothing of anyone's). The caller verified it first."""
    quiet_git(["worktree", "remove", "--force", "--force", str(path)], root)


def rebase_onto(worktree: Path, onto: str, upstream: str, tip: str, who: tuple[str, str]) -> str:
    """Replay the commits `upstream..tip` onto `onto` in `worktree` (laneboard's scratch
    worktree, detached), keeping each author and committing as `who`; the new tip. A conflict
    aborts the rebase there (it is laneboard's own worktree) and raises with the files."""
    found = quiet_git(
        ["rebase", *REBASE_OPTIONS, "--onto", onto, upstream, tip],
        worktree,
        env=_who(who, author=False),
        check=False,
    )
    if found.returncode == 0:
        return run_git(["rev-parse", "HEAD"], cwd=worktree).stdout.decode().strip()
    files = run_git(["diff", "--name-only", "--diff-filter=U", "-z"], cwd=worktree, check=False)
    names = [n.decode(errors="surrogateescape") for n in files.stdout.split(b"\0") if n]
    quiet_git(["rebase", "--abort"], worktree, check=False)
    raise RebaseConflict(names, first_line(found.stderr or found.stdout))


class RebaseConflict(GitError):
    def __init__(self, files: list[str], line: str) -> None:
        super().__init__(f"rebase conflicts: {', '.join(files) or line}")
        self.files = files


def network(args: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess[bytes]:
    """A git command that talks to a remote, with a timeout and no prompt. Raises `GitError`
    on a timeout (the caller must look before retrying: the push may have landed)."""
    return timed_out(["git", *NO_HOOKS, *args], cwd, timeout, f"git {args[0]}")


def timed_out(
    argv: list[str], cwd: Path, timeout: float, what: str
) -> subprocess.CompletedProcess[bytes]:
    """Run `argv` (git's controlled environment, output captured) for at most `timeout`
    seconds; a timeout raises `GitError` naming `what`."""
    try:
        return subprocess.run(
            argv,
            cwd=cwd,
            env=git_env(read=False),
            capture_output=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise GitError(f"{what} timed out after {timeout:g} s") from None


def remote_ref(root: Path, remote: str, ref: str, timeout: float) -> str | None:
    """The SHA `ref` has on `remote` now (None when it does not exist there)."""
    found = network(["ls-remote", "--exit-code", remote, ref], root, timeout)
    if found.returncode == 2:
        return None
    if found.returncode != 0:
        raise GitError(f"git ls-remote {remote} failed: {first_line(found.stderr)}")
    for line in found.stdout.decode().splitlines():
        sha, _, name = line.partition("\t")
        if name == ref:
            return sha
    return None
