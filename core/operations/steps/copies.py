"""Provisioning's allowlisted copies: untracked files of the root (config `provision.copy`, e.g.
`.env`) copied into a new worktree, and how removal later tells such a copy from someone's work.

Reads and writes go through `core.safefs` on both sides: a source reached through a symlinked
directory of the root, or a destination whose parent in the worktree is a symlink (a tracked
link in the checkout), is skipped and reported, never followed. Nothing already in the worktree
is overwritten. Each copy's SHA-256 is journalled, so an unchanged copy is laneboard's own and
blocks no removal, while an edited one is work.
"""

from __future__ import annotations

import glob
import hashlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from laneboard.core.adapters.ledger import Ledger
from laneboard.core.adapters.repo import RepoContext
from laneboard.core.adapters.safefs import Below, split
from laneboard.core.domain.models import Actor, Task


def copy_files(ctx: RepoContext, ledger: Ledger, task: Task, actor: Actor) -> None:
    """Copy the root's allowlisted files into the task's worktree and journal what was copied,
    what was skipped (and why), and the digest of each copy."""
    copied: list[str] = []
    skipped: list[str] = []
    digests: dict[str, str] = {}
    with Below(ctx.root) as source, Below(Path(task.worktree_path)) as target:
        for pattern in ctx.settings.provision.copy:
            matches = sorted(glob.glob(pattern, root_dir=ctx.root, recursive=True))
            if not matches:
                skipped.append(f"{pattern} (matches nothing)")
            for match in matches:
                problem = _problem(ctx.root, source, target, match)
                if problem is not None:
                    skipped.append(f"{match} ({problem})")
                    continue
                info = source.lstat(match)
                assert info is not None
                digest = hashlib.sha256()
                target.write(
                    match,
                    _hashed(source.chunks(match), digest),
                    permissions=stat.S_IMODE(info.st_mode),
                    replace=False,
                )
                copied.append(match)
                digests[match] = digest.hexdigest()
    ledger.append_event(
        task.id,
        ctx.repo.id,
        "files.copied",
        actor,
        {"copied": copied, "skipped": skipped, "sha256": digests},
    )


def _problem(root: Path, source: Below, target: Below, match: str) -> str | None:
    """Why `match` is not copied, or None when it may be."""
    try:
        parts = split(match)
    except ValueError:
        return "outside the root"
    info = source.lstat(match)
    if info is None:
        if os.path.lexists(root / match):
            return "reached through a symbolic link in the root"
        return "gone"
    if not stat.S_ISREG(info.st_mode):
        return "not a regular file"
    if target.lstat(match) is not None:
        return "already in the worktree"
    for depth in range(1, len(parts)):
        above = "/".join(parts[:depth])
        found = target.lstat(above)
        if found is not None and not stat.S_ISDIR(found.st_mode):
            return f"{above} is not a directory in the worktree"
    return None


def _hashed(chunks: Iterator[bytes], digest: hashlib._Hash) -> Iterator[bytes]:
    for chunk in chunks:
        digest.update(chunk)
        yield chunk


def copied_files(ledger: Ledger, task: Task) -> dict[str, str]:
    """Files provisioning copied into the task's worktree, with their SHA-256 at copy time."""
    found: dict[str, str] = {}
    for event in ledger.events(task.id):
        if event.kind == "files.copied":
            found.update(event.data.get("sha256", {}))
    return found


def unchanged_copies(ledger: Ledger, task: Task, where: Path | None = None) -> frozenset[str]:
    """Copied files still byte-for-byte as provisioning copied them: laneboard's own, not work.
    `where` is the worktree's location when it is not its own path (a discard's quarantine)."""
    copies = copied_files(ledger, task)
    if not copies:
        return frozenset()
    unchanged = set()
    with Below(where or Path(task.worktree_path)) as below:
        for relative, digest in copies.items():
            info = below.lstat(relative)
            if info is None or not stat.S_ISREG(info.st_mode):
                continue
            if hashlib.sha256(b"".join(below.chunks(relative))).hexdigest() == digest:
                unchanged.add(relative)
    return frozenset(unchanged)
