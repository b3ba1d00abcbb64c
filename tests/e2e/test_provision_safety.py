"""Provisioning that never writes outside the worktree, starts where git would, says what it
does while it does it, and cleans up after an interruption."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import stat
from pathlib import Path

from tests.conftest import DEADLINE, git
from tests.procs import Spawned


def _copied(cli, name: str) -> dict[str, object]:
    events = json.loads(cli("log", name, "--json").out)["events"]
    return next(e["data"] for e in events if e["kind"] == "files.copied")


def test_copies_never_follow_a_link_in_the_worktree(repo: Path, cli, tmp_path: Path) -> None:
    """Was lost: the base commit has `conf -> <outside>`; `new` copied `conf/app.local` through
    the link, writing outside the worktree (and over whatever was there)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (repo / "conf").symlink_to(outside)
    git(repo, "add", "conf")
    git(repo, "commit", "-q", "-m", "conf is a link in the tree")
    (repo / "conf").unlink()  # in the root, conf is now a real directory with a local file
    (repo / "conf").mkdir()
    (repo / "conf" / "app.local").write_text("root's local config\n")
    (repo / ".laneboard.toml").write_text('[provision]\ncopy = ["conf/*.local"]\n')
    assert cli("new", "c", "--no-start").code == 0
    assert list(outside.iterdir()) == []
    copied = _copied(cli, "c")
    assert copied["copied"] == []
    assert copied["skipped"] == ["conf/app.local (conf is not a directory in the worktree)"]


def test_copies_are_read_only_from_inside_the_root(repo: Path, cli, tmp_path: Path) -> None:
    """A source reached through a symlinked directory of the root, or outside it, is never
    copied; a pattern that matches nothing is reported."""
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "token.local").write_text("someone else's secret\n")
    (tmp_path / "up.local").write_text("outside the root\n")
    (repo / "linked").symlink_to(secrets)
    (repo / ".env").write_text("KEY=1\n")
    (repo / ".env").chmod(0o600)
    (repo / ".laneboard.toml").write_text(
        '[provision]\ncopy = [".env", "linked/*.local", "../up.local", "nothing/*.x"]\n'
    )
    assert cli("new", "r", "--no-start").code == 0
    worktree = repo / ".worktrees" / "r"
    copied = _copied(cli, "r")
    assert copied["copied"] == [".env"]
    assert copied["skipped"] == [
        "linked/token.local (reached through a symbolic link in the root)",
        "../up.local (outside the root)",
        "nothing/*.x (matches nothing)",
    ]
    assert not (worktree / "linked").exists()
    assert stat.S_IMODE((worktree / ".env").stat().st_mode) == 0o600  # a secret stays private
    assert (worktree / ".env").read_text() == "KEY=1\n"


def test_base_head_means_the_head_of_the_worktree_it_is_run_in(repo: Path, cli) -> None:
    """Was wrong: `--base HEAD` run inside a worktree meant the root's HEAD."""
    assert cli("new", "a", "--no-start").code == 0
    inside = repo / ".worktrees" / "a"
    git(inside, "commit", "-q", "--allow-empty", "-m", "work in a")
    a_head = git(inside, "rev-parse", "HEAD")
    created = cli("new", "b", "--no-start", "--base", "HEAD", "--json", cwd=inside)
    assert created.code == 0, created.err
    task = json.loads(created.out)
    assert task["base_sha"] == a_head != git(repo, "rev-parse", "HEAD")
    assert task["repo"] == str(repo)
    previous = cli("new", "c", "--no-start", "--base", "HEAD~1", "--json", cwd=inside)
    assert json.loads(previous.out)["base_sha"] == git(repo, "rev-parse", "HEAD")


def test_setup_output_is_streamed_as_it_comes_and_kept_in_the_journal(
    repo: Path, cli, shared: Path
) -> None:
    """Was swallowed until the setup ended, so a long `npm ci` looked hung."""
    gate = shared / "gate"  # the setup runs confined: it sees the test's home, not its /tmp
    os.mkfifo(gate)
    (repo / ".laneboard.toml").write_text(
        f'[provision]\nsetup = "echo fetching; read x < {gate}; echo installed"\n'
    )
    new = Spawned(["new", "s", "--no-start"], repo)
    try:
        new.expect(r"^fetching$", "err")  # before the setup has ended
        with open(gate, "w") as release:
            release.write("go\n")
        new.expect(r"^installed$", "err")
        assert new.wait() == 0
    finally:
        new.close()
    events = json.loads(cli("log", "s", "--json").out)["events"]
    done = next(e["data"] for e in events if e["kind"] == "setup.done")
    assert done["output"] == "fetching\ninstalled\n"
    assert Path(done["log"]).read_text() == "fetching\ninstalled\n"


def test_ctrl_c_during_worktree_add_rolls_back(repo: Path, cli, tmp_path: Path) -> None:
    """Was stuck: Ctrl-C during `git worktree add` skipped rollback and left the task in
    `provisioning` with no hint."""
    started = tmp_path / "checkout-started"
    os.mkfifo(started)
    hook = repo / ".git" / "hooks" / "post-checkout"
    pidfile = tmp_path / "hook.pid"
    hook.write_text(
        f"#!/bin/sh\necho $$ > {pidfile}\necho in-checkout > {started}\nexec sleep 300\n"
    )
    hook.chmod(0o755)
    before = git(repo, "for-each-ref", "--format=%(refname) %(objectname)")
    new = Spawned(["new", "i", "--no-start"], repo)
    fd = os.open(started, os.O_RDONLY | os.O_NONBLOCK)
    try:
        ready, _, _ = select.select([fd], [], [], DEADLINE)
        assert ready, "git worktree add never reached its post-checkout hook"
        os.killpg(new.pid, signal.SIGINT)  # what the terminal's Ctrl-C does: the whole group
        assert new.wait() == 1
        new.expect(r"provisioning i failed: interrupted", "err")
    finally:
        os.close(fd)
        new.close()
        with contextlib.suppress(OSError, ValueError):  # the hook's sleep, if git left it
            os.kill(int(pidfile.read_text()), signal.SIGKILL)
    task = json.loads(cli("show", "i", "--json").out)
    assert task["state"] == "failed"
    assert git(repo, "for-each-ref", "--format=%(refname) %(objectname)") == before
    assert not (repo / ".worktrees" / "i").exists()
    assert not (repo / ".git" / "worktrees" / "i").exists()
    assert json.loads(cli("doctor", "--json").out)["findings"] == []
