"""`TmuxRuntime.look`: every pane and some panes' screens in one tmux invocation, read the same
as `snapshot` and `capture_many` read them, also when a pane is gone by the time it runs."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from laneboard.core.domain.runtime import PaneRef
from laneboard.sessions.tmux import TmuxRuntime


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[TmuxRuntime]:
    found = TmuxRuntime(f"lb-look-{os.getpid()}-{tmp_path.name}")
    yield found
    found._run("kill-server")


def _pane(runtime: TmuxRuntime, session: str, text: str) -> PaneRef:
    out = runtime._cmd(
        "new-session", "-d", "-P", "-F", "#{pane_id}", "-s", session,
        f"printf '{text}\\n'; sleep 300",
    )  # fmt: skip
    return PaneRef(out[0])


def _until(check, what: str) -> None:  # type: ignore[no-untyped-def]
    end = time.monotonic() + 30
    while not check():
        assert time.monotonic() < end, what
        time.sleep(0.05)


def test_look_reads_what_snapshot_and_capture_read(runtime: TmuxRuntime) -> None:
    panes = [_pane(runtime, f"s{n}", f"screen-{n}") for n in range(4)]
    _until(lambda: all(f"screen-{n}" in runtime.capture(p, 5) for n, p in enumerate(panes)), "")
    seen, screens = runtime.look(panes[1:3], 5)
    assert seen == runtime.snapshot()
    assert set(seen) == {p.pane_id for p in panes}
    assert screens == runtime.capture_many(panes[1:3], 5)
    assert set(screens) == {panes[1].pane_id, panes[2].pane_id}
    assert "screen-1" in screens[panes[1].pane_id] and "screen-2" in screens[panes[2].pane_id]


def test_look_at_a_pane_gone_meanwhile_reads_the_others(runtime: TmuxRuntime) -> None:
    panes = [_pane(runtime, f"s{n}", f"screen-{n}") for n in range(3)]
    _until(lambda: "screen-2" in runtime.capture(panes[2], 5), "the last screen")
    runtime._cmd("kill-session", "-t", "s1")
    seen, screens = runtime.look(panes, 5)
    assert set(seen) == {panes[0].pane_id, panes[2].pane_id}
    assert set(screens) == {panes[0].pane_id, panes[2].pane_id}
    assert "screen-2" in screens[panes[2].pane_id]


def test_look_without_a_server_sees_no_pane(runtime: TmuxRuntime) -> None:
    assert runtime.look([PaneRef("%1")], 5) == ({}, {})
