"""`host check NAME --install` (docs/hosts.md): this laneboard, the same version with the same
dependencies, installed on a host that lacks it, through a real sshd on loopback, without a
package index; the host's `laneboard` setting then names it, and tasks there run on it."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from laneboard import __version__
from tests.conftest import make_repo, run_cli
from tests.sshd import Remote, Sshd, add_host, shut

pytestmark = pytest.mark.tmux


@contextmanager
def bare_host(tmp_path: Path, path: str | None = None) -> Iterator[Remote]:
    """A host `build` without laneboard (its setting names a program that is not there)."""
    sshd = Sshd(tmp_path / "sshd")
    host = Remote(tmp_path / "host", sshd)
    # Without the host's wrapper, whatever runs there must still see only the test's state.
    env = {k: v for k, v in host.env.items() if k not in ("PYTHONPATH", "PYTHONPYCACHEPREFIX")}
    sshd.set_env({**env, **({"PATH": path} if path else {})})
    sshd.start()
    try:
        add_host("build", host, tmp_path / "nowhere" / "laneboard", tmp_path)
        yield host
    finally:
        shut(host, sshd, tmp_path)


def test_host_check_install_puts_this_laneboard_there_and_tasks_run_on_it(
    tmp_path: Path,
) -> None:
    with bare_host(tmp_path) as host:
        before = run_cli("host", "check", "build", cwd=tmp_path)
        assert before.code == 1 and "-- laneboard" in before.out, before

        installed = run_cli("host", "check", "build", "--install", cwd=tmp_path)
        program = host.home / ".local" / "share" / "laneboard" / __version__ / "bin" / "laneboard"
        assert f"installed laneboard {__version__} on build: {program}" in installed.err
        assert f"ok laneboard       laneboard {__version__}" in installed.out, installed
        listed = json.loads(run_cli("host", "ls", "--json", cwd=tmp_path).out)
        assert listed["hosts"][0]["laneboard"] == str(program)
        assert not (host.home / ".local" / "share" / "laneboard" / f"{__version__}.new").exists()

        there = make_repo(tmp_path / "host" / "repo")
        made = run_cli(
            "new", "t", "--host", "build", "--repo", str(there), "--no-start", cwd=tmp_path
        )
        assert made.code == 0, made.err
        seen = json.loads(run_cli("ls", "--host", "build", "--json", cwd=tmp_path).out)
        assert [t["name"] for t in seen["tasks"]] == ["t"]
        # It ran on the installed program: its own Python environment, not this checkout.
        python = program.parent / "python"
        assert (there / ".worktrees" / "t").is_dir()
        assert python.exists() and not (program.parent.parent / "lib").is_symlink()

        again = run_cli("host", "check", "build", "--install", cwd=tmp_path)
        assert "installed" not in again.err  # the same version there: nothing to do


def test_an_install_on_a_host_of_another_platform_is_refused_and_changes_nothing(
    tmp_path: Path,
) -> None:
    """Its compiled dependencies would not load there: refused, with nothing written there and
    the host's setting as it was."""
    fake = tmp_path / "fakebin"
    fake.mkdir()
    python = fake / f"python{sys.version_info.major}.{sys.version_info.minor}"
    python.write_text("#!/bin/sh\necho cpython-311 linux-armv7l\n")
    python.chmod(0o755)
    with bare_host(tmp_path, path=f"{fake}:/usr/bin:/bin") as host:
        before = run_cli("host", "ls", "--json", cwd=tmp_path).out
        refused = run_cli("host", "check", "build", "--install", cwd=tmp_path)
        assert refused.code == 1 and refused.err.count("\n") == 1, refused
        assert "runs cpython-311 linux-armv7l, this laneboard" in refused.err
        assert "would not load there" in refused.err
        assert run_cli("host", "ls", "--json", cwd=tmp_path).out == before
        assert not (host.home / ".local" / "share" / "laneboard").exists()


def test_installs_at_once_all_land_and_leave_one_whole_install(tmp_path: Path) -> None:
    """Three `host check --install` at once (three terminals): each installs in a directory of
    its own and the swaps into place take turns, so every one lands and one whole install is
    left, with nothing half-made beside it."""
    import subprocess

    from tests.conftest import REPO_ROOT

    with bare_host(tmp_path) as host:
        runs = [
            subprocess.Popen(
                [sys.executable, "-P", "-m", "laneboard", "host", "check", "build", "--install"],
                cwd=tmp_path,
                env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(3)
        ]
        said = [run.communicate(timeout=300) for run in runs]
        for out, err in said:
            assert f"ok laneboard       laneboard {__version__}" in out, (out, err)
        assert sum("installed laneboard" in err for _, err in said) >= 1
        place = host.home / ".local" / "share" / "laneboard"
        assert sorted(p.name for p in place.iterdir()) == [__version__]
        program = place / __version__ / "bin" / "laneboard"
        env = {k: v for k, v in host.env.items() if k != "PYTHONPATH"}
        ran = subprocess.run(
            [str(program), "--version"], env=env, capture_output=True, text=True, check=False
        )
        assert (ran.returncode, ran.stdout.strip()) == (0, f"laneboard {__version__}")
