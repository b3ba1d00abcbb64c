"""A host's tasks streamed over ssh (`Service.watch_host`, docs/hosts.md "Streaming"), against a
real sshd on loopback (`tests/sshd.py`): a change there shows without a poll, a stream that
falls silent makes the host unreachable, and the first answer after a reconnect says when the
host's tmux server is not the one it was (its panes gone, its tasks' runtime lost)."""

from __future__ import annotations

import json
import os
import shlex
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from laneboard.core.domain.hosts import STREAM_HEARTBEAT, HostTasks
from tests.conftest import make_repo, run_cli
from tests.procs import DEADLINE
from tests.sshd import Remote, add_host, remote

__all__ = ["remote"]  # the fixture
SILENT = int(2 * STREAM_HEARTBEAT)
"""The host's `silent` here: the least it may be (two heartbeats)."""
pytestmark = pytest.mark.tmux


class Watched:
    """The answers `watch_host` posted for host `build`, from a thread of the test."""

    def __init__(self, host: str = "build") -> None:
        from laneboard.tui.root import open_service

        self.host = host
        self.service = open_service()
        self.answers: list[HostTasks] = []
        self.stop = threading.Event()
        self.changed = threading.Condition()
        self.read = 0
        """Answers before this one were looked at by an `until` already."""
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        self.service.watch_host(self.service.host(self.host), self._post, self.stop)

    def _post(self, answer: HostTasks) -> None:
        with self.changed:
            self.answers.append(answer)
            self.changed.notify_all()

    def until(
        self, wanted: Callable[[HostTasks], bool], what: str, within: float = DEADLINE
    ) -> HostTasks:
        """The first answer after the last `until`'s for which `wanted` holds."""
        end = time.monotonic() + within
        with self.changed:
            while True:
                for answer in self.answers[self.read :]:
                    self.read += 1
                    if wanted(answer):
                        return answer
                if time.monotonic() > end:
                    raise AssertionError(f"{what}: not within {within}s ({self.answers[-3:]})")
                self.changed.wait(0.2)


@contextmanager
def watching(host: str = "build") -> Iterator[Watched]:
    watched = Watched(host)
    watched.thread.start()
    try:
        yield watched
    finally:
        watched.stop.set()
        watched.thread.join(timeout=DEADLINE)
        assert not watched.thread.is_alive(), "the watch did not end when asked"


def states(answer: HostTasks) -> dict[str, str]:
    return {t.name: t.state for t in answer.tasks}


def agent(answer: HostTasks, name: str) -> str | None:
    """What the host says task `name`'s agent does (`lost`: its pane is gone)."""
    for task in answer.tasks:
        if task.name == name and isinstance(task.document.get("agent"), dict):
            return str(task.document["agent"]["state"])
    return None


def test_a_change_on_the_host_streams_and_a_silent_stream_is_unreachable(
    tmp_path: Path, remote: Remote
) -> None:
    from laneboard.core.adapters.config import set_user_value

    set_user_value("hosts.build", "silent", SILENT)
    there = make_repo(tmp_path / "host" / "repo")
    made = run_cli("new", "t", "--host", "build", "--repo", str(there), "--no-start", cwd=tmp_path)
    assert made.code == 0, made.err
    with watching() as watched:
        watched.until(lambda a: a.reachable and states(a) == {"t": "provisioned"}, "the task")
        # Made on the host itself, not through this machine: the stream tells.
        made = remote.laneboard("--repo", str(there), "new", "u", "--no-start")
        assert made.code == 0, made.err
        watched.until(lambda a: "u" in states(a), "the host's new task, streamed")

        pids = remote.followers()
        assert len(pids) == 1, [Path(f"/proc/{p}/cmdline").read_bytes() for p in pids]
        os.kill(pids[0], signal.SIGSTOP)  # the host hangs: the connection itself stays up
        try:
            quiet = time.monotonic()
            gone = watched.until(lambda a: not a.reachable, "unreachable", within=SILENT + DEADLINE)
            assert time.monotonic() - quiet >= SILENT - 1
            assert gone.error and f"no answer in {SILENT}s" in gone.error
            assert states(gone) == {"t": "unreachable", "u": "unreachable"}
        finally:
            os.kill(pids[0], signal.SIGCONT)
        watched.until(lambda a: a.reachable and "u" in states(a), "back")


def test_a_host_whose_tmux_server_is_gone_says_so_once_and_its_task_is_runtime_lost(
    tmp_path: Path, remote: Remote
) -> None:
    """Watched from before the host's tmux server existed: the server its first task started
    is what the host is known by from then on (the stream says so when it changes)."""
    remote.use_fake_agent()
    there = make_repo(tmp_path / "host" / "repo")
    with watching() as watched:
        watched.until(lambda a: a.reachable and states(a) == {}, "no tasks yet, no tmux there")
        made = run_cli(
            "new", "t", "--host", "build", "--repo", str(there), "--prompt", "hi", cwd=tmp_path
        )
        assert made.code == 0, made.err
        watched.until(lambda a: a.reachable and states(a) == {"t": "running"}, "running")
        # The stream says the host's tmux server once its next look comes (its heartbeat's
        # time), so the server is known before the host goes away.
        watched.until(lambda a: agent(a, "t") == "idle", "its first turn done")
        time.sleep(STREAM_HEARTBEAT + 1)
        assert all(a.restarted is None for a in watched.answers)

        remote.sshd.stop()
        watched.until(lambda a: not a.reachable, "unreachable")
        remote.close()  # the host's tmux server ends (as at a reboot) while it is away
        remote.sshd.start()
        back = watched.until(lambda a: a.reachable, "back")
        assert back.restarted == "tmux server ended"
        lost = watched.until(lambda a: agent(a, "t") == "lost", "its runtime lost")
        assert lost.restarted is None or lost is back  # said once
        later = watched.answers[watched.answers.index(lost) + 1 :]
        assert all(a.restarted is None for a in later)

        resumed = run_cli("resume", "build:t", cwd=tmp_path)
        assert resumed.code == 0, resumed.err
        watched.until(lambda a: agent(a, "t") not in (None, "lost"), "its agent again")


def test_tasks_that_left_the_host_are_not_kept_as_its_last_answer(
    tmp_path: Path, remote: Remote
) -> None:
    """The last thing a host said is what shows while it is away, even when it was "no
    tasks" said within a second of the one before."""
    there = make_repo(tmp_path / "host" / "repo")
    made = run_cli("new", "t", "--host", "build", "--repo", str(there), "--no-start", cwd=tmp_path)
    assert made.code == 0, made.err
    with watching() as watched:
        watched.until(lambda a: a.reachable and states(a) == {"t": "provisioned"}, "the task")
        for words in (["new", "u", "--no-start"], ["discard", "u"], ["discard", "t"]):
            done = remote.laneboard("--repo", str(there), *words)
            assert done.code == 0, done.err
        watched.until(lambda a: a.reachable and states(a) == {}, "no tasks there")
        remote.sshd.stop()
        away = watched.until(lambda a: not a.reachable, "unreachable")
        assert states(away) == {}, "tasks that left came back as unreachable"
        assert away.error and "unreachable" in away.error


def test_a_stream_that_says_something_not_laneboards_is_unreachable_then_opened_again(
    tmp_path: Path, remote: Remote
) -> None:
    """A host whose stream breaks its form (here: `tasks` not a list, after a good first
    list) is shown unreachable with the reason, its rows as last seen, and the stream is
    opened again; the board's thread goes on."""
    there = make_repo(tmp_path / "host" / "repo")
    made = run_cli("new", "t", "--host", "build", "--repo", str(there), "--no-start", cwd=tmp_path)
    assert made.code == 0, made.err
    odd = tmp_path / "odd-laneboard"
    once = tmp_path / "odd-once"
    first = {
        "schema": "tasks/1",
        "tasks": [{"id": "abcdef012345", "name": "ghost", "state": "running"}],
        "host": {},
    }
    odd.write_text(
        f"#!/bin/sh\nif [ ! -e {once} ]; then\n  touch {once}\n"
        f"  echo {shlex.quote(json.dumps(first))}\n"
        f"  echo {shlex.quote(json.dumps({'tasks': 5}))}\n"
        "  exec cat >/dev/null\nfi\n"
        f'exec {remote.wrapper} "$@"\n'
    )
    odd.chmod(0o755)
    add_host("odd", remote, odd, tmp_path)
    with watching("odd") as watched:
        watched.until(lambda a: a.reachable and states(a) == {"ghost": "running"}, "the first list")
        broken = watched.until(lambda a: not a.reachable, "unreachable")
        assert broken.error and "its stream's tasks or gone are not lists" in broken.error
        assert states(broken) == {"ghost": "unreachable"}
        watched.until(lambda a: a.reachable and states(a) == {"t": "provisioned"}, "opened again")
