"""`laneboard ls --json --follow` (docs/hosts.md, "Streaming"): this machine's live tasks as a
stream of JSON lines (the whole list first, then only what changed), a heartbeat while nothing
changes, and an end when its standard input closes. What a host's board reads over ssh."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from laneboard.core.domain.hosts import STREAM_HEARTBEAT
from tests.conftest import REPO_ROOT, make_repo, run_cli
from tests.procs import DEADLINE, LANEBOARD


class Follower:
    """A `ls --json --follow` process and the lines it printed, read on a thread."""

    def __init__(self, cwd: Path) -> None:
        self.process = subprocess.Popen(
            [*LANEBOARD, "ls", "--json", "--follow"],
            cwd=cwd,
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.lines: queue.Queue[dict[str, Any]] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(json.loads(line))

    def until(self, wanted: Any, what: str) -> dict[str, Any]:
        """The first line from now on for which `wanted(line)` holds."""
        end = time.monotonic() + DEADLINE
        seen = []
        while time.monotonic() < end:
            try:
                line = self.lines.get(timeout=0.2)
            except queue.Empty:
                continue
            seen.append(line)
            if wanted(line):
                return line
        raise AssertionError(f"{what}: not within {DEADLINE}s (lines: {seen!r})")


def named(line: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((t for t in line.get("tasks") or [] if t["name"] == name), None)


def test_follow_streams_the_task_list_then_only_what_changed_until_stdin_closes(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path / "repo")
    assert run_cli("new", "t1", "--no-start", cwd=repo).code == 0
    follower = Follower(repo)
    try:
        first = follower.until(lambda line: "schema" in line, "the whole list")
        assert first["schema"].startswith("tasks/")
        assert [t["name"] for t in first["tasks"]] == ["t1"]
        assert set(first["host"]) == {"boot", "tmux"}
        t1 = first["tasks"][0]
        if t1["git"] is None:  # the first paint is the ledger's; the worktree's state follows
            t1 = follower.until(lambda line: (t := named(line, "t1")) and t["git"], "t1's git")
            t1 = named(t1, "t1")

        assert run_cli("new", "t2", "--no-start", cwd=repo).code == 0
        added = follower.until(lambda line: named(line, "t2"), "the new task")
        assert "schema" not in added
        assert named(added, "t1") in (None, t1), "only what changed"

        (Path(t1["worktree_path"]) / "new.txt").write_text("hi\n")
        follower.until(
            lambda line: (t := named(line, "t1")) and t["git"] and t["git"]["untracked"] == 1,
            "the file written in t1's worktree",
        )

        t2 = named(added, "t2")
        assert t2 is not None
        assert run_cli("discard", "t2", cwd=repo).code == 0
        follower.until(lambda line: t2["id"] in (line.get("gone") or []), "t2 gone")

        quiet = time.monotonic()
        follower.until(lambda line: line == {"alive": True}, "the heartbeat")
        assert time.monotonic() - quiet >= STREAM_HEARTBEAT / 2
    finally:
        assert follower.process.stdin is not None
        follower.process.stdin.close()
        code = follower.process.wait(timeout=DEADLINE)
    assert code == 0


def test_follow_is_refused_without_json_and_changes_nothing(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    for words in (["ls", "--follow"], ["ls", "--json", "--follow", "--all"]):
        result = run_cli(*words, cwd=repo)
        assert result.code == 2 and result.err.count("\n") == 1, result
        assert "--follow goes with --json" in result.err


def test_a_reader_that_takes_nothing_ends_the_follower_and_frees_the_controller(
    tmp_path: Path,
) -> None:
    """A frozen reader (its machine suspended, the connection hung: the pipe fills and stays
    full) must not keep the follower blocked forever as this machine's controller: after
    `within` seconds (`STREAM_SILENT` on the command line) without a byte taken it ends, and
    another controller can start. The follower runs here, its pipe made one page small."""
    import fcntl

    from laneboard.tui.follow import follow
    from laneboard.tui.root import open_service

    repo = make_repo(tmp_path / "repo")
    for n in range(4):  # ~2 KiB a task: the first list is more than the pipe holds
        assert run_cli("new", f"t{n}", "--no-start", cwd=repo).code == 0
    out_r, out_w = os.pipe()
    in_r, in_w = os.pipe()
    fcntl.fcntl(out_w, 1031, 4096)  # F_SETPIPE_SZ: one page
    ended = threading.Event()
    with os.fdopen(out_w, "w") as out, os.fdopen(in_r) as into:

        def run() -> None:
            follow(open_service(), out, into, within=1.0)
            ended.set()

        began = time.monotonic()
        threading.Thread(target=run, daemon=True).start()
        try:
            assert ended.wait(DEADLINE), "the follower stayed blocked on its full pipe"
            assert time.monotonic() - began >= 1.0  # it did wait for the reader
            supervised = run_cli("supervise", "--once", cwd=repo)
            assert supervised.code == 0, supervised.err  # the claim was given up
        finally:
            os.close(in_w)
            os.close(out_r)
