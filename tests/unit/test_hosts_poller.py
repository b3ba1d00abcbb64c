"""The board's watch of the hosts (`tui.board.hosts.HostsPoller`) outlives any failure of one
host's watch: the failure shows that host's tasks as last seen, `unreachable` with its reason,
and the watch starts again. (A stand-in service: only the poller's own logic is under test.)"""

from __future__ import annotations

import threading
from typing import Any

from laneboard.core.domain.hosts import Host, HostTasks
from laneboard.tui.board import hosts as board_hosts
from laneboard.tui.board.hosts import HostsPoller

HOST = Host("build", "me@build")


class Failing:
    """A service whose first watch of the host fails with a bug, the second answers."""

    def __init__(self) -> None:
        self.calls = 0

    def hosts(self) -> list[Host]:
        return [HOST]

    def watch_host(self, host: Host, post: Any, stop: threading.Event) -> None:
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("a bug in one watch")
        post(HostTasks(host, True, (), 1.0))
        stop.wait()

    def unreachable_answer(self, host: Host, why: str) -> HostTasks:
        return HostTasks(host, False, (), None, why)


def test_a_failing_watch_shows_the_host_unreachable_and_watches_it_again(monkeypatch: Any) -> None:
    monkeypatch.setattr(board_hosts, "HOSTS_EVERY", 0.01)
    posted: list[list[HostTasks]] = []
    answered = threading.Event()

    def post(answers: list[HostTasks]) -> None:
        posted.append(answers)
        if answers[0].reachable:
            answered.set()

    poller = HostsPoller(Failing(), post)
    thread = threading.Thread(target=poller.run, daemon=True)
    thread.start()
    assert answered.wait(30), posted
    poller.stop()
    thread.join(30)
    first = posted[0][0]
    assert not first.reachable and first.error == "RuntimeError: a bug in one watch"
    assert posted[-1][0].reachable
