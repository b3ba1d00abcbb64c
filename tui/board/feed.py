"""The board's live feed: one thread that keeps the read model fresh and tells the app.

It wakes on events, never on a fast timer: a watch (`tui.dirwatch`, inotify: idle, it costs
nothing) reports writes in a task's worktree (its cache directories left out), in its admin
dir under the common git dir (HEAD, index and logs move on a commit), in the agents' event
files (hooks) and in the ledger's directory (another laneboard process committed); a slow
tick (`TICK`) reads the one tmux snapshot per tick that screen-only agents and pane deaths
need. On each wake it asks the service for a snapshot with `git status` only for the
worktrees whose files changed (and tasks the journal named), keeps the last git state of the
others, runs the conflict radar when a branch tip moved, and, while the board is the
controller, reconciles first (exits, queued starts, agent states journalled).

Threads: `run` is the feed thread's body (`start` runs it in a daemon thread; `laneboard`
starts it before Textual is even imported and waits a moment for its first full read, see
`tui.cli.FIRST_READ_WAIT`);
the watcher runs in a thread of its own and only puts paths on the queue; `wake` may be called
from any thread. The feed never touches the UI: it hands each `Update` to the `post` the app
`connect`ed (thread-safe, `App.call_from_thread`), and holds the updates made before that.
No pygit2 here: `git status` runs as processes through the service, so the UI thread never
waits for the GIL.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from laneboard.core.domain.errors import LaneboardError
from laneboard.core.domain.models import Event
from laneboard.core.domain.review import Overlap
from laneboard.core.domain.values import replace
from laneboard.core.domain.views import BoardSnapshot, GitState, Keeping, TaskView, WatchSet
from laneboard.tui.dirwatch import Stop
from laneboard.tui.treewalk import watch_trees

TICK = 2.0
"""Seconds between the tmux polls (one `list-panes`: did a pane die, or print?) when nothing
else happens; hooks, file changes and other processes' commits are read at once."""
GAP = 0.1
"""Seconds at least between two refreshes: a burst of writes is read once (the board repaints
at most a few times a second)."""
OBSERVE = 5.0
"""A pane that only printed (its agent's state read from its screen) is re-read at most this
often; hook events, deaths and file changes are read at once."""
UNWATCHED_EVERY = 5.0
"""Seconds between `git status` runs of a worktree too big to watch."""
BACKSTOP_EVERY = 30.0
"""Seconds between two looks of the backstop, which re-reads `BACKSTOP_TASKS` tasks in turn
whatever happened (a watch event that was missed is caught there): its cost does not grow with
the number of tasks, only the time it takes to come round to each. The watch reports the one
loss the kernel knows of (its queue overflowed: everything is read again), so the backstop
guards only against what no watch sees; at 200 tasks a round takes 50 minutes. Each look
costs two processes per task: it is most of what an idle board spends."""
BACKSTOP_TASKS = 2
SLOWEST_TICK = 8.0
"""While panes live and nothing moves, the tmux poll backs off from `TICK` to this."""
ARM_WITHIN = 3.0
"""Seconds the controller waits for its first watch to be set up before its first full read
(it reads anyway after that; the states are then kept from the next read on)."""
MARK_EVERY = 0.05
"""Seconds between two markers while the first watch is being set up (see `_watch_first`)."""
CLAIM_EVERY = 5.0
"""While another process is the controller, this board asks to take its place this often."""
RADAR_EVERY = 300.0
"""The radar is also recomputed this often (a target moved in a repo laneboard does not watch)."""
REF_FILES = frozenset({"packed-refs", "HEAD", "config"})
"""Files of the common git dir whose change can move a branch or change what `git status`
says (`config`)."""


@dataclass(frozen=True)
class Update:
    """What the feed tells the app after one wake."""

    snapshot: BoardSnapshot
    radar: dict[str, tuple[Overlap, ...]]
    events: tuple[Event, ...] = ()
    """Journal events since the last update (what other processes did)."""
    controller: int | None = None
    """The pid of another process that is the controller (None: this board is, or none)."""
    error: str | None = None


@dataclass
class _Plan:
    dirs: list[str] = field(default_factory=list)
    owners: list[tuple[str, str]] = field(default_factory=list)
    """(directory prefix, task id), longest first."""
    refs: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """A directory of refs (or a common dir, for `REF_FILES`) -> the tasks of its repo."""
    commons: set[str] = field(default_factory=set)
    unwatched: set[str] = field(default_factory=set)
    """Tasks whose worktree is too big to watch whole: re-read every tick."""
    by_task: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """The directories watched for each task (its worktree's and its admin dir's)."""
    skipped: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """The directories each task's watch leaves out (caches), relative to its worktree."""
    whole: set[str] = field(default_factory=set)
    """Tasks whose whole worktree (but its caches) is watched."""
    fences: str = ""
    seq: int = 0
    """The watch's change count when this plan walked the worktrees."""
    key: tuple[Any, ...] = ()


def _same(view: TaskView, shown: TaskView | None) -> bool:
    """Whether `view` says what `shown` (the row on the board) says; a view read without its
    git state (`git=False`) keeps the shown one."""
    if shown is None:
        return False
    return view == shown or (view.git is None and replace(view, git=shown.git) == shown)


def plan(watch: WatchSet, seq: int = 0) -> _Plan:
    """Which directories to watch and whose each is."""
    made = _Plan(key=(watch.ledger, watch.events, watch.worktrees, watch.repos), seq=seq)
    made.fences = watch.fences.rstrip("/")
    for place in (watch.ledger, watch.events, watch.fences):
        if os.path.isdir(place):
            made.dirs.append(place)
    trees = watch_trees(
        [
            str(root)
            for item in watch.worktrees
            if (root := Path(item.worktree)).is_dir() and not root.is_symlink()
        ]
    )
    for item in watch.worktrees:
        mine: list[str] = []
        skipped: list[str] = []
        tree = trees.get(str(Path(item.worktree)))
        if tree is not None:
            mine += tree.dirs
            skipped += tree.skipped
            if not tree.cut and item.admin_dir:
                made.whole.add(item.task_id)
            if tree.cut:
                made.unwatched.add(item.task_id)
            made.owners.append((item.worktree.rstrip("/") + "/", item.task_id))
        if item.admin_dir and os.path.isdir(item.admin_dir):
            mine.append(item.admin_dir)
            logs = os.path.join(item.admin_dir, "logs")
            if os.path.isdir(logs):
                mine.append(logs)
            made.owners.append((item.admin_dir.rstrip("/") + "/", item.task_id))
        made.dirs += mine
        made.by_task[item.task_id] = tuple(mine)
        made.skipped[item.task_id] = tuple(skipped)
    for repo in watch.repos:
        heads = Path(repo.common_dir) / "refs" / "heads"
        if os.path.isdir(repo.common_dir):
            made.dirs.append(repo.common_dir)
            made.refs[repo.common_dir.rstrip("/")] = repo.task_ids
            made.commons.add(repo.common_dir.rstrip("/"))
            info = os.path.join(repo.common_dir, "info")  # `exclude` changes what is untracked
            if os.path.isdir(info):
                made.dirs.append(info)
                made.refs[info] = repo.task_ids
        for path, _dirs, _files in os.walk(heads):
            made.dirs.append(path)
            made.refs[path] = repo.task_ids
    made.owners.sort(key=lambda owner: -len(owner[0]))
    return made


@dataclass
class _Wake:
    """What woke the feed: file changes by task, the ledger, hook events, an action, a tick."""

    dirty: set[str] = field(default_factory=set)
    """Tasks whose worktree, admin dir or branch changed, or that an action named."""
    hooked: set[str] = field(default_factory=set)
    """Tasks whose agent's hook reported (their event file changed)."""
    ledger: bool = False
    full: bool = False
    """Everything is read again (an action that named no task; the watch was set up)."""
    ticked: bool = False


@dataclass(frozen=True)
class _Needing:
    """The tasks whose `git status` a refresh reads: those whose files changed, and any not
    read yet (a task new on the board)."""

    dirty: set[str]
    known: dict[str, GitState]

    def __contains__(self, task_id: object) -> bool:
        return task_id in self.dirty or task_id not in self.known


class Feed:
    """The feed of one board (see the module docstring)."""

    def __init__(
        self,
        service: Any,
        post: Callable[[Update], None] | None = None,
        *,
        tick: float = TICK,
        watch: bool = True,
        control: bool = True,
    ) -> None:
        self.service = service
        self._post_to = post
        self._held: list[Update] = []
        """Updates made before anyone was connected (`connect`), oldest first."""
        self._post_lock = threading.Lock()
        self.thread: threading.Thread | None = None
        self.tick = tick
        self.watch = watch
        self.control = control
        self._queue: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._stop = threading.Event()
        self._watcher: _Watch | None = None
        self._seq = 0
        """Batches of changes the watches have seen (a plan records it when it walks)."""
        self._uncovered: dict[str, int] = {}
        """Tasks where a directory appeared that no armed watch covers yet, with `_seq` then."""
        self._epoch: str | None = None
        """The armed watch whose epoch the states this controller keeps are stamped with."""
        self._covered: frozenset[str] = frozenset()
        self._pending: _Watch | None = None
        self._plan = _Plan()
        self._gits: dict[str, GitState] = {}
        self._heads: dict[str, str | None] = {}
        self._radar: dict[str, tuple[Overlap, ...]] = {}
        self._other: int | None = None  # the other controller the last update named
        self._radar_at = 0.0
        self._cursor: int | None = None
        self._version: int | None = None
        self._controller = False
        self._last = self._panes_at = self._observed_at = self._unwatched_at = 0.0
        self._backstop_at = time.monotonic()
        self._backstop_last = ""
        self._wait_tick = tick
        self._snapshot: BoardSnapshot | None = None
        self._claimed_at = 0.0
        self._failing = False
        self._has_panes = False
        self._alive: dict[str, tuple[bool, int | None]] = {}
        self.activity: dict[str, float | None] = {}
        """When each pane last printed (pane id -> seconds), as of the last tick: the app
        re-reads the selected pane's screen only when this moved (read from the UI thread)."""
        self._ledger_dir = ""
        self._events_dir = ""
        self.first_read = threading.Event()
        """Set once the first full read (every worktree's `git status`) is posted, or the feed
        ended before it."""

    # --- from any thread -----------------------------------------------------------------

    def start(self) -> None:
        """Run the feed in a thread of its own (daemon: it never keeps the process alive)."""
        if self.thread is None:
            self.thread = threading.Thread(target=self.run, name="board-feed", daemon=True)
            self.thread.start()

    def connect(self, post: Callable[[Update], None]) -> list[Update]:
        """Hand every update from now on to `post`; returns those made before, oldest first,
        for the caller to show itself. A feed started before its board was on the screen (the
        first reads overlap the UI's start-up) holds its updates until then."""
        with self._post_lock:
            self._post_to = post
            held, self._held = self._held, []
        return held

    def post(self, update: Update) -> None:
        with self._post_lock:
            target = self._post_to
            if target is None:
                self._held.append(update)
                return
        target(update)

    def wake(self, *task_ids: str) -> None:
        """Refresh now; re-read the git state of `task_ids` (an action changed them)."""
        self._queue.put(("tasks", set(task_ids)))

    def stop(self) -> None:
        self._stop.set()
        self._queue.put(("stop", None))

    # --- the feed thread -----------------------------------------------------------------

    def run(self) -> None:
        """Refresh until `stop`: the first paint (no `git status`), then every worktree, then
        only on what changed."""
        try:
            self._first_paint()
            self._claim()
            self._watch_first()
            self._refresh(None)
            self.first_read.set()
            while not self._stop.is_set():
                woke = self._wait()
                if self._stop.is_set():
                    break
                try:
                    self._answer(woke)
                except Exception as err:  # noqa: BLE001 (the feed must outlive one bad read)
                    self._post_error(f"{type(err).__name__}: {err}")
        finally:
            self.first_read.set()
            self._stop_watcher()
            if self._controller:
                self.service.resign_controller()
            self.service.close()

    def _watch_first(self) -> None:
        """The controller sets its watch up before its first full read, so that read's states
        are kept (else every worktree would be read a second time once the watch is armed).
        A marker written into the fences directory makes the new watch report at once; other
        changes reported meanwhile are covered by the full read that follows."""
        if not (self.watch and self._controller and self._watch_from_ledger()):
            return
        if self._pending is None or not self._plan.fences:
            return
        markers: list[str] = []
        end = time.monotonic() + ARM_WITHIN
        try:
            while time.monotonic() < end:
                # A marker made before the watch thread has set its watch up is seen by no
                # one: a new one is made every `MARK_EVERY` until one comes through.
                marker = f"armed-{os.getpid()}-{os.urandom(6).hex()}"
                markers.append(os.path.join(self._plan.fences, marker))
                with contextlib.suppress(OSError):
                    open(markers[-1], "x").close()
                again = min(end, time.monotonic() + MARK_EVERY)
                while True:
                    try:
                        kind, item = self._queue.get(timeout=max(0.0, again - time.monotonic()))
                    except queue.Empty:
                        break
                    if kind == "armed":
                        self._armed(item)
                        return
                    if kind == "stop":
                        self._queue.put((kind, item))
                        return
        finally:
            for marker in markers:
                with contextlib.suppress(OSError):
                    os.unlink(marker)

    def _watch_from_ledger(self) -> bool:
        """Set the watch up from the ledger's list of live tasks; whether it started."""
        try:
            self._rewatch()
        except LaneboardError as err:
            self._post_error(str(err))
            return False
        return True

    def _wait(self) -> _Wake:
        """Block until something happens or a tick is due; what woke the feed."""
        woke = _Wake()
        due = self._panes_at + self._wait_tick - time.monotonic()
        try:
            items = [self._queue.get(timeout=max(0.0, due))]
        except queue.Empty:
            woke.ticked = True
            return woke
        wait = self._last + GAP - time.monotonic()
        if wait > 0:
            time.sleep(wait)  # a burst of writes is read once
        while True:
            try:
                items.append(self._queue.get_nowait())
            except queue.Empty:
                break
        for kind, item in items:
            if kind == "tasks":
                woke.dirty |= item
                woke.full = woke.full or not item
            elif kind == "armed":
                woke.dirty |= self._armed(item)
                woke.ledger = True
            elif kind == "paths":
                for path in item:
                    self._classify(path, woke)
        woke.ticked = time.monotonic() >= self._panes_at + self._wait_tick
        return woke

    def _classify(self, path: str, woke: _Wake) -> None:
        parent = os.path.dirname(path)
        if parent == self._ledger_dir:
            woke.ledger = True
        elif parent == self._events_dir:
            name = os.path.basename(path)
            if name.endswith(".log"):
                woke.hooked.add(name.removesuffix(".log"))
        elif parent in self._plan.refs:
            if parent not in self._plan.commons or os.path.basename(path) in REF_FILES:
                woke.dirty |= set(self._plan.refs[parent])  # a branch moved
        else:
            woke.dirty |= self._owners({path})

    def _claim(self) -> None:
        """Become the controller if no live process is (tried again every `CLAIM_EVERY`
        seconds while another is: when it quits, this board takes over)."""
        self._claimed_at = time.monotonic()
        if not self.control or self._controller:
            return
        try:
            self._controller = self.service.become_controller() is None
            if self._controller:
                self._plan.key = ()  # a watch armed as the controller keeps git states
        except Exception as err:  # noqa: BLE001 (the ledger is locked: say so, try again later)
            self._post_error(f"{err}")

    def _answer(self, woke: _Wake) -> None:
        """Read as little as tells the board what changed; each event costs what it touches:
        - a hook event: the controller's look at that task's pane, then that task's row;
        - another process's commit: the ledger's list of tasks and lanes (no worktree, no
          pane), and the rows of the tasks its journal events name;
        - files, an admin dir or a branch changed: those tasks' rows (`git status` of each);
        - a tick: one `list-panes` (none when no task has a pane; less often while nothing
          moves); a pane that died or appeared, or printed (at most every `OBSERVE` seconds),
          is looked at, its task alone;
        - the backstop: `BACKSTOP_TASKS` rows in turn every `BACKSTOP_EVERY` seconds.
        Everything is read only at the start, after the watch is set up, after an action that
        named no task, and after a failed read. The ledger's own commits (this board's) do not
        count."""
        if not self._controller and time.monotonic() - self._claimed_at > CLAIM_EVERY:
            self._claim()
        if woke.full or self._failing or self._snapshot is None:
            self._refresh(None)
            return
        named = set(woke.dirty)
        look = set(woke.hooked)
        try:
            listing = woke.ledger and self.service.data_version() != self._version
        except LaneboardError as err:
            self._post_error(str(err))
            return
        if woke.ticked:
            moved, printed = self._panes_moved()
            look |= moved | printed
            if self._plan.unwatched and time.monotonic() - self._unwatched_at > UNWATCHED_EVERY:
                self._unwatched_at = time.monotonic()
                named |= self._plan.unwatched
        if time.monotonic() - self._backstop_at > BACKSTOP_EVERY:
            named |= self._backstop()
        if not (named or look or listing or (self.watch and not self._plan.key)):
            return  # (an empty plan key: a directory appeared, the watch is set up again)
        self._partial(named, look, listing)

    def _backstop(self) -> set[str]:
        """The next `BACKSTOP_TASKS` tasks in turn (by id), whose rows are read again."""
        self._backstop_at = time.monotonic()
        ids = sorted(self._gits)
        if not ids:
            return set()
        start = next((n for n, i in enumerate(ids) if i > self._backstop_last), 0)
        chosen = [ids[(start + n) % len(ids)] for n in range(min(BACKSTOP_TASKS, len(ids)))]
        self._backstop_last = chosen[-1]
        return set(chosen)

    def _panes_moved(self) -> tuple[set[str], set[str]]:
        """The tasks whose pane appeared or died, and those whose pane printed (and was not
        looked at in the last `OBSERVE` seconds), since the last tick. While nothing moves the
        next tick comes later (up to `SLOWEST_TICK`)."""
        self._panes_at = time.monotonic()
        if not self._has_panes:
            return set(), set()
        panes = self.service.panes()
        alive = {pane_id: (p.alive, p.exit_status) for pane_id, p in panes.items()}
        printed = {pane_id: p.activity for pane_id, p in panes.items()}
        now = time.time()  # tmux counts in whole seconds: a pane that printed lately counts
        moved = {
            pane
            for pane in set(alive) | set(self._alive)
            if alive.get(pane) != self._alive.get(pane)
        }
        busy = {
            pane
            for pane, at in printed.items()
            if at != self.activity.get(pane) or (at is not None and now - at < 2 * self.tick)
        }
        self._alive, self.activity = alive, printed
        quiet = not moved and not busy
        self._wait_tick = min(SLOWEST_TICK, self._wait_tick * 2) if quiet else self.tick
        owners = self._pane_owners()
        died = {owners[p] for p in moved if p in owners}
        if moved and len(died) < len(moved):
            died |= set(self._gits)  # a pane no task owns yet: a task just started; read all
        if time.monotonic() - self._observed_at < OBSERVE:
            return died, set()
        spoke = {owners[p] for p in busy if p in owners}
        if spoke:
            self._observed_at = time.monotonic()
        return died, spoke

    def _pane_owners(self) -> dict[str, str]:
        if self._snapshot is None:
            return {}
        return {
            view.task.tmux_pane: view.task.id
            for board in self._snapshot.repos
            for view in board.tasks
            if view.task.tmux_pane
        }

    def _owners(self, paths: set[str]) -> set[str]:
        found: set[str] = set()
        for path in paths:
            for prefix, task_id in self._plan.owners:
                if path.startswith(prefix) or path + "/" == prefix:
                    found.add(task_id)
                    break
        return found

    def _refresh(self, dirty: set[str] | None) -> None:
        """One read of the world (`dirty` None: every worktree), then one `Update`."""
        service = self.service
        self._last = self._observed_at = self._backstop_at = time.monotonic()
        try:
            if self._controller:  # it records what the agents do; the snapshot reads that
                changed = {task.id for task in service.reconcile(record=True)}
                if dirty is not None:
                    dirty |= changed
            events: tuple[Event, ...] = ()
            version = service.data_version()
            if self._cursor is None or version != self._version:
                if self._cursor is not None:
                    changes = service.changes(self._cursor)
                    events = changes.events
                    if dirty is not None:
                        dirty |= {e.task_id for e in events if e.task_id}
                self._version = version
            snapshot = service.snapshot(
                git_for=None if dirty is None else _Needing(dirty, self._gits),
                agents=not self._controller,
                keeping=self.keeping(),
            )
            if self._cursor is None or events:
                self._cursor = snapshot.cursor
            snapshot = self._snapshot = self._merge(snapshot)
            self._has_panes = any(
                view.task.tmux_pane for board in snapshot.repos for view in board.tasks
            )
            self._rewatch()
            other = None if self._controller else service.controller()
            self._failing = False
            self._show(snapshot, events, other)
        except LaneboardError as err:
            self._post_error(str(err))
        except Exception as err:  # noqa: BLE001 (the feed must outlive one bad read)
            self._post_error(f"{type(err).__name__}: {err}")

    def _partial(self, named: set[str], look: set[str], listing: bool) -> None:
        """Read again only what changed: the panes of `look` (the controller records what their
        agents do), the ledger's list of tasks and lanes when another process committed
        (`listing`), the tasks its journal events name, and the rows of `named` and `look`
        (verification, lane, `git status`); every other row is kept as it was."""
        assert self._snapshot is not None
        service = self.service
        self._last = time.monotonic()
        try:
            if look and self._controller:
                changed = service.reconcile(record=True, only=look)
                named |= {task.id for task in changed}
            base = self._snapshot
            events: tuple[Event, ...] = ()
            if listing:
                version = service.data_version()
                changes = service.changes(self._cursor or 0)
                events = changes.events
                self._version = version
                named |= {e.task_id for e in events if e.task_id}
                base = service.snapshot(facts=False)
                self._cursor = max(base.cursor, changes.cursor)
            before = {view.task.id: view for board in self._snapshot.repos for view in board.tasks}
            shown = {view.task.id for board in base.repos for view in board.tasks}
            wanted = (named & shown) | (shown - set(before))
            keeping = self.keeping()
            fresh = (
                {view.task.id: view for view in service.views(wanted, keeping=keeping)}
                if wanted
                else {}
            )
            moved = (look & shown) - wanted  # only their agents moved: no `git status`
            if moved:
                fresh |= {view.task.id: view for view in service.views(moved, git=False)}
            other = None if self._controller else service.controller()
            if look or listing:
                self._wait_tick = self.tick
            if (
                not events
                and base is self._snapshot
                and self._plan.key
                and other == self._other
                and time.monotonic() - self._radar_at <= RADAR_EVERY  # (a stale radar is read)
                and all(_same(view, before.get(task_id)) for task_id, view in fresh.items())
            ):
                return  # no row changed (a busy agent's tool calls): nothing to post or paint
            boards = []
            for board in base.repos:
                views = tuple(
                    fresh.get(view.task.id) or before.get(view.task.id) or view
                    for view in board.tasks
                )
                boards.append(replace(board, tasks=views))
            snapshot = self._snapshot = self._merge(replace(base, repos=tuple(boards)))
            self._has_panes = any(
                view.task.tmux_pane for board in snapshot.repos for view in board.tasks
            )
            if listing or not self._plan.key:
                self._rewatch()
            self._show(snapshot, events, other)
        except LaneboardError as err:
            self._post_error(str(err))

    def _first_paint(self) -> None:
        """The ledger's record of every task and lane, before any worktree or pane is read: the
        board shows every row at once, and what each holds fills in a moment later."""
        try:
            snapshot = self.service.snapshot(facts=False)
        except Exception as err:  # noqa: BLE001 (a locked ledger: the next tick tries again)
            self._post_error(f"{err}")
            return
        self.post(Update(snapshot, {}))

    def _post_error(self, text: str) -> None:
        self._failing = True
        snapshot = BoardSnapshot(at=time.time(), slots=0, used=0, repos=(), cursor=0)
        self.post(Update(snapshot, self._radar, error=text))

    def _merge(self, snapshot: BoardSnapshot) -> BoardSnapshot:
        """The snapshot with the last known git state of tasks that were not re-read."""
        live: set[str] = set()
        boards = []
        for board in snapshot.repos:
            views = []
            for view in board.tasks:
                live.add(view.task.id)
                if view.git is not None:
                    self._gits[view.task.id] = view.git
                else:
                    view = replace(view, git=self._gits.get(view.task.id))
                views.append(view)
            boards.append(replace(board, tasks=tuple(views)))
        for gone in set(self._gits) - live:
            del self._gits[gone]
        return replace(snapshot, repos=tuple(boards))

    def _show(self, snapshot: BoardSnapshot, events: tuple[Event, ...], other: int | None) -> None:
        """Post the rows, then the radar when a tip moved and it changed: the git states are
        not kept waiting for it (at the first read it runs a git process or two per task)."""
        before = self._radar
        self._other = other
        self.post(Update(snapshot, before, events, controller=other))
        self.first_read.set()  # (the radar may run a git process or two per task: not waited for)
        radar = self._radar_for(snapshot)
        if radar != before:
            self.post(Update(snapshot, radar, (), controller=other))

    def _radar_for(self, snapshot: BoardSnapshot) -> dict[str, tuple[Overlap, ...]]:
        """The radar's conflicts by task id, recomputed when a tip moved (cached by commit pair
        in the ledger, so only new pairs cost a merge)."""
        heads = {
            view.task.id: view.git.head if view.git else None
            for board in snapshot.repos
            for view in board.tasks
        }
        stale = time.monotonic() - self._radar_at > RADAR_EVERY
        if heads == self._heads and not stale:
            return self._radar
        self._heads = heads
        self._radar_at = time.monotonic()
        found: dict[str, tuple[Overlap, ...]] = {}
        try:
            for _repo, radar in self.service.conflicts(None):
                for overlap in radar.overlaps:
                    if overlap.check.clean:
                        continue
                    for task_id in (overlap.task_id, overlap.other_id):
                        if task_id is not None:
                            found[task_id] = (*found.get(task_id, ()), overlap)
        except LaneboardError:
            return self._radar
        self._radar = found
        return found

    # --- watching --------------------------------------------------------------------------

    def _rewatch(self) -> None:
        if not self.watch:
            return
        watch: WatchSet = self.service.watched()
        if self._watcher is not None and self._plan.key == (
            watch.ledger,
            watch.events,
            watch.worktrees,
            watch.repos,
        ):
            return
        if self._controller and watch.fences:
            os.makedirs(watch.fences, mode=0o700, exist_ok=True)
        old, events_before = self._plan.by_task, watch.events in self._plan.dirs
        self._plan = plan(watch, self._seq)
        # Once the new watch is set up, the tasks it watches differently are read again: what
        # was written there between the last read and the watch being armed was seen by nobody.
        rewatched = {
            task_id
            for task_id, dirs in self._plan.by_task.items()
            if old.get(task_id) != dirs or (watch.events in self._plan.dirs and not events_before)
        }  # (the agents' event files newly watched: a hook may have reported meanwhile)
        self._ledger_dir, self._events_dir = watch.ledger.rstrip("/"), watch.events.rstrip("/")
        if not self._plan.dirs:
            self._stop_watcher()
            return
        new = _Watch(self._plan, rewatched, os.urandom(8).hex())
        new.thread = threading.Thread(target=self._watch_loop, args=(new,), daemon=True)
        new.thread.start()
        if self._pending is not None:  # superseded before it was armed
            self._pending.stop.set()
            self._pending.thread.join(timeout=2)
        self._pending = new  # the old watch runs until the new one is armed (`_armed`)

    def _armed(self, new: _Watch) -> set[str]:
        """The watch `new` is set up: it takes over from the one before, and the tasks to read
        again are returned. The old watch runs until a marker put into the fences directory
        after `new` was armed has come through it, so that every change made before `new` was
        armed has been seen by one of them; then the states the old watch proved are proven by
        the new one, for the tasks both watch alike."""
        if new is not self._pending:
            return set()  # superseded: it is being stopped
        self._pending = None
        old = self._watcher
        if old is not None:
            carried = self._hand_over(old)
            old.stop.set()
            old.thread.join(timeout=2)
        else:
            carried = False
        self._watcher = new
        plan_ = new.plan
        for task_id in list(self._uncovered):
            if self._uncovered[task_id] <= plan_.seq and task_id in plan_.by_task:
                del self._uncovered[task_id]
        same = frozenset(
            task_id
            for task_id, dirs in plan_.by_task.items()
            if old is not None and old.plan.by_task.get(task_id) == dirs
        )
        if self._controller:
            try:
                if carried and self._epoch is not None:
                    self.service.carry_git_states(self._epoch, new.epoch, same - new.rewatched)
                self.service.watch_started(plan_.fences)
            except LaneboardError as err:
                self._post_error(str(err))
            self._epoch = new.epoch
        self._covered = frozenset(plan_.whole)
        if self._controller and not carried:
            # Nothing kept before is proven by this watch (the first one, a board that just
            # became the controller, or a hand-over that did not come through): every task is
            # read once more, so that its state is kept.
            return new.rewatched | set(plan_.by_task)
        return new.rewatched

    def _hand_over(self, old: _Watch) -> bool:
        """Put a marker through `old` (see `_armed`); whether it came through in time."""
        if not self._plan.fences or not os.path.isdir(self._plan.fences):
            return False
        name = f"handover-{os.getpid()}-{os.urandom(6).hex()}"
        seen = old.markers[name] = threading.Event()
        path = os.path.join(self._plan.fences, name)
        try:
            with open(path, "x"):
                pass
            return seen.wait(timeout=2.0)
        except OSError:
            return False
        finally:
            old.markers.pop(name, None)
            with contextlib.suppress(OSError):
                os.unlink(path)

    def keeping(self) -> Keeping | None:
        """What lets the states this board computes be kept for readers: only the controller
        keeps them, only while an armed watch covers the tasks."""
        if not self._controller or self._epoch is None:
            return None
        covered = self._covered - set(self._uncovered)
        return Keeping(epoch=self._epoch, covered=covered, skipped=self._plan.skipped)

    def _watch_loop(self, watch: _Watch) -> None:
        """The body of one watch's thread: every batch of changes is first made known to the
        ledger (the kept states of the tasks it touched are forgotten), then the fences in it
        are answered, then the feed is told."""
        from laneboard.tui import dirwatch

        armed = False
        try:
            for changes in dirwatch.batches(watch.plan.dirs, watch.stop):
                if not armed:
                    armed = True
                    self._queue.put(("armed", watch))
                if not changes:
                    continue
                self._seq += 1
                self._seen(watch, changes)
        except (OSError, RuntimeError):
            self._plan.key = ()  # set up again on the next read; until then no fence is answered
        finally:
            watch.stop.close()
            self.service.close()

    def _seen(self, watch: _Watch, changes: set[tuple[str, str]]) -> None:
        """One batch of `dirwatch` changes. An overflow (the kernel dropped changes: which
        ones is unknown) forgets every kept state this watch proves and reads everything."""
        from laneboard.tui import dirwatch

        overflowed = (dirwatch.OVERFLOW, "") in changes
        changes = changes - {(dirwatch.OVERFLOW, "")}
        paths = {path for _change, path in changes}
        woke = _Wake(dirty=set(watch.plan.by_task) if overflowed else set())
        fences: list[str] = []
        for path in paths:
            if os.path.dirname(path) == watch.plan.fences:
                name = os.path.basename(path)
                if not name.startswith(("handover-", "armed-")):
                    fences.append(path)
            else:
                self._classify(path, woke)
        added = {
            path for change, path in changes if change == dirwatch.ADDED and os.path.isdir(path)
        }
        if added:
            self._plan.key = ()  # a new directory: watch it too on the next refresh
            for task_id in self._owners(added):
                self._uncovered[task_id] = self._seq
        if self._controller and woke.dirty:
            try:
                self.service.git_changed(woke.dirty)
            except LaneboardError:
                self._plan.key = ()
                fences = []  # not made known: no proof may be given for this batch
        markers = [watch.markers[n] for n in map(os.path.basename, paths) if n in watch.markers]
        for seen in markers:
            seen.set()  # only now: every change of this batch has been made known
        if self._controller and self._epoch == watch.epoch:
            for fence in fences:
                self.service.answer_fence(fence, watch.epoch)
        self._queue.put(("paths", paths))
        if overflowed:
            self._queue.put(("tasks", set()))  # everything is read again

    def _stop_watcher(self) -> None:
        for watch in (self._watcher, self._pending):
            if watch is not None:
                watch.stop.set()
                watch.thread.join(timeout=2)
        self._watcher = self._pending = None
        if self._controller and self._epoch is not None:
            self._epoch = None
            with contextlib.suppress(LaneboardError):
                self.service.watch_stopped()


@dataclass
class _Watch:
    """One running watch: its plan, its thread, its epoch (the states it proves carry it), the
    tasks to read again once it is armed, and the hand-over markers it is to report."""

    plan: _Plan
    rewatched: set[str]
    epoch: str
    stop: Stop = field(default_factory=Stop)
    thread: threading.Thread = field(default_factory=threading.Thread)
    markers: dict[str, threading.Event] = field(default_factory=dict)
