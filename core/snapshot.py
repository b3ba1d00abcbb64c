"""Snapshots: everything a task's worktree holds, saved as one commit before removal, and put
back by `laneboard restore`.

A snapshot is a commit under `refs/laneboard/snapshots/<task-id>/<n>` whose tree is the worktree
byte for byte as it is on disk (tracked files and untracked files that are not ignored, hashed
without any filter: no CRLF conversion, no clean filter), and whose parents are HEAD, a commit of
the index as staged, the branch tip, and any other commit only the worktree's reflogs or
per-worktree refs still reach. So the snapshot keeps every commit of the task reachable, and
restoring it gives back HEAD, staged, unstaged and untracked files exactly. It is made with
temporary index files: the user's index, stash and refs are never touched (only the new snapshot
ref is written, with a compare-and-swap that refuses to overwrite). Empty directories are not
content to git and are not kept.
"""

from __future__ import annotations

import os
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from core.errors import LaneboardError
from core.git import git_env, run_git

IDENTITY = {
    "GIT_AUTHOR_NAME": "laneboard",
    "GIT_AUTHOR_EMAIL": "laneboard@localhost",
    "GIT_COMMITTER_NAME": "laneboard",
    "GIT_COMMITTER_EMAIL": "laneboard@localhost",
}
"""Snapshot commits are laneboard's own; they do not depend on the user having an identity."""

GITLINK = "160000"


def snapshot_ref(task_id: str, n: int) -> str:
    return f"refs/laneboard/snapshots/{task_id}/{n}"


@dataclass(frozen=True)
class Snapshot:
    """A saved worktree state: the snapshot commit and the commits it was made from."""

    ref: str
    sha: str
    head: str
    index_commit: str
    tip: str | None
    tree: str
    index_tree: str
    extras: tuple[str, ...] = field(default=())
    """Commits kept only because a reflog or per-worktree ref of the worktree reached them."""


def _git(
    cwd: Path,
    *args: str,
    index: Path | None = None,
    extra: dict[str, str] | None = None,
    input: bytes | None = None,
) -> str:
    env = dict(extra or {})
    if index is not None:
        env["GIT_INDEX_FILE"] = str(index)
    result = run_git(list(args), cwd=cwd, read=False, env=env, input=input)
    return result.stdout.decode(errors="surrogateescape").strip()


@contextmanager
def _temporary_index(copy_from: Path | None = None) -> Iterator[Path]:
    """A private index file, a copy of `copy_from` (a worktree's index) or empty."""
    with tempfile.TemporaryDirectory(prefix="laneboard-index-") as tmp:
        index = Path(tmp) / "index"
        if copy_from is not None and copy_from.exists():
            index.write_bytes(copy_from.read_bytes())
        yield index


def _z(raw: str) -> list[str]:
    return [item for item in raw.split("\0") if item]


def _raw_tree(worktree: Path, index: Path) -> str:
    """The tree of the files on disk, hashed as raw bytes: every path the index tracks plus the
    untracked ones that are not ignored. Deleted paths are left out; gitlinks are kept as
    staged."""
    staged = {}
    for line in _z(_git(worktree, "ls-files", "-s", "-z", index=index)):
        meta, _, path = line.partition("\t")
        mode, sha, _stage = meta.split(" ")
        staged[path] = (mode, sha)
    untracked = _z(_git(worktree, "ls-files", "-z", "--others", "--exclude-standard", index=index))
    entries: list[str] = []
    files: list[tuple[str, str]] = []
    for path in sorted(set(staged) | set(untracked)):
        if staged.get(path, ("", ""))[0] == GITLINK:
            entries.append(f"{GITLINK} {staged[path][1]}\t{path}")
            continue
        try:
            info = os.lstat(worktree / path)
        except FileNotFoundError:
            continue  # deleted on disk
        if stat.S_ISLNK(info.st_mode):
            target = os.fsencode(os.readlink(worktree / path))
            sha = _git(worktree, "hash-object", "-w", "--no-filters", "--stdin", input=target)
            entries.append(f"120000 {sha}\t{path}")
        elif stat.S_ISREG(info.st_mode):
            files.append((path, "100755" if info.st_mode & 0o111 else "100644"))
    if files:
        listing = "\n".join(path for path, _ in files).encode("utf-8", "surrogateescape")
        shas = _git(
            worktree, "hash-object", "-w", "--no-filters", "--stdin-paths", input=listing + b"\n"
        ).split()
        entries += [f"{mode} {sha}\t{path}" for (path, mode), sha in zip(files, shas, strict=True)]
    with _temporary_index() as fresh:
        listed = "".join(f"{entry}\0" for entry in entries).encode("utf-8", "surrogateescape")
        _git(worktree, "update-index", "-z", "--index-info", index=fresh, input=listed)
        return _git(worktree, "write-tree", index=fresh)


def trees_now(worktree: Path, gitdir: Path) -> tuple[str, str]:
    """(index tree, worktree tree) as they are: the staged state, and the files on disk."""
    with _temporary_index(gitdir / "index") as index:
        index_tree = _git(worktree, "write-tree", index=index)
        return index_tree, _raw_tree(worktree, index)


def _commit(cwd: Path, tree: str, parents: list[str], message: str) -> str:
    args = ["commit-tree", tree]
    for parent in dict.fromkeys(parents):  # keep order, drop repeats
        args += ["-p", parent]
    return _git(cwd, *args, "-m", message, extra=IDENTITY)


def _save(
    cwd: Path,
    ref: str,
    trees: tuple[str, str],
    head: str,
    tip: str | None,
    extras: tuple[str, ...],
    message: str,
) -> Snapshot:
    index_tree, work_tree = trees
    index_commit = _commit(cwd, index_tree, [head], "index")
    parents = [head, index_commit, tip or head, *extras]
    args = ["commit-tree", work_tree]
    for parent in parents:  # positions matter: `read` finds each part by its place
        args += ["-p", parent]
    sha = _git(cwd, *args, "-m", message, extra=IDENTITY)
    _git(cwd, "update-ref", ref, sha, "0" * 40)
    return Snapshot(ref, sha, head, index_commit, tip, work_tree, index_tree, extras)


def take(
    worktree: Path,
    gitdir: Path,
    *,
    ref: str,
    head: str,
    tip: str | None,
    extras: tuple[str, ...] = (),
    message: str,
) -> Snapshot:
    """Save the worktree under `ref` (which must not exist yet)."""
    return _save(worktree, ref, trees_now(worktree, gitdir), head, tip, extras, message)


def of_commit(
    root: Path, *, ref: str, commit: str, extras: tuple[str, ...] = (), message: str
) -> Snapshot:
    """A snapshot of a branch alone (its worktree is gone): its tree, nothing staged apart."""
    tree = _git(root, "rev-parse", f"{commit}^{{tree}}")
    return _save(root, ref, (tree, tree), commit, commit, extras, message)


def matches(worktree: Path, gitdir: Path, snapshot: Snapshot, head: str | None) -> bool:
    """True when the worktree still holds exactly what `snapshot` saved."""
    return head == snapshot.head and trees_now(worktree, gitdir) == (
        snapshot.index_tree,
        snapshot.tree,
    )


def read(root: Path, ref: str, sha: str) -> Snapshot:
    """The snapshot at `ref`, refusing if the ref no longer points at the recorded `sha`."""
    found = run_git(["rev-parse", "--verify", "-q", f"{ref}^{{commit}}"], cwd=root, check=False)
    current = found.stdout.decode().strip()
    if current != sha:
        raise LaneboardError(f"snapshot {ref} is {current or 'missing'}, expected {sha}")
    parents = _git(root, "rev-list", "--parents", "-n", "1", sha).split()[1:]
    if len(parents) < 2:
        raise LaneboardError(f"{ref} is not a laneboard snapshot ({len(parents)} parents)")
    head, index_commit = parents[0], parents[1]
    tip = parents[2] if len(parents) > 2 else head
    tree = _git(root, "rev-parse", f"{sha}^{{tree}}")
    index_tree = _git(root, "rev-parse", f"{index_commit}^{{tree}}")
    return Snapshot(ref, sha, head, index_commit, tip, tree, index_tree, tuple(parents[3:]))


def _entries(cwd: Path, tree: str) -> dict[str, tuple[str, str]]:
    """path -> (mode, sha) of every blob and gitlink in `tree`."""
    found = {}
    for line in _z(_git(cwd, "ls-tree", "-r", "-z", "--full-tree", tree)):
        meta, _, path = line.partition("\t")
        mode, _kind, sha = meta.split(" ")
        found[path] = (mode, sha)
    return found


def _blobs(cwd: Path, shas: list[str]) -> dict[str, bytes]:
    """Raw contents of blobs, read in one `git cat-file --batch`."""
    if not shas:
        return {}
    request = "".join(f"{sha}\n" for sha in shas).encode()
    out = subprocess.run(
        ["git", "cat-file", "--batch"],
        cwd=cwd,
        env=git_env(read=True),
        input=request,
        capture_output=True,
        check=True,
    ).stdout
    contents: dict[str, bytes] = {}
    position = 0
    for sha in shas:
        header_end = out.index(b"\n", position)
        size = int(out[position:header_end].split()[2])
        start = header_end + 1
        contents[sha] = out[start : start + size]
        position = start + size + 1
    return contents


def _make_room(path: Path) -> None:
    """Make room for a file at `path`: remove a file or link there, and any file or link that
    stands where one of its parent directories must be."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        for parent in reversed(path.parents):
            if parent.is_symlink() or (parent.exists() and not parent.is_dir()):
                parent.unlink()
        path.parent.mkdir(parents=True, exist_ok=True)


def _already_there(worktree: Path, wanted: dict[str, tuple[str, str]]) -> set[str]:
    """Paths whose file on disk already holds the wanted bytes and mode (the checkout wrote
    most of them): hashed raw in one `git hash-object`, so restore rewrites only what differs."""
    candidates = []
    for relative, (mode, _sha) in wanted.items():
        if mode not in ("100644", "100755"):
            continue
        try:
            info = os.lstat(worktree / relative)
        except OSError:
            continue
        executable = bool(info.st_mode & 0o111)
        if stat.S_ISREG(info.st_mode) and executable == (mode == "100755"):
            candidates.append(relative)
    if not candidates:
        return set()
    listing = "\n".join(candidates).encode("utf-8", "surrogateescape") + b"\n"
    shas = _git(worktree, "hash-object", "--no-filters", "--stdin-paths", input=listing).split()
    return {path for path, sha in zip(candidates, shas, strict=True) if wanted[path][1] == sha}


def apply(worktree: Path, snapshot: Snapshot) -> None:
    """Make a fresh worktree (checked out at the snapshot's branch tip) hold the snapshot:
    HEAD at the snapshot's HEAD, the index as staged, the files byte for byte as they were on
    disk, untracked files untracked. Idempotent, so an interrupted restore can run it again."""
    if snapshot.tip and snapshot.tip != snapshot.head:
        _git(worktree, "checkout", "-q", "--detach", snapshot.head)
    wanted = {p: e for p, e in _entries(worktree, snapshot.tree).items() if e[0] != GITLINK}
    keep = _already_there(worktree, wanted)
    write = {p: e for p, e in wanted.items() if p not in keep}
    contents = _blobs(worktree, sorted({sha for _mode, sha in write.values()}))
    for relative, (mode, sha) in sorted(write.items()):
        target = worktree / relative
        _make_room(target)
        if mode == "120000":
            os.symlink(os.fsdecode(contents[sha]), target)
            continue
        descriptor = os.open(
            target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o777 if mode == "100755" else 0o666
        )
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(contents[sha])
    gone = set(_entries(worktree, snapshot.head)) | set(_entries(worktree, snapshot.index_tree))
    for relative in sorted(gone - set(wanted)):
        target = worktree / relative
        if target.is_symlink() or target.is_file():
            target.unlink()
    _git(worktree, "read-tree", snapshot.index_tree)
    run_git(["update-index", "-q", "--refresh"], cwd=worktree, read=False, check=False)


def next_number(existing: list[int]) -> int:
    return max(existing, default=0) + 1
