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

from collections import OrderedDict
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


_MADE: OrderedDict[tuple[str | None, frozenset[tuple[bytes, Change]]], str] = OrderedDict()
"""Trees this process made, by (base, changes): the same edit again (the directories a turn
left as the turn before did, at the next checkpoint) reuses the tree while the repository
still holds it. A tree's id is its content's, so the answer is right in any repository."""
MADE_LIMIT = 4096


def edit(repo: pygit2.Repository, base: str | None, changes: Mapping[bytes, Change]) -> str | None:
    """As `edit_tree`, None for a tree left empty."""
    key = (base, frozenset(changes.items()))
    made = _MADE.get(key)
    if made is not None and pygit2.Oid(hex=made) in repo.odb:
        _MADE.move_to_end(key)
        return made
    found = _edit(repo, base, changes)
    if found is not None:
        _MADE[key] = found
        if len(_MADE) > MADE_LIMIT:
            _MADE.popitem(last=False)
    return found


def _edit(repo: pygit2.Repository, base: str | None, changes: Mapping[bytes, Change]) -> str | None:
    entries = parse(repo.odb.read(base)[1]) if base is not None else {}
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


def parse(data: bytes) -> dict[bytes, tuple[int, bytes]]:
    """A tree object's content as name -> (mode, raw 20-byte id), in its order (read directly:
    pygit2 makes an object and an enum of every entry, ten times slower on a 100-entry tree)."""
    entries: dict[bytes, tuple[int, bytes]] = {}
    at, end = 0, len(data)
    while at < end:
        space = data.index(b" ", at)
        nul = data.index(b"\0", space)
        entries[data[space + 1 : nul]] = (int(data[at:space], 8), data[nul + 1 : nul + 21])
        at = nul + 21
    return entries


def encode(entries: Mapping[bytes, tuple[int, bytes]]) -> bytes:
    """A tree object's content: git's order (a directory sorts as its name plus `/`)."""

    def key(name: bytes) -> bytes:
        return name + b"/" if entries[name][0] == TREE else name

    return b"".join(
        b"%o %s\0%s" % (entries[name][0], name, entries[name][1])
        for name in sorted(entries, key=key)
    )
