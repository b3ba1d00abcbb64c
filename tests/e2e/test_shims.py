"""Command shims route a task's heavy commands through its lane, find the real command, and
never recurse."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from laneboard.core.adapters.db import Database, default_path
from laneboard.core.adapters.leases import LeaseStore
from tests.conftest import REPO_ROOT


def _script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def _exec_leases() -> list[tuple[str | None, list[str]]]:
    store = LeaseStore(Database(default_path()), slots=2)
    return [(x.lane, list(x.command)) for x in store.admitted_in_order() if x.kind.value == "exec"]


@pytest.fixture
def tasks(repo: Path, cli) -> dict[str, str]:
    (repo / ".laneboard.toml").write_text('[lanes]\nwrap = ["mytool", "make", "othertool"]\n')
    ids = {}
    for name in ("a", "b"):
        assert cli("new", name, "--no-start").code == 0
        ids[name] = cli("show", name, "--json").out.split('"id": "')[1].split('"')[0]
    return ids


def _run(command: str, path: list[Path], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PATH": os.pathsep.join(map(str, path))}
    return subprocess.run(
        ["sh", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )


def _shims(cli, name: str) -> Path:
    result = cli("shims", name)
    assert result.code == 0, result.err
    return Path(result.out.strip())


def test_shim_runs_the_real_command_in_the_tasks_lane(repo: Path, cli, tasks, tmp_path) -> None:
    real = tmp_path / "real"
    _script(real / "mytool", 'echo "real mytool in $PWD lease=$LANEBOARD_LEASE args=$*"\n')
    shims_a, shims_b = _shims(cli, "a"), _shims(cli, "b")
    assert sorted(p.name for p in shims_a.iterdir()) == ["make", "mytool", "othertool"]
    path = [shims_a, shims_b, real, Path("/usr/bin"), Path("/bin")]
    # Called from outside the worktree (here: a temp dir), the command runs at its top.
    result = _run("mytool --fast x", path, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert f"real mytool in {repo / '.worktrees' / 'a'} lease=" in result.stdout
    assert result.stdout.strip().endswith("args=--fast x")
    assert _exec_leases() == [(tasks["a"], ["mytool", "--fast", "x"])]


def test_shim_runs_in_the_callers_directory_inside_the_worktree(
    repo: Path, cli, tasks, tmp_path
) -> None:
    """Was wrong (and this file asserted it): from `.worktrees/a/frontend`, `npm test` through
    the shim ran in `.worktrees/a`. A command runs where it is called, when that is inside the
    verified worktree."""
    real = tmp_path / "real"
    _script(real / "mytool", 'echo "ran in $PWD"\n')
    frontend = repo / ".worktrees" / "a" / "frontend" / "src"
    frontend.mkdir(parents=True)
    result = _run("mytool", [_shims(cli, "a"), real, Path("/usr/bin"), Path("/bin")], frontend)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"ran in {frontend}"
    # The same shim called from another task's worktree runs at the top of its own lane.
    elsewhere = repo / ".worktrees" / "b"
    result = _run("mytool", [_shims(cli, "a"), real, Path("/usr/bin"), Path("/bin")], elsewhere)
    assert result.stdout.strip() == f"ran in {repo / '.worktrees' / 'a'}"


def test_real_command_beside_another_tasks_shims_is_found(repo: Path, cli, tasks, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Unconfined: another task's shim directory is laneboard's state, which a sandbox does not
    see, so a real command there does not run confined."""
    config = repo / ".laneboard.toml"
    config.write_text(config.read_text() + '[confine]\nmode = "off"\n')
    shims_a, shims_b = _shims(cli, "a"), _shims(cli, "b")
    # `othertool` is shimmed for both tasks; the real one lives among b's shims, after a's.
    (shims_b / "othertool").unlink()
    _script(shims_b / "othertool", 'echo "real othertool lease=$LANEBOARD_LEASE"\n')
    result = _run("othertool", [shims_a, shims_b, Path("/usr/bin"), Path("/bin")], tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("real othertool lease=")
    assert _exec_leases() == [(tasks["a"], ["othertool"])]


def test_nested_shims_run_under_the_outer_lease(cli, tasks, tmp_path) -> None:
    real = tmp_path / "real"
    _script(real / "mytool", 'echo "inner lease=$LANEBOARD_LEASE"\n')
    _script(real / "make", 'echo "outer lease=$LANEBOARD_LEASE"; mytool\n')
    shims_a = _shims(cli, "a")
    result = _run("make", [shims_a, real, Path("/usr/bin"), Path("/bin")], tmp_path)
    assert result.returncode == 0, result.err
    outer, inner = result.stdout.splitlines()
    assert outer.split("=")[1] == inner.split("=")[1] != ""
    assert _exec_leases() == [(tasks["a"], ["make"])]  # one lease: no self-deadlock


def test_shim_without_a_real_command_exits_127(cli, tasks, tmp_path) -> None:
    shims_a = _shims(cli, "a")
    result = _run("mytool", [shims_a, Path("/usr/bin"), Path("/bin")], tmp_path)
    assert result.returncode == 127
    assert result.stderr.strip() == "laneboard: command not found: mytool"
    assert _exec_leases() == []


def test_rewriting_shims_drops_unwrapped_commands_only(repo: Path, cli, tasks) -> None:
    shims_a = _shims(cli, "a")
    _script(shims_a / "mine", "echo keep\n")
    (repo / ".laneboard.toml").write_text('[lanes]\nwrap = ["make"]\n')
    assert _shims(cli, "a") == shims_a
    assert sorted(p.name for p in shims_a.iterdir()) == ["make", "mine"]


def test_wrap_entries_must_be_plain_command_names(repo: Path, cli) -> None:
    (repo / ".laneboard.toml").write_text('[lanes]\nwrap = ["../evil"]\n')
    result = cli("new", "x", "--no-start")
    assert result.code == 1
    assert "field lanes.wrap" in result.err


def test_shim_never_imports_the_worktrees_own_packages(repo: Path, cli, tmp_path) -> None:
    """Regression: shims ran `python -m tui.cli` from the worktree, which put the worktree first
    on sys.path, so a repo with its own `core/` package ran its code instead of laneboard's."""
    from tests.conftest import git

    (repo / "core").mkdir()
    (repo / "core" / "__init__.py").write_text('raise SystemExit("worktree core imported")\n')
    git(repo, "add", "core")
    git(repo, "commit", "-q", "-m", "a package named core")
    (repo / ".laneboard.toml").write_text('[lanes]\nwrap = ["mytool"]\n')
    assert cli("new", "p", "--no-start").code == 0
    real = tmp_path / "real"
    _script(real / "mytool", 'echo "real mytool"\n')
    shims = _shims(cli, "p")
    result = _run(
        "mytool", [shims, real, Path("/usr/bin"), Path("/bin")], repo / ".worktrees" / "p"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "real mytool"
