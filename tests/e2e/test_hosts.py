"""Tasks on another host, over a real sshd on the loopback address (`tests/sshd.py`): the
"host" is this machine with a laneboard of its own (another `LANEBOARD_HOME`, `HOME` and tmux
socket), reached only through ssh. The local laneboard runs in the test process with the test's
isolated state, and knows the host only as `host add` configured it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from laneboard import __version__
from tests.conftest import git, make_repo, run_cli
from tests.e2e.test_json_schema import check
from tests.sshd import Remote, add_host, remote

__all__ = ["remote"]  # the fixture

pytestmark = pytest.mark.tmux

DEADLINE = 20.0


def eventually(check: Callable[[], Any], what: str) -> Any:
    end = time.monotonic() + DEADLINE
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > end:
            raise AssertionError(f"{what}: not within {DEADLINE}s (last answer {found!r})")
        time.sleep(0.05)


def lb(*args: str, cwd: Path) -> Any:
    return run_cli(*args, cwd=cwd)


def listed(cwd: Path) -> dict[str, dict[str, Any]]:
    """`ls --json` outside any repository: every task, here and on the hosts, by its name."""
    result = lb("ls", "--json", cwd=cwd)
    assert result.code == 0, result.err
    tasks = json.loads(result.out)["tasks"]
    return {(f"{t['host']}:" if t["host"] else "") + t["name"]: t for t in tasks}


def ledger_rows(home: Path) -> list[Any]:
    """Every row of the local ledger's tasks and events (what a command here changed)."""
    path = home / "ledger.sqlite3"
    if not path.exists():
        return []
    with sqlite3.connect(path) as db:
        return [*db.execute("select * from tasks"), *db.execute("select * from events")]


def test_host_add_ls_and_check_say_what_the_host_has(tmp_path: Path, remote: Remote) -> None:
    listing = json.loads(lb("host", "ls", "--json", cwd=tmp_path).out)
    check("host-ls", listing)
    hosts = listing["hosts"]
    assert [(h["name"], h["destination"], h["laneboard"]) for h in hosts] == [
        ("build", "remote", str(remote.wrapper))
    ]
    again = lb("host", "add", "build", "elsewhere", cwd=tmp_path)
    assert (again.code, again.err.count("\n")) == (1, 1) and "configured already" in again.err

    checked = lb("host", "check", "build", "--agent", "claude", "--json", cwd=tmp_path)
    check("host-check", json.loads(checked.out))
    tools = {t["name"]: t for t in json.loads(checked.out)["tools"]}
    assert tools["laneboard"]["found"] == f"laneboard {__version__}"
    assert tools["laneboard"]["problem"] is None
    assert tools["git"]["found"].startswith(shutil.which("git") or "git")
    assert tools["tmux"]["found"] is not None
    installed = shutil.which("claude") is not None
    assert (tools["agent:claude"]["found"] is not None) == installed
    assert checked.code == (
        0 if all(t["found"] and not t["problem"] for t in tools.values()) else 1
    )
    text = lb("host", "check", "build", "--agent", "claude", cwd=tmp_path).out
    if not installed:
        assert "-- agent:claude    missing: needed for the agent the tasks run" in text

    unknown = lb("host", "check", "nope", cwd=tmp_path)
    assert (unknown.code, unknown.err) == (1, "laneboard: no host 'nope' (hosts: build)\n")


def test_a_task_on_the_host_from_new_to_finalize(tmp_path: Path, remote: Remote) -> None:
    """new, its state, send, pause/resume, review and finalize of a task on the host, each
    run by the host's laneboard; the local ledger holds none of it."""
    remote.use_fake_agent()
    repo = make_repo(tmp_path / "host" / "repo")
    assert lb("init", "--host", "build", str(repo), cwd=tmp_path).code == 0
    made = lb("new", "t", "--host", "build", "--repo", str(repo), "--prompt", "hi", cwd=tmp_path)
    assert made.code == 0, made.err
    assert "running in pane %" in made.out and "lb/t/work" in made.out

    pane = listed(tmp_path)["build:t"]["pane"]["pane_id"]

    def screen() -> str:
        done = subprocess.run(
            ["tmux", "-L", remote.socket, "capture-pane", "-p", "-J", "-t", pane],
            capture_output=True,
            text=True,
            check=False,
        )
        return done.stdout

    eventually(lambda: "done: hi" in screen(), "the first turn on the host")
    task = listed(tmp_path)["build:t"]
    assert (task["state"], task["reachable"], task["repo"]) == ("running", True, str(repo))

    assert lb("send", "build:t", "again", cwd=tmp_path).code == 0
    eventually(lambda: "done: again" in screen(), "the prompt sent over ssh")
    assert lb("pause", "build:t", cwd=tmp_path).code == 0
    assert listed(tmp_path)["build:t"]["state"] == "paused"
    assert lb("resume", "build:t", cwd=tmp_path).code == 0
    eventually(lambda: "resumed conversation" in screen(), "the resumed agent")

    worktree = repo / ".worktrees" / "t"
    (worktree / "feature.txt").write_text("made on the host\n")
    git(worktree, "add", "feature.txt")
    git(worktree, "commit", "-q", "-m", "the host's work")
    review = lb("review", "build:t", "--json", cwd=tmp_path)
    assert [f["path"] for f in json.loads(review.out)["files"]] == ["feature.txt"]
    assert lb("review", "build:t", "--mark", cwd=tmp_path).code == 0
    assert lb("pause", "build:t", cwd=tmp_path).code == 0
    finalized = lb("finalize", "build:t", "--merge", cwd=tmp_path)
    assert finalized.code == 0, finalized.err
    assert git(repo, "show", "main:feature.txt") == "made on the host"
    assert "build:t" not in listed(tmp_path)  # retired there, so not live here either
    assert ledger_rows(Path(os.environ["LANEBOARD_HOME"])) == []


def test_a_host_that_stops_answering_makes_its_tasks_unreachable_then_back(
    tmp_path: Path, remote: Remote
) -> None:
    repo = make_repo(tmp_path / "host" / "repo")
    here = make_repo(tmp_path / "here")
    assert lb("new", "mine", "--no-start", cwd=here).code == 0
    made = lb("new", "t", "--host", "build", "--repo", str(repo), "--no-start", cwd=tmp_path)
    assert made.code == 0, made.err
    assert listed(tmp_path)["build:t"]["state"] == "provisioned"
    home = Path(os.environ["LANEBOARD_HOME"])
    before = ledger_rows(home)

    remote.sshd.stop()  # the host goes away, and the connection with it
    result = lb("ls", cwd=tmp_path)
    assert result.code == 0
    line = next(x for x in result.out.splitlines() if x.startswith("build:t "))
    assert "unreachable (provisioned" in line
    assert "laneboard: host build (remote) unreachable:" in result.err
    document = listed(tmp_path)
    check("ls-hosts", json.loads(lb("ls", "--json", cwd=tmp_path).out))
    assert document["build:t"]["state"] == "unreachable"
    assert document["build:t"]["last_state"] == "provisioned"
    assert document["mine"]["state"] == "provisioned"  # this machine's tasks are as they were

    refused = lb("discard", "build:t", cwd=tmp_path)
    assert refused.code == 1 and refused.err.count("\n") == 1
    assert refused.err.startswith("laneboard: host build (remote) unreachable: ")
    assert ledger_rows(home) == before  # nothing here changed because of it
    assert (repo / ".worktrees" / "t").is_dir()  # nor there

    remote.sshd.start()
    assert listed(tmp_path)["build:t"]["state"] == "provisioned"
    assert lb("discard", "build:t", cwd=tmp_path).code == 0
    assert not (repo / ".worktrees" / "t").exists()
    assert ledger_rows(home) == before


def test_a_killed_master_connection_is_opened_again(tmp_path: Path, remote: Remote) -> None:
    from laneboard.core.adapters.hosts import find_host
    from laneboard.core.adapters.ssh import Connection

    assert lb("ls", cwd=tmp_path).code == 0
    connection = Connection(find_host("build"), Path(os.environ["LANEBOARD_HOME"]))
    first = connection.master_pid()
    assert first is not None
    os.kill(first, signal.SIGKILL)
    eventually(lambda: connection.master_pid() is None, "the master gone")
    result = lb("ls", cwd=tmp_path)
    assert (result.code, result.err) == (0, "")
    second = connection.master_pid()
    assert second is not None and second != first


def test_a_refusal_on_the_host_is_the_same_line_and_exit_here(
    tmp_path: Path, remote: Remote
) -> None:
    repo = make_repo(tmp_path / "host" / "repo")
    home = Path(os.environ["LANEBOARD_HOME"])
    before = ledger_rows(home)
    there = remote.laneboard("--repo", str(repo), "discard", "nope")
    here = lb("discard", "nope", "--host", "build", "--repo", str(repo), cwd=tmp_path)
    assert there.code == 1 and there.err.count("\n") == 1
    assert (here.code, here.err, here.out) == (there.code, there.err, there.out)
    bad = lb("new", "Bad Name", "--host", "build", "--repo", str(repo), cwd=tmp_path)
    assert bad.code == 1 and bad.err.startswith("laneboard: ") and bad.err.count("\n") == 1
    assert ledger_rows(home) == before
    mixed = lb("wait", "build:a", "other:b", cwd=tmp_path)
    assert (mixed.code, mixed.err) == (2, "laneboard: one host per command: build, other\n")


def test_a_bad_host_table_is_refused_naming_the_file_and_field(tmp_path: Path) -> None:
    home = Path(os.environ["LANEBOARD_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text('[hosts.b]\nssh = "me@b"\npoll = 0\n')
    result = lb("host", "ls", cwd=tmp_path)
    assert (result.code, result.err) == (
        1,
        f"laneboard: {home / 'config.toml'}: field hosts.b.poll: must be more than 0 seconds\n",
    )
    (home / "config.toml").write_text('[hosts.b]\nssh = "me@b"\nport = 22\n')
    assert "field hosts.b.port: unknown" in lb("host", "ls", cwd=tmp_path).err
    (home / "config.toml").write_text('[hosts.b]\nssh = "me@b"\nsilent = 3\n')
    assert "field hosts.b.silent: must be at least 10 seconds (two heartbeats)" in (
        lb("host", "ls", cwd=tmp_path).err
    )
    assert lb("host", "add", "local", "x", cwd=tmp_path).err == (
        "laneboard: host name 'local' is reserved: it is this machine\n"
    )


def test_what_a_host_prints_reaches_the_terminal_without_control_characters(
    tmp_path: Path, remote: Remote
) -> None:
    """A host's output comes over the connection as the host chooses: a hostile one (here a
    `laneboard` there that prints escapes) must not retitle, clear or program the operator's
    terminal. Control characters show as `?`, text (UTF-8 split between writes included)
    stays as it is; `attach` and `shell` stay raw (a terminal's own session)."""
    import sys

    evil = tmp_path / "evil-laneboard"
    evil.write_text(
        "#!/bin/sh\n"
        "printf 'caf\\303'; sleep 0.2; printf '\\251 \\342\\200\\246 \\033]0;pwned\\007'\n"
        "printf '\\033[2Jcleared \\302\\23331m c1\\n'\n"
        "printf '\\033]52;c;Y2xpcA==\\007clip\\n' >&2\n"
    )
    evil.chmod(0o755)
    add_host("evil", remote, evil, tmp_path)
    done = subprocess.run(
        [sys.executable, "-P", "-m", "laneboard", "ls", "--host", "evil"],
        cwd=tmp_path, capture_output=True, timeout=60, check=False,
    )  # fmt: skip
    out, err = done.stdout.decode(), done.stderr.decode()
    assert "\x1b" not in out + err and "\x07" not in out + err and "\x9b" not in out + err
    assert out == "café … ?]0;pwned??[2Jcleared ?31m c1\n", out
    assert "?]52;c;Y2xpcA==?clip" in err, err
