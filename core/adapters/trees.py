"""Trees edited in this process: a tree with some paths set or removed, written as git writes
it, reading and writing only the trees on the changed paths.

A checkpoint at every agent turn saves a worktree whose few changed files sit among tens of
thousands of unchanged ones; building its tree through a temporary index (copy the index,
`update-index`, `write-tree`) rewrites and rehashes the whole index each time. Here only the
directories above a changed path are read and written again; every other subtree is shared
with the base tree by its id.

Names are raw bytes from end to end (a file name need not be UTF-8, and pygit2's tree builder
takes only UTF-8 text), and tree objects are encoded here as git encodes them: entries sorted
with a directory's name compared as if it ended in `/`, modes in octal without leading zeros.
"""

from __future__ import annotations

from collections.abc import Mapping

import pygit2

TREE = 0o040000
Change = tuple[int, str] | None
"""A path's new (mode, blob id), or None: the path is removed."""


def edit_tree(repo: pygit2.Repository, base: str | None, changes: Mapping[bytes, Change]) -> str:
    """The id of `base` (None: the empty tree) with every path of `changes` (raw bytes,
    `/`-separated, relative to the tree) set to its (mode, blob) or removed. A directory left
    empty is dropped, as git drops it; a path set where the base has a directory (or below
    where it has a file) replaces it. Writes the new trees; reads only the edited ones."""
    return edit(repo, base, changes) or str(repo.odb.write(pygit2.GIT_OBJECT_TREE, b""))


def edit(repo: pygit2.Repository, base: str | None, changes: Mapping[bytes, Change]) -> str | None:
    """As `edit_tree`, None for a tree left empty."""
    entries: dict[bytes, tuple[int, bytes]] = {}
    if base is not None:
        tree = repo[base]
        assert isinstance(tree, pygit2.Tree)
        for entry in tree:
            assert entry.raw_name is not None  # a tree's entries all have names
            entries[entry.raw_name] = (int(entry.filemode), entry.id.raw)
    here: dict[bytes, Change] = {}
    below: dict[bytes, dict[bytes, Change]] = {}
    for path, change in changes.items():
        head, slash, rest = path.partition(b"/")
        if slash:
            below.setdefault(head, {})[rest] = change
        else:
            here[head] = change
    for name, change in here.items():
        if change is None:
            entries.pop(name, None)
        else:
            mode, sha = change
            entries[name] = (mode, pygit2.Oid(hex=sha).raw)
    for name, sub in below.items():
        old = entries.get(name)
        inner = str(pygit2.Oid(raw=old[1])) if old is not None and old[0] == TREE else None
        new = edit(repo, inner, sub)
        if new is not None:
            entries[name] = (TREE, pygit2.Oid(hex=new).raw)
        elif old is not None and old[0] == TREE and entries.get(name) == old:
            del entries[name]  # emptied (a file set at `name` itself stays)
    if not entries:
        return None
    return str(repo.odb.write(pygit2.GIT_OBJECT_TREE, encode(entries)))


def encode(entries: Mapping[bytes, tuple[int, bytes]]) -> bytes:
    """A tree object's content: git's order (a directory sorts as its name plus `/`)."""

    def key(name: bytes) -> bytes:
        return name + b"/" if entries[name][0] == TREE else name

    return b"".join(
        b"%o %s\0%s" % (entries[name][0], name, entries[name][1])
        for name in sorted(entries, key=key)
    )
