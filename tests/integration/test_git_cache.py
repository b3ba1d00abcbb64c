"""Git states kept by the controller are used by readers only with a proof that nothing changed
since (docs/board.md): a read right after a write shows the write, whatever wrote it (an agent's
editor, git in the worktree, a commit, a branch moved) and whenever (during the controller's own
`git status`); a controller that dies leaves readers computing; after a restart every state is
right. Real git, real files, the real feed of the board in a thread as the controller."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from laneboard.core.adapters import gitcache
from laneboard.core.adapters.db import Database
from laneboard.core.adapters.db import default_path as ledger_path
from laneboard.core.domain.models import Actor
from laneboard.core.domain.views import GitState
from laneboard.core.operations import gitstate
from laneboard.core.service.app import Service
from laneboard.tui.board.feed import Feed
from tests.conftest import REPO_ROOT, git, make_repo, run_cli

DEADLINE = 60.0


def wait(check: Callable[[], Any], what: str) -> Any:
    end = time.monotonic() + DEADLINE
    while time.monotonic() < end:
        found = check()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"not within {DEADLINE}s: {what}")


def make_tasks(repo: Path, names: list[str]) -> None:
    for name in names:
        made = run_cli("new", name, "--no-start", cwd=repo)
        assert made.code == 0, made.err


class Statuses:
    """Counts the `git status` runs of this thread (the reader's), not the controller's."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        reader = threading.get_ident()
        real = gitstate._start_status

        def counted(*args: Any, **kwargs: Any) -> Any:
            if threading.get_ident() == reader:
                self.count += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(gitstate, "_start_status", counted)


@pytest.fixture
def controller() -> Iterator[Callable[[], Feed]]:
    """Start the board's feed as the controller, in a thread; stopped after the test."""
    running: list[tuple[Feed, threading.Thread]] = []

    def start() -> Feed:
        feed = Feed(Service(actor=Actor.TUI), lambda update: None)
        thread = threading.Thread(target=feed.run, daemon=True)
        thread.start()
        running.append((feed, thread))
        return feed

    yield start
    for feed, thread in running:
        feed.stop()
        thread.join(timeout=DEADLINE)


def kept(names: list[str]) -> bool:
    """Every task's state is kept and a fence is answered for it."""
    service = Service()
    views = {v.task.name: v.task for v in service.tasks(None, facts=False)}
    proven = gitstate_proven(service, [views[n] for n in names])
    return set(proven) == {views[n].id for n in names}


def gitstate_proven(service: Service, tasks: list[Any]) -> dict[str, GitState]:
    return dict(gitcache.fresh_states(Database(ledger_path()), [t.id for t in tasks]))


def truth(worktree: Path) -> tuple[int, int, int]:
    """(staged, modified, untracked) as git says them now."""
    out = subprocess.run(
        ["git", "status", "--porcelain=v1", "-z", "--untracked-files=all"],
        cwd=worktree,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    lines = [line for line in out.split("\0") if line]
    staged = sum(1 for line in lines if line[0] not in " ?")
    modified = sum(1 for line in lines if line[1] not in " ?")
    untracked = sum(1 for line in lines if line.startswith("??"))
    return staged, modified, untracked


def shown(name: str) -> tuple[int, int, int]:
    view = next(v for v in Service().tasks(None) if v.task.name == name)
    assert view.git is not None
    return view.git.staged, view.git.modified, view.git.untracked


def test_a_write_right_after_a_cached_read_shows_on_the_next_read(
    repo: Path, controller: Callable[[], Feed], monkeypatch: pytest.MonkeyPatch
) -> None:
    names = ["a", "b", "c"]
    make_tasks(repo, names)
    controller()
    wait(lambda: kept(names), "every state kept and proven")
    statuses = Statuses(monkeypatch)
    assert shown("a") == (0, 0, 0)
    assert statuses.count == 0, "a proven state was computed again"
    tree = repo / ".worktrees" / "a"
    steps: list[Callable[[], None]] = [
        lambda: (tree / "new.txt").write_text("an agent's new file\n"),
        lambda: (tree / "README.md").write_text("edited in place\n"),
        lambda: git(tree, "add", "README.md"),
        lambda: (tree / "README.md").write_text("edited again after staging\n"),
        lambda: git(tree, "commit", "-q", "-am", "work"),
        lambda: os.unlink(tree / "new.txt"),
        lambda: (tree / "sub").mkdir(),
        lambda: (tree / "sub" / "deep.txt").write_text("in a directory made just now\n"),
        lambda: git(tree, "reset", "-q", "--hard", "HEAD~1"),
    ]
    for step in steps:
        step()
        assert shown("a") == truth(tree), "a read right after a write missed it"
    wait(lambda: kept(names), "kept again once the controller read the changes")


def test_a_branch_moved_elsewhere_changes_ahead_and_behind_at_once(
    repo: Path, controller: Callable[[], Feed]
) -> None:
    make_tasks(repo, ["a"])
    controller()
    wait(lambda: kept(["a"]), "kept")
    (repo / "more.txt").write_text("on main\n")
    git(repo, "add", "more.txt")
    git(repo, "commit", "-q", "-m", "main moves on")  # in the root: the target moved
    view = next(v for v in Service().tasks(None) if v.task.name == "a")
    assert view.git is not None and view.git.behind == 1


def test_a_change_seen_during_the_controllers_status_is_not_kept_as_fresh(
    repo: Path, controller: Callable[[], Feed]
) -> None:
    """The compare-and-swap: a state computed before a change the watch saw is refused."""
    make_tasks(repo, ["a"])
    controller()
    wait(lambda: kept(["a"]), "kept")
    service = Service()
    task = next(v.task for v in service.tasks(None, facts=False))
    cache = gitcache.GitCache(Database(ledger_path()))
    gens = cache.generations([task.id])
    before = GitState(present=True, head="0" * 40)  # what a status begun now would say
    (repo / ".worktrees" / "a" / "late.txt").write_text("lands while git status runs\n")
    wait(lambda: cache.generations([task.id]) != gens, "the watch saw the write")
    assert not cache.store(task.id, gens[task.id], "any", before)
    assert shown("a") == (0, 0, 1)


def test_a_killed_controller_makes_reads_compute_again(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_tasks(repo, ["a", "b"])
    code = (
        "import threading, time\n"
        "from laneboard.core.domain.models import Actor\n"
        "from laneboard.core.service.app import Service\n"
        "from laneboard.tui.board.feed import Feed\n"
        "Feed(Service(actor=Actor.TUI), lambda update: None).run()\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait(lambda: kept(["a", "b"]), "kept by the controller process")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=DEADLINE)
    (repo / ".worktrees" / "b" / "after.txt").write_text("written after the controller died\n")
    statuses = Statuses(monkeypatch)
    assert shown("b") == (0, 0, 1)
    assert statuses.count == 2, "every state is computed once no controller proves them"
    assert not kept(["a", "b"])


def test_every_state_is_right_after_a_restart(
    repo: Path, tmp_path: Path, controller: Callable[[], Feed]
) -> None:
    """200 tasks in 5 repositories, as the benchmark has them: the first controller keeps
    every state and closes; while none runs, files are added, changed, staged and committed in
    most worktrees; the next controller's states, as a reader gets them, are what git says."""
    repos = [repo, *(make_repo(tmp_path / f"more{n}") for n in range(4))]
    names = [f"t{n:03d}" for n in range(200)]
    where = {name: repos[n % len(repos)] for n, name in enumerate(names)}
    for at in repos:
        make_tasks(at, [name for name in names if where[name] == at])
    first = Feed(Service(actor=Actor.TUI), lambda update: None)
    thread = threading.Thread(target=first.run, daemon=True)
    thread.start()
    wait(lambda: kept(names), "kept")
    first.stop()  # the board closes (one controller per process: it is gone before the next)
    thread.join(timeout=DEADLINE)
    for n, name in enumerate(names):  # changes while no controller runs
        tree = where[name] / ".worktrees" / name
        if n % 4 == 0:
            (tree / "new.txt").write_text("untracked\n")
        elif n % 4 == 1:
            (tree / "README.md").write_text("modified\n")
        elif n % 4 == 2 and n % 8 == 2:
            (tree / "staged.txt").write_text("staged\n")
            git(tree, "add", "staged.txt")
        elif n % 4 == 2:
            git(tree, "commit", "-q", "--allow-empty", "-m", "ahead")
    controller()
    wait(lambda: kept(names), "kept by the new controller")
    views = {v.task.name: v for v in Service().tasks(None)}
    for name in names:
        tree = where[name] / ".worktrees" / name
        git_state = views[name].git
        assert git_state is not None
        seen = (git_state.staged, git_state.modified, git_state.untracked)
        assert seen == truth(tree), name
        assert git_state.head == git(tree, "rev-parse", "HEAD"), name
        ahead = git(tree, "rev-list", "--count", f"{views[name].task.target}..HEAD")
        assert git_state.ahead == int(ahead), name


def test_a_cache_directory_git_does_not_ignore_is_never_trusted_to_the_watch(
    repo: Path, controller: Callable[[], Feed]
) -> None:
    """The watch leaves `node_modules/` and the like out; when git does not ignore one, a
    change there counts, so no state of that task is kept, and every read computes it."""
    make_tasks(repo, ["a", "b"])
    modules = repo / ".worktrees" / "a" / "node_modules"
    modules.mkdir()
    (modules / "one.js").write_text("1\n")
    (repo / ".worktrees" / "b" / ".gitignore").write_text("node_modules/\n")
    (repo / ".worktrees" / "b" / "node_modules").mkdir()
    controller()
    wait(lambda: kept(["b"]), "b kept: git ignores its node_modules/")
    assert not kept(["a"])
    (modules / "two.js").write_text("2\n")  # under a directory no watch sees
    assert shown("a") == (0, 0, 2)


def test_a_change_the_watch_missed_is_set_right_by_the_backstop(
    repo: Path, controller: Callable[[], Feed], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kept state can be wrong if its watch never reported the change and never said it
    lost one (a filesystem no watch sees into). The backstop re-reads and keeps each task in
    turn, so it is set right within its round."""
    from laneboard.tui.board import feed as feed_module

    monkeypatch.setattr(feed_module, "BACKSTOP_EVERY", 0.3)
    make_tasks(repo, ["a"])
    feed = controller()
    wait(lambda: kept(["a"]), "kept")
    seen = feed._seen

    def deaf(watch: Any, changes: set[tuple[Any, str]]) -> None:
        if not any(path.endswith("lost.txt") for _change, path in changes):
            seen(watch, changes)

    monkeypatch.setattr(feed, "_seen", deaf)
    (repo / ".worktrees" / "a" / "lost.txt").write_text("its event never arrives\n")
    wait(lambda: shown("a") == (0, 0, 1), "the backstop set the kept state right")


def test_a_change_lost_in_an_overflow_is_read_at_once(
    repo: Path, controller: Callable[[], Feed], monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the kernel's queue overflows, the change is lost and the watch says only that
    something was: every kept state is forgotten and everything read again, at once (the
    backstop is out of the way here)."""
    from laneboard.tui import dirwatch
    from laneboard.tui.board import feed as feed_module

    monkeypatch.setattr(feed_module, "BACKSTOP_EVERY", 3600.0)
    make_tasks(repo, ["a", "b"])
    feed = controller()
    wait(lambda: kept(["a", "b"]), "kept")
    seen, refresh = feed._seen, feed._refresh
    lost, go_on = threading.Event(), threading.Event()

    def overflowed(watch: Any, changes: set[tuple[str, str]]) -> None:
        if any(path.endswith("lost.txt") for _change, path in changes):
            changes = {(dirwatch.OVERFLOW, "")}  # what the kernel says when it dropped events
            seen(watch, changes)
            lost.set()
        else:
            seen(watch, changes)

    def held(only: Any) -> None:
        if only is None:
            go_on.wait(DEADLINE)  # the full read waits: the read below comes before it
        refresh(only)

    monkeypatch.setattr(feed, "_seen", overflowed)
    monkeypatch.setattr(feed, "_refresh", held)
    (repo / ".worktrees" / "b" / "lost.txt").write_text("its event is lost\n")
    assert lost.wait(DEADLINE)
    assert shown("b") == (0, 0, 1)  # no kept state is used: the overflow forgot them all
    go_on.set()
    wait(lambda: kept(["a", "b"]), "every state kept again after the full read")
    assert shown("b") == (0, 0, 1)


def test_a_worktree_swapped_under_a_proven_state_is_shown_rejected_not_verified(
    repo: Path, controller: Callable[[], Feed]
) -> None:
    """A read reuses the verdict of a worktree whose state the controller proves unchanged,
    checking only that its path still leads to the pinned directory and `.git` file. Copies
    put in the worktrees' place (the originals moved aside with their parent: nothing inside
    them changed, so the watch proves their states still fresh) must be shown rejected, as a
    full verification says."""
    names = ["a", "b"]
    make_tasks(repo, names)
    controller()
    wait(lambda: kept(names), "every state kept and proven")
    views = {v.task.name: v for v in Service().tasks(None)}
    assert views["a"].verdict is not None and views["a"].verdict.ok

    # The worktrees' parent moved aside and a copy put in its place: the watched directories
    # (the originals) saw nothing, so their states are still proven fresh.
    area = repo / ".worktrees"
    subprocess.run(["cp", "-a", str(area), str(repo / ".copy")], check=True)
    os.rename(area, repo / ".aside")
    os.rename(repo / ".copy", area)
    assert kept(names), "the watch saw the parent move: this test no longer tests the reuse"
    for view in Service().tasks(None):
        verdict = view.verdict
        assert verdict is not None and not verdict.ok, "a copy in the worktree's place verified"
        assert view.git is not None and not view.git.present
