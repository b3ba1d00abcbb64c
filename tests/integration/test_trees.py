"""A tree edited in this process (`core.adapters.trees`, what a checkpoint and a snapshot build
the worktree's tree with) is, object for object, the tree git itself writes for the same files:
any two sets of files, the one edited into the other, against `git update-index --index-info`
and `git write-tree` on a fresh index. Names that sort differently as directories, names that
are not UTF-8, files that become directories and back, directories emptied."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import pygit2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from laneboard.core.adapters import trees

NAMES = [b"a", b"a.b", b"a-", b"a0", b"b", b"\xff", b"sp ace"]
MODES = [0o100644, 0o100755, 0o120000]
Files = dict[bytes, tuple[int, bytes]]


def _no_file_under_a_file(paths: list[bytes]) -> list[bytes]:
    """The paths a worktree can hold at once, first come first kept: none is another's folder."""
    kept: list[bytes] = []
    for path in paths:
        if not any(path.startswith(k + b"/") or k.startswith(path + b"/") for k in kept):
            kept.append(path)
    return kept


paths = st.lists(st.sampled_from(NAMES), min_size=1, max_size=3).map(b"/".join)
files = st.lists(
    st.tuples(paths, st.sampled_from(MODES), st.sampled_from([b"1", b"2"])), max_size=12
)


def _files(drawn: list[tuple[bytes, int, bytes]]) -> Files:
    chosen = {path: (mode, body) for path, mode, body in drawn}
    return {path: chosen[path] for path in _no_file_under_a_file(list(chosen))}


def _git_tree(repo: Path, handle: pygit2.Repository, content: Files) -> str:
    """The tree git writes for `content`, from a fresh index."""
    listing = b"".join(
        b"%o %s\t%s\0" % (mode, str(handle.create_blob(body)).encode(), path)
        for path, (mode, body) in content.items()
    )
    with tempfile.TemporaryDirectory() as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index"), "PATH": "/usr/bin:/bin"}
        run = {"cwd": repo, "env": env, "check": True, "capture_output": True}
        subprocess.run(["git", "update-index", "-z", "--index-info"], input=listing, **run)
        return subprocess.run(["git", "write-tree"], **run).stdout.decode().strip()


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("trees") / "repo.git"
    subprocess.run(["git", "init", "-q", "--bare", str(repo)], check=True)
    return repo


@settings(max_examples=80, deadline=None)
@given(before=files, after=files)
def test_an_edited_tree_is_the_tree_git_writes(
    bare: Path, before: list[tuple[bytes, int, bytes]], after: list[tuple[bytes, int, bytes]]
) -> None:
    handle = pygit2.Repository(str(bare))
    old, new = _files(before), _files(after)
    changes: dict[bytes, trees.Change] = {p: None for p in old if p not in new}
    for path, (mode, body) in new.items():
        if old.get(path) != (mode, body):
            changes[path] = (mode, str(handle.create_blob(body)))
    base = _git_tree(bare, handle, old)
    assert trees.edit_tree(handle, base, changes) == _git_tree(bare, handle, new)
    raw = handle.odb.read(base)[1]
    assert trees.encode(trees.parse(raw)) == raw  # read as git wrote it, and back
    assert trees.edit_tree(handle, None, {p: None for p in old}) == _git_tree(bare, handle, {})


def test_a_tree_made_before_is_reused_only_where_the_repository_holds_it(tmp_path: Path) -> None:
    """The same edit in another repository (or after a gc pruned the tree) writes it there."""
    made = []
    for name in ("one.git", "two.git"):
        subprocess.run(["git", "init", "-q", "--bare", str(tmp_path / name)], check=True)
        handle = pygit2.Repository(str(tmp_path / name))
        blob = str(handle.create_blob(b"same\n"))
        made.append(trees.edit_tree(handle, None, {b"d/e/f.txt": (0o100644, blob)}))
        listed = subprocess.run(
            ["git", "--git-dir", str(tmp_path / name), "ls-tree", "-r", made[-1]],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        assert listed == f"100644 blob {blob}\td/e/f.txt\n"
    assert made[0] == made[1]
