"""Repositories that look different or move: a root whose `.git` is a gitfile or a symlink, a
bare repository, a repository moved on disk, a remount that changes the device number, a path
that is not UTF-8, a broken repo file. Each either works as a careful user expects or is refused
with one clear line, changing nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, git, make_repo, run_cli


def _show(cli, name: str, cwd: Path | None = None) -> dict[str, object]:
    result = cli("show", name, "--json", cwd=cwd)
    assert result.code == 0, result.err
    return json.loads(result.out)


def _commit(path: Path) -> None:
    (path / "README.md").write_text("hello\n")
    git(path, "add", "README.md")
    git(path, "commit", "-q", "-m", "initial")


@pytest.mark.parametrize("layout", ["gitfile", "symlink"])
def test_a_root_whose_git_is_a_gitfile_or_a_symlink_is_its_own_root(
    tmp_path: Path, layout: str
) -> None:
    """Was wrong: with `root/.git -> /data/repo.git` or `git init --separate-git-dir`, the root
    was taken as the git dir's parent: `new` failed with a misleading message and left the task
    in `provisioning`, `doctor` died, `exec --root` ran outside the repository."""
    root, data = tmp_path / "checkout", tmp_path / "data" / "repo.git"
    data.parent.mkdir()
    if layout == "gitfile":
        git(tmp_path, "init", "-q", "--separate-git-dir", str(data), str(root))
    else:
        root.mkdir()
        git(tmp_path, "init", "-q", "--bare", str(data))
        git(data, "config", "core.bare", "false")
        (root / ".git").symlink_to(data)
    _commit(root)

    def cli(*args: str, cwd: Path | None = None):  # type: ignore[no-untyped-def]
        return run_cli(*args, cwd=cwd or root)

    created = cli("new", "t", "--no-start")
    assert created.code == 0, created.err
    task = _show(cli, "t")
    assert task["repo"] == str(root)
    assert task["worktree_path"] == str(root / ".worktrees" / "t")
    assert cli("verify", "t").code == 0
    assert json.loads(cli("doctor", "--json").out)["findings"] == []
    here = cli("exec", "--root", "--", "pwd")
    assert here.out.strip() == str(root)
    # From inside the worktree, the same repository and the same root.
    inside = _show(cli, "t", cwd=root / ".worktrees" / "t")
    assert inside["id"] == task["id"]
    assert cli("discard", "t").code == 0


def test_a_bare_repository_is_refused_with_the_reason(tmp_path: Path) -> None:
    bare = tmp_path / "b.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    seed = make_repo(tmp_path / "seed")
    git(seed, "push", "-q", str(bare), "main")
    git(bare, "worktree", "add", "-q", str(tmp_path / "main"), "main")
    for args in (("init",), ("new", "t", "--no-start"), ("ls",)):
        result = run_cli(*args, cwd=tmp_path / "main")
        assert result.code == 1, (args, result.out)
        assert result.err.splitlines() == [
            f"laneboard: {bare} is a bare repository: laneboard needs its main checkout, which "
            "it leaves to you and integrates into; clone it without --bare to use laneboard"
        ]
    assert json.loads(run_cli("ls", "--json", cwd=tmp_path).out)["tasks"] == []


def test_a_moved_repository_keeps_its_tasks_and_repairs_its_worktrees(
    repo: Path, cli, tmp_path: Path
) -> None:
    """Was lost: after `mv ~/src/app ~/work/app` every command said "not registered" and `init`
    made a new, empty record."""
    assert cli("new", "a", "--no-start").code == 0
    assert cli("new", "b", "--no-start").code == 0
    (repo / ".worktrees" / "a" / "wip.txt").write_text("uncommitted work\n")
    before = {name: _show(cli, name) for name in ("a", "b")}
    moved = tmp_path / "work" / "app"
    moved.parent.mkdir()
    os.rename(repo, moved)

    listed = run_cli("ls", cwd=moved)
    assert listed.code == 0, listed.err
    assert f"laneboard: {moved}: the repository moved here from {repo}" in listed.err
    assert "repaired the worktrees of a, b" in listed.err
    for name in ("a", "b"):
        after = _show(cli, name, cwd=moved)
        assert after["id"] == before[name]["id"]
        assert after["worktree_path"] == str(moved / ".worktrees" / name)
        assert run_cli("verify", name, cwd=moved).code == 0
        assert git(moved / ".worktrees" / name, "rev-parse", "--show-toplevel") == str(
            moved / ".worktrees" / name
        )
    assert (moved / ".worktrees" / "a" / "wip.txt").read_text() == "uncommitted work\n"
    again = run_cli("ls", cwd=moved)
    assert "moved" not in again.err  # once repaired, the record is simply this repository's
    assert run_cli("discard", "b", cwd=moved).code == 0
    log = json.loads(run_cli("log", "a", "--json", cwd=moved).out)
    assert "task.relocated" in [e["kind"] for e in log["events"]]
    assert not repo.exists()


def test_a_new_repository_reusing_nothing_of_a_gone_one_is_not_taken_for_it(
    repo: Path, cli, tmp_path: Path
) -> None:
    assert cli("new", "a", "--no-start").code == 0
    other = make_repo(tmp_path / "other")
    result = run_cli("ls", cwd=other)
    assert result.code == 0
    assert "not registered" in result.out
    assert "moved" not in result.err


def test_repin_follows_a_device_change_and_nothing_else(repo: Path, cli) -> None:
    """A remount can change the device number of every file: verification then says
    `identity-changed` forever. `verify --repin` takes the new device only when every other
    check passes and the inodes are still the pinned ones."""
    from laneboard.core.adapters.db import Database, default_path

    assert cli("new", "r", "--no-start").code == 0
    task = _show(cli, "r")
    identity = task["identity"]
    database = Database(default_path())
    with database.transaction() as db:  # what a remount looks like from the ledger's side
        db.execute(
            "UPDATE tasks SET dir_dev = ?, gitfile_dev = ? WHERE id = ?",
            (identity["dir_dev"] + 1, identity["gitfile_dev"] + 1, task["id"]),
        )
    database.close()
    assert cli("verify", "r").code == 1
    repinned = cli("verify", "r", "--repin")
    assert repinned.code == 0, repinned.err
    assert _show(cli, "r")["identity"] == identity
    assert "worktree.repinned" in [
        e["kind"] for e in json.loads(cli("log", "r", "--json").out)["events"]
    ]
    # A directory swapped in under the same name has other inodes: never repinned.
    worktree = repo / ".worktrees" / "r"
    os.rename(worktree, repo / "elsewhere")
    os.mkdir(worktree)
    os.rename(repo / "elsewhere" / ".git", worktree / ".git")
    refused = cli("verify", "r", "--repin")
    assert refused.code == 1
    assert refused.err.startswith("laneboard: r: refusing to repin: ")
    assert _show(cli, "r")["identity"] == identity


def test_a_repository_at_a_path_that_is_not_utf8_works(tmp_path: Path) -> None:
    """Was an internal error in every command: SQLite cannot store such a path as text."""
    raw = os.fsencode(tmp_path) + b"/r\xff\xfe"
    root = make_repo(Path(os.fsdecode(raw)))
    for args in (
        ("init",),
        ("new", "t", "--no-start"),
        ("ls",),
        ("show", "t", "--json"),
        ("verify", "t"),
        ("exec", "--lane", "t", "--", "true"),
        ("lanes",),
        ("doctor",),
        ("discard", "t"),
        ("restore", "t"),
    ):
        result = subprocess.run(
            [sys.executable, "-P", "-m", "laneboard", *args],
            cwd=root,
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
            capture_output=True,
            check=False,
        )
        assert result.returncode == 0, (args, result.stderr)
        assert b"internal error" not in result.stderr
        if args == ("show", "t", "--json"):
            # JSON escapes what is not UTF-8 (as a lone surrogate); text output prints the bytes.
            assert (
                json.loads(result.stdout)["worktree_path"].encode("utf-8", "surrogateescape")
                == raw + b"/.worktrees/t"
            )
    shown = subprocess.run(
        [sys.executable, "-P", "-m", "laneboard", "show", "t"],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        check=True,
    )
    assert raw + b"/.worktrees/t" in shown.stdout  # the path's own bytes, printed as they are


def test_doctor_names_a_broken_repo_file_instead_of_calling_the_repo_missing(
    repo: Path, cli, tmp_path: Path
) -> None:
    assert cli("new", "a", "--no-start").code == 0
    (repo / ".laneboard.toml").write_text("this is [not toml\n")
    report = json.loads(run_cli("doctor", "--json", cwd=tmp_path).out)["findings"]
    assert [f["kind"] for f in report] == ["config-invalid"]
    assert str(repo / ".laneboard.toml") in report[0]["detail"]
