"""The board's walk of worktrees (`tui.treewalk`): `find` and the Python walk list the same
directories, leave out the same caches, follow no link and cut a big worktree short; a
machine without GNU `find` gets the Python walk."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from laneboard.tui import treewalk
from laneboard.tui.treewalk import watch_dirs, watch_trees


def _tree(root: Path) -> Path:
    for rel in (
        "src/a/b",
        "src/target/code",  # `target` deep down holds source: watched
        "src/node_modules/x",  # a cache at any depth: left out
        "target/debug",  # build output at the top: left out
        "build",
        "docs/with space",
        "docs/new\nline",
        "vendor/.git/objects",  # a nested repository's git dir: left out, not named
        ".venv/lib",
    ):
        (root / rel).mkdir(parents=True)
    (root / ".git").write_text("gitdir: /elsewhere\n")
    (root / "node_modules").write_text("a file, not a cache directory\n")
    (root / "src" / "a" / "file.txt").write_text("x")
    outside = root.parent / f"{root.name}-outside"
    (outside / "deep").mkdir(parents=True)
    (root / "link").symlink_to(outside, target_is_directory=True)
    return root


def _rel(root: Path, dirs: list[str]) -> set[str]:
    return {os.path.relpath(d, root) for d in dirs}


def test_find_and_python_walk_the_same_directories(tmp_path: Path) -> None:
    roots = [_tree(tmp_path / name) for name in ("one", "two")]
    nested = _tree(roots[0] / "src" / "a" / "inner")  # a worktree inside another
    walked = watch_trees([str(r) for r in (*roots, nested)])
    for root in (*roots, nested):
        by_find, by_python = walked[str(root)], watch_dirs(str(root))
        assert by_find.dirs[0] == str(root)
        assert sorted(by_find.dirs) == sorted(by_python.dirs)
        assert sorted(by_find.skipped) == sorted(by_python.skipped)
        assert not by_find.cut and not by_python.cut
    one = _rel(roots[0], walked[str(roots[0])].dirs)
    assert {"src/target/code", "docs/with space", "docs/new\nline", "vendor"} <= one
    assert not {d for d in one if d.startswith(("target", "build", ".venv", "link"))}
    assert not {d for d in one if "node_modules" in d or ".git" in d}
    assert "src/a/inner/src" in one  # the outer worktree's walk goes into the inner one
    assert sorted(walked[str(roots[1])].skipped) == [
        ".venv",
        "build",
        "src/node_modules",
        "target",
    ]


def test_a_worktree_bigger_than_the_limit_is_cut_short(tmp_path: Path) -> None:
    """`find` is stopped at the cut worktree, and the roots after it are still walked whole."""
    big = []
    for name in ("big1", "big2"):
        root = tmp_path / name
        for n in range(12):
            (root / f"d{n}" / "e").mkdir(parents=True)
        big.append(root)
    small = [_tree(tmp_path / "small1"), _tree(tmp_path / "small2")]
    order = [big[0], small[0], big[1], small[1]]
    walked = watch_trees([str(r) for r in order], limit=15)
    for root in big:
        assert walked[str(root)].cut and len(walked[str(root)].dirs) == 15
        assert walked[str(root)].dirs[0] == str(root)
        assert set(walked[str(root)].dirs) <= set(watch_dirs(str(root)).dirs)
    for root in small:
        assert not walked[str(root)].cut
        assert sorted(walked[str(root)].dirs) == sorted(watch_dirs(str(root)).dirs)
    assert watch_dirs(str(big[0]), limit=15).cut


def test_a_root_that_is_gone_is_left_out(tmp_path: Path) -> None:
    here = _tree(tmp_path / "here")
    walked = watch_trees([str(tmp_path / "gone"), str(here)])
    assert str(tmp_path / "gone") not in walked
    assert sorted(walked[str(here)].dirs) == sorted(watch_dirs(str(here)).dirs)


def test_without_gnu_find_the_python_walk_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _tree(tmp_path / "r")
    shims = tmp_path / "shims"
    shims.mkdir()
    fake = shims / "find"  # a find without `-printf` (as BSD find) refuses the expression
    fake.write_text("#!/bin/sh\necho 'find: -printf: unknown primary' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{shims}{os.pathsep}{os.environ['PATH']}")
    called: list[str] = []
    real = treewalk.watch_dirs
    monkeypatch.setattr(treewalk, "watch_dirs", lambda r, limit: called.append(r) or real(r, limit))
    walked = watch_trees([str(root)])
    assert called == [str(root)]
    assert sorted(walked[str(root)].dirs) == sorted(real(str(root)).dirs)
    monkeypatch.setenv("PATH", str(tmp_path / "nothing-here"))  # no find at all
    called.clear()
    assert sorted(watch_trees([str(root)])[str(root)].dirs) == sorted(real(str(root)).dirs)
    assert called == [str(root)]
