"""Which directories of a worktree the board watches: all of them but the caches.

`watch_trees` walks every worktree of a board at once with one `find` process (the walk of
200 worktrees is then C, on the other core, and the feed thread reads one stream); `watch_dirs`
is the same walk in Python, for one worktree, and what `watch_trees` falls back to when `find`
is missing or cannot do it (no GNU `-printf`).

Why not Python alone: the board's first watch is made while Textual starts in the main thread,
and `os.scandir` lets the interpreter lock go for every entry it returns. Each time, the feed
thread must wait for the main thread's switch interval to get the lock back, so a walk of
4,800 directories (60,000 entries) that takes 50 ms alone took 0.3-0.6 s beside Textual's
start (`bench/scale.py`, launch at 200 tasks).

Both walks: symbolic links are not followed; a directory in `SKIP_DIRS` is left out at any
depth, one in `SKIP_TOP` only at the worktree's top; a nested `.git` is not named as skipped
(git never looks into it); a directory that goes away or cannot be read meanwhile is listed
but not looked into; a worktree with more than `limit` directories is cut short (the first
`limit` found are watched, and the caller re-reads it on a timer).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field

SKIP_DIRS = frozenset(
    {
        ".git",
        "node_modules",
        ".venv",
        "venv",
        "__pycache__",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".tox",
        ".hypothesis",
    }
)
"""Directories never watched, at any depth: caches that change all the time and hold no source
(inotify would run out of watches on them)."""
SKIP_TOP = frozenset({"target", ".gradle", ".next", ".cache", "build", "dist"})
"""Build output skipped only at a worktree's top: deeper down a `target/` or `build/` is as
likely to hold tracked source (`src/target/code.c`)."""
MAX_DIRS = 5000
"""Directories watched per worktree at most; a bigger worktree is watched at its top levels and
re-read with `git status` on every tick instead."""
PER_FIND = 50
"""Worktrees one `find` walks at least: more are shared among as many `find` as there are
cores, all running at once."""


@dataclass
class Tree:
    """The walk of one worktree."""

    dirs: list[str] = field(default_factory=list)
    """The directories to watch, the worktree's top first."""
    cut: bool = False
    """The worktree had more than the limit: only the first directories found are listed."""
    skipped: list[str] = field(default_factory=list)
    """The directories left out (caches), relative to the worktree."""


def watch_dirs(root: str, limit: int = MAX_DIRS) -> Tree:
    """The walk of the worktree at `root`, in Python (see the module docstring)."""
    tree = Tree()
    ahead = [root]
    while ahead:
        path = ahead.pop()
        tree.dirs.append(path)
        if len(tree.dirs) >= limit:
            tree.cut = True
            return tree
        below = []
        try:
            with os.scandir(path) as entries:
                for entry in entries:
                    if not entry.is_dir(follow_symlinks=False):
                        continue
                    name = entry.name
                    if name in SKIP_DIRS or (path == root and name in SKIP_TOP):
                        if name != ".git":
                            tree.skipped.append(os.path.relpath(entry.path, root))
                        continue
                    below.append(entry.path)
        except OSError:
            continue  # gone or unreadable meanwhile: as `os.walk`, it is left out
        ahead += reversed(below)
    return tree


def watch_trees(roots: Sequence[str], limit: int = MAX_DIRS) -> dict[str, Tree]:
    """The walk of every worktree of `roots` (absolute directories, symbolic links not
    followed), by root: one `find` for all of them (one per core for many). A root that could
    not be read is missing."""
    unique = list(dict.fromkeys(roots))
    found = _find(unique, limit) if unique else {}
    if found is None:
        return {root: watch_dirs(root, limit) for root in unique}
    return found


def _find(roots: list[str], limit: int) -> dict[str, Tree] | None:
    """The walk of `roots` by `find`; None: `find` cannot do it (missing, or not GNU find).
    The output is read as it comes: once a worktree reaches `limit`, its `find` is stopped and
    a new one walks the roots after it (a worktree with a million directories costs no more
    than one with `limit`, as in `watch_dirs`)."""
    if not all(os.path.isabs(root) and "/./" not in root + "/" for root in roots):
        return None  # (a relative root could read as an option; see below for `/./`)
    step = max(PER_FIND, -(-len(roots) // (os.cpu_count() or 1)))
    chunks = [roots[at : at + step] for at in range(0, len(roots), step)]
    procs: list[subprocess.Popen[bytes]] = []
    trees: dict[str, Tree] = {}
    try:
        procs += (_start_find(chunk) for chunk in chunks)
        for chunk, first in zip(chunks, list(procs), strict=True):
            proc: subprocess.Popen[bytes] | None = first
            while proc is not None:
                left = _read_find(proc, chunk, trees, limit)
                if left is None:
                    return None
                proc = _start_find(left) if left else None
                if proc is not None:
                    procs.append(proc)
                chunk = left
    except OSError:
        return None
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return trees


def _start_find(roots: list[str]) -> subprocess.Popen[bytes]:
    # Each root is given as `<root>/.`: a directory at its top is then the only path that
    # matches `*/./<name>`, so `SKIP_TOP` is pruned there alone. Each line is the kind (D:
    # watched, S: left out), the depth below the root and the path; `-prune` keeps `find` out
    # of what is left out; `-P` follows no symbolic link.
    skip: list[str] = []
    for name in sorted(SKIP_DIRS):
        skip += [*(["-o"] if skip else []), "-name", name]
    for name in sorted(SKIP_TOP):
        skip += ["-o", "-path", f"*/./{name}"]
    expression = [
        "-type", "d", "(",
        "(", *skip, ")", "-prune", "-printf", r"S%d %p\0", "-o", "-printf", r"D%d %p\0",
        ")",
    ]  # fmt: skip
    return subprocess.Popen(
        ["find", "-P", *(f"{root}/." for root in roots), *expression],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={"LC_ALL": "C", "PATH": os.environ.get("PATH", os.defpath)},
    )


def _read_find(
    proc: subprocess.Popen[bytes], roots: list[str], trees: dict[str, Tree], limit: int
) -> list[str] | None:
    """Read `proc`'s walk of `roots` into `trees`; the roots still to walk when it was stopped
    at a worktree that reached `limit` ([] when it finished), None when `find` cannot do it."""
    assert proc.stdout is not None
    tops = {f"{root}/.": root for root in roots}
    root, tree, cut, rest, seen = "", Tree(), 0, b"", False
    with proc.stdout:
        while chunk := proc.stdout.read(1 << 16):
            seen = True
            lines = (rest + chunk).split(b"\0")
            rest = lines.pop()
            for raw in lines:
                line = os.fsdecode(raw)
                kind = line[:1]
                depth, _, path = line[1:].partition(" ")
                if depth == "0" and path in tops:
                    root = tops[path]
                    tree = trees[root] = Tree(dirs=[root])
                    cut = len(path)
                elif not root:
                    continue  # (cannot happen: each root's own line comes first)
                elif kind == "D":
                    tree.dirs.append(root + path[cut:])
                elif not path.endswith("/.git"):
                    tree.skipped.append(path[cut + 1 :])
                if len(tree.dirs) >= limit:
                    tree.cut = True
                    proc.kill()
                    proc.wait()
                    return roots[roots.index(root) + 1 :]
    if proc.wait() != 0 and not seen:
        return None  # not GNU find, or none of the roots is there any more
    return []
