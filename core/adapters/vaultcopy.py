"""Copying a commit and what it reaches into the vault in this process (pygit2's object
databases), for what is kept at every agent turn (checkpoints): `vault.keep`'s fetch starts
four processes each time, while a turn adds a handful of objects. The walk stops at every
object the vault holds already, so a checkpoint costs what it changed, not the whole tree.

Objects are read from the repository's own store (which holds only verified objects, moved in
by the warden) and written as loose objects of the vault, each only after everything it
reaches: an object in the vault always has its whole graph there (a copy cut off half-way, by a
crash or a kill, leaves only complete pieces), which is what lets a walk stop at one. The ref
is created last, and never overwritten.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pygit2

from laneboard.core.adapters import trees, vault
from laneboard.core.domain.errors import LaneboardError

GITLINK = 0o160000
COMMIT, TREE = 1, 2

Write = Callable[[int, bytes], object]
"""How an object is written into the vault (its `odb.write`)."""


def keep(
    source: pygit2.Repository, vault_dir: Path, sha: str, ref: str, *, like: str | None = None
) -> None:
    """Copy commit `sha` and every object it reaches that the vault lacks, then create `ref`
    there (idempotent when it names `sha` already). `like`: a vault ref whose commit is much
    like `sha` (the task's previous checkpoint): a tree entry the same at the same path there
    is in the vault already and is not looked up; a missing ref only loses that shortcut."""
    vault.ensure(vault_dir)
    target = pygit2.Repository(str(vault_dir))
    known = target.references.get(like) if like is not None else None
    copy(source, target, sha, like=None if known is None else str(known.target))
    existing = target.references.get(ref)
    if existing is not None:
        if str(existing.target) != sha:
            raise LaneboardError(f"the vault {vault_dir}: {ref} names another commit already")
        return
    target.references.create(ref, sha)


def copy(
    source: pygit2.Repository,
    target: pygit2.Repository,
    sha: str,
    *,
    like: str | None = None,
    write: Write | None = None,
) -> None:
    """Write into `target` every object reachable from `sha` that it lacks, each after all it
    reaches (depth first). `like`: a commit whose whole graph `target` holds, walked beside
    `sha`'s (tree by tree, path by path) to skip what the two share. `write`: for tests."""
    put = write or target.odb.write
    stack: list[tuple[pygit2.Oid, pygit2.Oid | None, tuple[int, bytes] | None]] = [
        (pygit2.Oid(hex=sha), None if like is None else pygit2.Oid(hex=like), None)
    ]
    while stack:
        oid, old, read = stack.pop()
        if read is not None:  # everything it reaches is written: now the object itself
            put(*read)
            continue
        if oid == old or oid in target.odb:
            continue
        kind, data = source.odb.read(oid)
        stack.append((oid, None, (kind, data)))
        stack.extend(_children(source, target, kind, oid, data, old))


def _children(
    source: pygit2.Repository,
    target: pygit2.Repository,
    kind: int,
    oid: pygit2.Oid,
    data: bytes,
    old: pygit2.Oid | None,
) -> Iterator[tuple[pygit2.Oid, pygit2.Oid | None, None]]:
    """What object `oid` reaches, each with its counterpart under `old` (held by `target`)."""
    if kind == COMMIT:
        commit = source[oid]
        assert isinstance(commit, pygit2.Commit)
        before = target.get(old) if old is not None else None
        if not isinstance(before, pygit2.Commit):
            before = None
        yield commit.tree_id, None if before is None else before.tree_id, None
        parents = [] if before is None else list(before.parent_ids)
        for n, parent in enumerate(commit.parent_ids):
            yield parent, parents[n] if n < len(parents) else None, None
    elif kind == TREE:
        was = trees.parse(target.odb.read(old)[1]) if old is not None else {}
        for name, (mode, raw) in trees.parse(data).items():
            then = was.get(name)
            if mode == GITLINK or (then is not None and then[1] == raw):
                continue  # another repository's commit; or the same as under `old`
            both_trees = then is not None and then[0] == mode == trees.TREE
            counterpart = pygit2.Oid(raw=then[1]) if then is not None and both_trees else None
            yield pygit2.Oid(raw=raw), counterpart, None


def keep_ref(
    repo_id: int, source: pygit2.Repository, sha: str, ref: str, *, like: str | None = None
) -> None:
    """`keep` into the vault of repository `repo_id`."""
    from laneboard.core.adapters.config import state_dir

    keep(source, vault.path(state_dir(), repo_id), sha, ref, like=like)
