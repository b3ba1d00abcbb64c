"""What a long-running board remembers of files (settings, where a repository is) is read again
whenever a file changed, even in the same tick of the kernel's file clock as the last read."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from laneboard.core.adapters import config, filestamp, git, stampcache
from laneboard.core.adapters.config import load_settings
from laneboard.core.adapters.git import BareRepository, NotARepository, discover


def _user_config(text: str) -> Path:
    path = Path(os.environ["LANEBOARD_HOME"]) / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _count(monkeypatch: pytest.MonkeyPatch, module: object, name: str) -> list[int]:
    calls = [0]
    real = getattr(module, name)

    def counted(*args: object, **kwargs: object) -> object:
        calls[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


def test_settings_are_read_once_while_their_files_stay(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(filestamp, "SETTLED", -1.0)  # every file counts as settled
    _user_config("[lanes]\nrepo_cap = 2\n")
    reads = _count(monkeypatch, config, "_load_settings")
    assert load_settings(repo).lanes.repo_cap == 2
    assert load_settings(repo).lanes.repo_cap == 2
    assert reads == [1]
    (repo / ".laneboard.toml").write_text("[lanes]\nrepo_cap = 4\n")
    assert load_settings(repo).lanes.repo_cap == 4
    assert reads == [2]


@pytest.fixture
def coarse_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """File times in whole seconds, as on a file system (or a kernel) whose file clock is
    coarse: Linux since 6.13 gives a file changed right after a look at it a finer time, so a
    rewrite in the same tick as a read cannot be made on this machine otherwise."""

    def coarse(path: str | os.PathLike[str], *, follow: bool = False) -> filestamp.Stamp:
        found = filestamp.stamp(path, follow=follow)
        if found is None:
            return None
        second = 1_000_000_000
        return (*found[:4], found[4] // second * second, found[5] // second * second)

    monkeypatch.setattr(config, "stamp", coarse)
    monkeypatch.setattr(git, "stamp", coarse)


@pytest.mark.usefixtures("coarse_clock")
def test_settings_rewritten_at_once_are_read_again() -> None:
    """Same size, same inode, written right after the read, in the same tick of the file
    clock: only the rule that a just-changed file is never trusted keeps the new value."""
    for n in range(20):
        path = _user_config(f"[lanes]\nrepo_cap = {n % 9 + 1}\n")
        assert load_settings().lanes.repo_cap == n % 9 + 1
        with open(path, "r+") as again:  # the same inode, the same size
            again.write(f"[lanes]\nrepo_cap = {(n + 1) % 9 + 1}\n")
        assert load_settings().lanes.repo_cap == (n + 1) % 9 + 1


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def test_a_repository_is_discovered_once_while_it_stays(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(filestamp, "SETTLED", -1.0)
    runs = _count(monkeypatch, git, "run_git")
    first = discover(repo)
    assert discover(repo) == first
    assert runs == [1]
    (repo / "new-file").write_text("x")  # the checkout's files do not matter
    _git(repo, "add", "new-file")
    _git(repo, "commit", "-qm", "more")
    assert discover(repo) == first
    assert runs[0] <= 3  # the two git commands above, not discover


@pytest.mark.usefixtures("coarse_clock")
def test_a_repository_made_bare_in_place_is_discovered_again(repo: Path) -> None:
    """`core.bare` rewritten in the same config file (same inode, same size) right after a
    discovery, in the same tick of the file clock: the next discovery refuses."""
    config_file = repo / ".git" / "config"
    text = config_file.read_text()
    assert "bare = false" in text
    for _ in range(20):
        discover(repo)
        with open(config_file, "r+") as again:
            again.write(text.replace("bare = false", "bare = true "))
        with pytest.raises(BareRepository):
            discover(repo)
        with open(config_file, "r+") as again:
            again.write(text)


# --- remembered across processes (core.adapters.stampcache) ----------------------------


def _new_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forget what this process remembered, as the next command line's process starts with
    nothing but the state dir's cache."""
    monkeypatch.setattr(git, "_FOUND", {})
    monkeypatch.setattr(config, "_LOADED", {})
    monkeypatch.setattr(stampcache, "_SHARED", {})


def test_a_discovery_is_kept_for_the_next_process(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(filestamp, "SETTLED", -1.0)
    first = discover(repo)
    _new_process(monkeypatch)
    runs = _count(monkeypatch, git, "run_git")
    assert discover(repo) == first
    assert runs == [0]


@pytest.mark.parametrize("after", ["in this process", "in the next process"])
def test_a_repository_replaced_at_the_same_path_is_discovered_again(
    after: str, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(filestamp, "SETTLED", -1.0)
    first = discover(repo)
    subprocess.run(["rm", "-rf", str(repo / ".git")], check=True)
    elsewhere = tmp_path / "separate.git"
    _git(repo, "init", "-q", "--separate-git-dir", str(elsewhere))
    if after == "in the next process":
        _new_process(monkeypatch)
    found = discover(repo)
    assert found.common_dir == elsewhere.resolve() != first.common_dir


@pytest.mark.usefixtures("coarse_clock")
def test_a_repository_made_bare_at_once_is_refused_by_the_next_process(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A discovery made in the same tick as a rewrite of the repository's config is never
    kept for another process either."""
    config_file = repo / ".git" / "config"
    text = config_file.read_text()
    for _ in range(20):
        _new_process(monkeypatch)
        discover(repo)
        with open(config_file, "r+") as again:
            again.write(text.replace("bare = false", "bare = true "))
        _new_process(monkeypatch)
        with pytest.raises(BareRepository):
            discover(repo)
        with open(config_file, "r+") as again:
            again.write(text)


def test_outside_every_repository_no_git_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain = tmp_path / "plain" / "deeper"
    plain.mkdir(parents=True)
    runs = _count(monkeypatch, git, "run_git")
    with pytest.raises(NotARepository):
        discover(plain)
    assert runs == [0]


def test_every_kind_of_repository_is_still_found_without_a_kept_answer(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where git finds a repository, so does `discover` (the shortcut that answers "no
    repository" without git never says it wrongly): a subdirectory, a linked worktree, a
    checkout whose `.git` is a file, the same through a symlink, a bare repository."""
    (repo / "sub" / "deeper").mkdir(parents=True)
    _git(repo, "worktree", "add", "-q", str(tmp_path / "linked"), "-b", "linked")
    separate = tmp_path / "separate"
    separate.mkdir()
    _git(separate, "init", "-q", "--separate-git-dir", str(tmp_path / "separate.git"))
    (tmp_path / "link").symlink_to(repo / "sub")
    for where in (repo / "sub" / "deeper", tmp_path / "linked", separate, tmp_path / "link"):
        _new_process(monkeypatch)
        assert discover(where).common_dir in (
            (repo / ".git").resolve(),
            (tmp_path / "separate.git").resolve(),
        ), where
    bare = tmp_path / "bare.git"
    _git(tmp_path, "init", "-q", "--bare", str(bare))
    (bare / "inside").mkdir()
    for where in (bare, bare / "inside", bare / "refs"):
        _new_process(monkeypatch)
        with pytest.raises(BareRepository):
            discover(where)


def test_settings_are_kept_for_the_next_process(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(filestamp, "SETTLED", -1.0)
    _user_config("[lanes]\nrepo_cap = 2\n[agents.profiles.mine]\ncommand = ['x', '--y']\n")
    first = load_settings(repo)
    _new_process(monkeypatch)
    reads = _count(monkeypatch, config, "_load_settings")
    assert load_settings(repo) == first
    assert reads == [0]
    (repo / ".laneboard.toml").write_text("[lanes]\nrepo_cap = 4\n")
    _new_process(monkeypatch)
    assert load_settings(repo).lanes.repo_cap == 4


@pytest.mark.usefixtures("coarse_clock")
def test_settings_rewritten_at_once_are_read_again_by_the_next_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for n in range(20):
        path = _user_config(f"[lanes]\nrepo_cap = {n % 9 + 1}\n")
        _new_process(monkeypatch)
        assert load_settings().lanes.repo_cap == n % 9 + 1
        with open(path, "r+") as again:  # the same inode, the same size
            again.write(f"[lanes]\nrepo_cap = {(n + 1) % 9 + 1}\n")
        _new_process(monkeypatch)
        assert load_settings().lanes.repo_cap == (n + 1) % 9 + 1


def test_settings_kept_by_other_code_are_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new laneboard (another settings module) never takes settings an older one kept."""
    monkeypatch.setattr(filestamp, "SETTLED", -1.0)
    module = tmp_path / "config.py"
    module.write_text("one")
    monkeypatch.setattr(config, "_SCHEMA_FILES", (module,))
    _user_config("[lanes]\nrepo_cap = 2\n")
    load_settings()
    module.write_text("two")
    _new_process(monkeypatch)
    reads = _count(monkeypatch, config, "_load_settings")
    load_settings()
    assert reads == [1]


@pytest.mark.usefixtures("coarse_clock")
def test_settings_read_by_code_changed_at_once_are_not_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The settings module rewritten in the same tick as a load (same size, same inode):
    what the old code read is not kept for the new."""
    module = tmp_path / "config.py"
    monkeypatch.setattr(config, "_SCHEMA_FILES", (module,))
    _user_config("[lanes]\nrepo_cap = 2\n")
    time.sleep(filestamp.SETTLED + 0.1)  # the user's file has settled: only the code changes
    reads = _count(monkeypatch, config, "_load_settings")
    for n in range(5):
        module.write_text(f"code {n % 2}")
        _new_process(monkeypatch)
        load_settings()
        with open(module, "r+") as again:
            again.write(f"code {(n + 1) % 2}")
        _new_process(monkeypatch)
        load_settings()
        assert reads == [2 * (n + 1)]
