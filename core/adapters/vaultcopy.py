"""Copying a commit and what it reaches into the vault in this process (pygit2's object
databases), for what is kept at every agent turn (checkpoints): `vault.keep`'s fetch starts
four processes each time, while a turn adds a handful of objects. The walk stops at every
object the vault holds already, so a checkpoint costs what it changed, not the whole tree.

Objects are read from the repository's own store (which holds only verified objects, moved in
by the warden) and written as loose objects of the vault; the ref is created only after
everything it reaches is there, and never overwritten.
"""

from __future__ import annotations

from pathlib import Path

import pygit2

from laneboard.core.adapters import vault
from laneboard.core.domain.errors import LaneboardError

GITLINK = 0o160000
COMMIT, TREE = 1, 2


def keep(source: pygit2.Repository, vault_dir: Path, sha: str, ref: str) -> None:
    """Copy commit `sha` and every object it reaches that the vault lacks, then create `ref`
    there (idempotent when it names `sha` already)."""
    vault.ensure(vault_dir)
    target = pygit2.Repository(str(vault_dir))
    stack = [pygit2.Oid(hex=sha)]
    while stack:
        oid = stack.pop()
        if oid in target.odb:
            continue
        kind, data = source.odb.read(oid)
        target.odb.write(kind, data)
        found = source[oid] if kind in (COMMIT, TREE) else None
        if isinstance(found, pygit2.Commit):
            stack.append(found.tree_id)
            stack.extend(found.parent_ids)
        elif isinstance(found, pygit2.Tree):
            stack.extend(entry.id for entry in found if entry.filemode != GITLINK)
    existing = target.references.get(ref)
    if existing is not None:
        if str(existing.target) != sha:
            raise LaneboardError(f"the vault {vault_dir}: {ref} names another commit already")
        return
    target.references.create(ref, sha)


def keep_ref(repo_id: int, source: pygit2.Repository, sha: str, ref: str) -> None:
    """`keep` into the vault of repository `repo_id`."""
    from laneboard.core.adapters.config import state_dir

    keep(source, vault.path(state_dir(), repo_id), sha, ref)
