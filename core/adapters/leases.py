"""Lane leases across processes: request, admission, waiting, release (DESIGN.md section 4).

Owns the `leases` table. Every admission decision is made by `core.lanes.admit` inside one
SQLite write transaction, so any number of `laneboard exec` processes, the TUI and hooks share one
schedule. Each pass first reaps leases whose holder is dead (pid gone, or reused by a process with
another start time) *and* whose command is gone too: a lease is released only once its command has
exited, never when it was merely asked to stop.

A command's processes are followed by its process group (or session) and, once that is empty, by
the lease's id in their environment (`MARKERS`, DESIGN.md section 5b): a process that left the
group (`setsid`, a daemon) still keeps the lease. The environment of the process table is read
only then, and only of processes of this user younger than the command (`procs.marked`).

Waiting costs no polling: a waiter sleeps on its own FIFO (written by whoever admits it) and on
pidfds of the running holders (so a holder's death wakes it at once); a slow safety timer covers
only what neither can signal. Imports no pydantic and no pygit2 (the `exec` path must start fast).
"""

from __future__ import annotations

import errno
import json
import os
import select
import shlex
import stat
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from sqlite3 import Connection, Row
from typing import Any

from laneboard.core.adapters import process, procs
from laneboard.core.adapters.db import Database, from_db, journal, to_db
from laneboard.core.domain import lanes
from laneboard.core.domain.errors import LaneboardError, WaitTimeout
from laneboard.core.domain.lanes import (
    LEASE_ENV,
    LEDGER_ENV,
    MARKERS,
    Lease,
    LeaseKind,
    LeaseState,
    Lingering,
    WaitReason,
)
from laneboard.core.domain.values import value

HOSTS = frozenset({LeaseKind.INTEGRATE, LeaseKind.SETUP})
"""Leases whose command laneboard runs itself (a gate, a setup): lane commands they ask for
nest in them."""


def lease_env(seq: int) -> str:
    """`$LANEBOARD_LEASE` for a command that runs under lease `seq`, inside whatever leases the
    caller runs under."""
    around = os.environ.get(LEASE_ENV, "")
    if not around or around.split(",")[-1] == str(seq):  # none, or run under that one already
        return around or str(seq)
    return f"{around},{seq}"


Claim = tuple[str, int]
"""A `$LANEBOARD_LEASE` chain and the process it is claimed for (a caller of the channel)."""

SAFETY_WAKE_SECONDS = 2.0
"""Upper bound on how long a waiter sleeps without re-running a pass. Admission and holder deaths
wake it at once; this only covers what neither signals (a notifier killed between its commit and
its wake-up write)."""


def lease_from_row(row: Row) -> Lease:
    data = dict(zip(row.keys(), row, strict=True))
    data["kind"] = LeaseKind(data["kind"])
    data["state"] = LeaseState(data["state"])
    data["command"] = tuple(json.loads(data["command"]))
    data["wake"] = from_db(data["wake"])
    data["wait_reason"] = WaitReason.from_json(data["wait_reason"])
    return Lease(**data)


def followers(lease: Lease, ledger: str) -> list[procs.Marked]:
    """Processes of this user that carry `lease`'s id in their environment (`LEASE_ENV` names
    it, `LEDGER_ENV` names `ledger`) and started no earlier than its command: whatever the
    command started, wherever it went. None for a lease that started no command (nothing was
    given its id)."""
    if lease.child_pid is None:
        return []
    seq = str(lease.seq)
    return [
        found
        for found in procs.marked(MARKERS, since=lease.child_start or 0)
        if found.values.get(LEDGER_ENV) == ledger
        and seq in found.values.get(LEASE_ENV, "").split(",")
    ]


def holder_alive(lease: Lease, ledger: str) -> bool:
    """The holder process (until its block ended), the command it started, anything that
    command started in its process group (or session), or any process carrying the lease's id
    still runs: a background job, a `setsid` child or a daemon keeps its lane. A holder that
    lives on after its block (the board, a finalize going on to its cleanup) does not keep it.
    The environment of the process table is read only when the group is empty."""
    if lease.ended_at is None and procs.alive(lease.holder_pid, lease.holder_start):
        return True
    if lease.child_pid is not None and procs.alive(lease.child_pid, lease.child_start):
        return True
    if procs.group_alive(lease.pgid, lease.sid, lease.child_start):
        return True
    return bool(followers(lease, ledger))


def remaining(lease: Lease, ledger: str) -> list[int]:
    """Processes that keep the lease after its command exited: its group or session, or when
    that is empty, the processes carrying its id."""
    if lease.pgid is not None or lease.sid is not None:
        members = procs.members(pgid=lease.pgid, sid=lease.sid, since=lease.child_start)
        if members:
            return members
    return [found.pid for found in followers(lease, ledger)]


def leftovers(lease: Lease, ledger: str) -> dict[int, int | None]:
    """Every process the lease's command started that still runs, by pid with its start time:
    its group or session and every process carrying its id (what stopping the lease stops)."""
    found: dict[int, int | None] = {}
    if lease.pgid is not None or lease.sid is not None:
        for pid in procs.members(pgid=lease.pgid, sid=lease.sid, since=lease.child_start):
            found[pid] = procs.start_time(pid)
    for marked in followers(lease, ledger):
        found[marked.pid] = marked.start
    found.pop(os.getpid(), None)  # a nested command's laneboard carries it too: not itself
    return found


def strays(lease: Lease, ledger: str) -> dict[int, int | None]:
    """The processes carrying the lease's id outside its command's process group: what a
    signal passed on to that group does not reach."""
    return {
        marked.pid: marked.start
        for marked in followers(lease, ledger)
        if marked.pgid != lease.pgid and marked.pid != os.getpid()
    }


class LeaseReleased(LaneboardError):
    """The lease was released before it was admitted (cancelled, or its holder was reaped)."""


class Cancelled(LaneboardError):
    """A wait for a lane was cancelled (`Cancel.cancel()`); the waiting lease was released."""


class Cancel:
    """A token another thread (the board's) uses to cancel a wait for a lane: `cancel()` wakes
    the waiter at once (a byte on a pipe it selects on), which releases its lease and raises
    `Cancelled`. Safe to call from any thread, more than once."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)
        self._set = threading.Event()

    def cancel(self) -> None:
        self._set.set()
        with suppress(OSError):
            os.write(self._write, b"!")

    @property
    def cancelled(self) -> bool:
        return self._set.is_set()

    def wait(self, timeout: float) -> bool:
        """Sleep up to `timeout` seconds; True (at once) when cancelled."""
        return self._set.wait(timeout)

    def fileno(self) -> int:
        return self._read

    def close(self) -> None:
        for fd in (self._read, self._write):
            with suppress(OSError):
                os.close(fd)


class LeaseStore:
    """The shared schedule, seen from one process. `slots` is this process's configured
    machine-wide slot count; the pass it runs uses it."""

    def __init__(self, database: Database, slots: int) -> None:
        self.database = database
        self.slots = slots
        self.wake_dir = database.path.parent / "wake"
        self.ledger = os.path.realpath(database.path)
        """The ledger as `LEDGER_ENV` names it."""

    def marker(self, seq: int) -> dict[str, str]:
        """The environment of a command run under lease `seq` (inside whatever leases this
        process runs under): every process it starts inherits it, and keeps the lease."""
        return {LEASE_ENV: lease_env(seq), LEDGER_ENV: self.ledger}

    # --- reads ---------------------------------------------------------------------------

    def get(self, seq: int) -> Lease:
        row = self.database.conn.execute("SELECT * FROM leases WHERE seq = ?", (seq,)).fetchone()
        if row is None:
            raise LaneboardError(f"no lease #{seq}")
        return lease_from_row(row)

    def active(self, repo_id: int | None = None) -> list[Lease]:
        """Waiting and running leases (of one repo, or all), in arrival order."""
        rows = self.database.conn.execute(
            "SELECT * FROM leases WHERE state != 'released' AND (? IS NULL OR repo_id = ?) "
            "ORDER BY seq",
            (repo_id, repo_id),
        )
        return [lease_from_row(r) for r in rows]

    def admitted_in_order(self, repo_id: int | None = None) -> list[Lease]:
        """Every lease ever admitted, in the order admission passes started them."""
        rows = self.database.conn.execute(
            "SELECT * FROM leases WHERE admit_order IS NOT NULL AND (? IS NULL OR repo_id = ?) "
            "ORDER BY admit_order",
            (repo_id, repo_id),
        )
        return [lease_from_row(r) for r in rows]

    def lingering(self, lease: Lease) -> tuple[Lingering, ...]:
        """What keeps a running lease whose command has exited: each process it left running
        (in its group, or carrying its id), with its command line. Empty while the command
        runs (its pid says where the lease is) and for a lease that started none."""
        if lease.state is not LeaseState.RUNNING or lease.child_pid is None:
            return ()
        if procs.alive(lease.child_pid, lease.child_start):
            return ()
        return tuple(
            Lingering(lease.seq, pid, procs.command_line(pid))
            for pid in sorted(leftovers(lease, self.ledger))
        )

    def outer(self, claim: Claim | None = None) -> Lease | None:
        """The running lease this process (or the process a `claim` is about) runs under: the
        innermost of those `$LANEBOARD_LEASE` names (set by `exec` for its command), provided
        its command is an ancestor of that process, so a stray variable in some unrelated shell
        means nothing."""
        found = self.outers(claim)
        return found[0] if found else None

    def outers(self, claim: Claim | None = None) -> list[Lease]:
        """Every running lease this process runs under, innermost first: `$LANEBOARD_LEASE` is
        the comma-separated chain of the leases of the commands around it, each one counted only
        while its command is an ancestor of this process, or, once its command has exited, when
        this process is one of what keeps it (it carries its id and is younger than the
        command): a `setsid` child asking for its own lane must not wait for itself. With a
        `claim`, the same for the chain and process it names (a caller of the channel: its
        chain is only a claim, checked against the process tree like any other)."""
        chain, pid = (os.environ.get(LEASE_ENV, ""), os.getpid()) if claim is None else claim
        mine: set[int] | None = None
        found: list[Lease] = []
        for named in reversed(chain.split(",")):
            if not named.isdigit():
                continue
            row = self.database.conn.execute(
                "SELECT * FROM leases WHERE seq = ?", (int(named),)
            ).fetchone()
            if row is None:
                continue
            lease = lease_from_row(row)
            if lease.state is not LeaseState.RUNNING:
                continue
            mine = set(procs.ancestors(pid)) if mine is None else mine
            around = lease.child_pid in mine or lease.holder_pid in mine
            if around or (claim is None and self._left_behind_by(lease)):
                found.append(lease)
        return found

    def _left_behind_by(self, lease: Lease) -> bool:
        """This process carries `lease`'s id (of this ledger), started after its command, and
        the command and its holder's block are over: it is one of what keeps the lease."""
        if lease.child_pid is None or os.environ.get(LEDGER_ENV) != self.ledger:
            return False
        if procs.alive(lease.child_pid, lease.child_start):
            return False
        if lease.ended_at is None and procs.alive(lease.holder_pid, lease.holder_start):
            return False
        return procs.me()[1] >= (lease.child_start or 0)

    def reentry(
        self, repo_id: int, lane: str | None, command: list[str], claim: Claim | None = None
    ) -> Lease | None:
        """The outer lease to run under when it, or a lease it nests in, covers `lane` (the
        same lane, or the repo's root lane); None when a lease of one's own is needed. Raises
        when the outer lease conflicts without covering (the root lane asked for from inside a
        worktree lane): waiting would wait for itself forever."""
        around = [lease for lease in self.outers(claim) if lease.repo_id == repo_id]
        if not around:
            return None
        outer = around[0]
        for covering in around:
            if covering.lane is None or covering.lane == lane:
                return covering
        if lane is None:
            raise LaneboardError(
                f"`{shlex.join(command)}` needs the root lane, but runs inside lease "
                f"#{outer.seq} (`{shlex.join(outer.command)}`) on a worktree lane of the same "
                "repo and would wait for itself; run it outside that command"
            )
        return None

    # --- changes -------------------------------------------------------------------------

    def request(
        self,
        *,
        repo_id: int,
        lane: str | None,
        kind: LeaseKind,
        command: list[str],
        repo_cap: int | None,
        wake: str | None,
        parent: int | None = None,
    ) -> Lease:
        """Queue a lease held by this process and run an admission pass in the same transaction;
        the returned lease may already be running. `parent` is a running lease of this process
        the new one nests in (they do not conflict)."""
        pid, start = procs.me()
        with self.database.transaction() as db:
            cursor = db.execute(
                "INSERT INTO leases (repo_id, lane, kind, state, holder_pid, holder_start, "
                "command, created_at, wake, repo_cap, parent) "
                "VALUES (?, ?, ?, 'waiting', ?, ?, ?, ?, ?, ?, ?)",
                (
                    repo_id,
                    lane,
                    kind.value,
                    pid,
                    start,
                    json.dumps(list(command)),
                    time.time(),
                    None if wake is None else to_db(wake),
                    repo_cap,
                    parent,
                ),
            )
            seq = cursor.lastrowid
            assert seq is not None
            _journal(
                db,
                seq,
                repo_id,
                lane,
                "lease.waiting",
                {"kind": kind.value, "command": list(command)},
            )
            admitted = self._pass(db)
        self._notify(admitted)
        return self.get(seq)

    def run_pass(self) -> list[Lease]:
        """Reap dead holders and admit what can start; wake the processes admitted."""
        with self.database.transaction() as db:
            admitted = self._pass(db)
        self._notify(admitted)
        return admitted

    def set_child(self, seq: int, pid: int, own_session: bool = False) -> None:
        """Record the command a running lease started (and its process group, and its session
        when it got its own), so the lease outlives a killed holder for as long as the command,
        or anything it started there, runs."""
        start = procs.start_time(pid)
        with self.database.transaction() as db:
            db.execute(
                "UPDATE leases SET child_pid = ?, child_start = ?, pgid = ?, sid = ? WHERE seq = ?",
                (pid, start, pid, pid if own_session else None, seq),
            )

    def finish(self, seq: int, reason: str, exit_code: int | None = None) -> None:
        """The block that held the lease is over: release it, unless processes its command
        started still run in its group (or session); then only the exit code is recorded and
        the lease is released by the admission pass that finds the group gone."""
        lease = self.get(seq)
        if remaining(lease, self.ledger):
            with self.database.transaction() as db:
                db.execute(
                    "UPDATE leases SET exit_code = ?, ended_at = ? WHERE seq = ?",
                    (exit_code, time.time(), seq),
                )
            return
        self.release(seq, reason, exit_code)

    def release(self, seq: int, reason: str, exit_code: int | None = None) -> None:
        """Release a lease (its command has exited, or it is cancelled while waiting) and admit
        whoever it held back. Idempotent: a lease already released keeps its first reason."""
        with self.database.transaction() as db:
            cursor = db.execute(
                "UPDATE leases SET state = 'released', released_at = ?, release_reason = ?, "
                "exit_code = ? WHERE seq = ? AND state != 'released'",
                (time.time(), reason, exit_code, seq),
            )
            if cursor.rowcount:
                row = db.execute(
                    "SELECT repo_id, lane FROM leases WHERE seq = ?", (seq,)
                ).fetchone()
                _journal(
                    db,
                    seq,
                    row["repo_id"],
                    row["lane"],
                    "lease.released",
                    {"reason": reason, "exit_code": exit_code},
                )
            admitted = self._pass(db)
        self._notify(admitted)

    def _pass(self, db: Connection) -> list[Lease]:
        now = time.time()
        active = [
            lease_from_row(r)
            for r in db.execute("SELECT * FROM leases WHERE state != 'released' ORDER BY seq")
        ]
        live: list[Lease] = []
        for lease in active:
            if holder_alive(lease, self.ledger):
                live.append(lease)
                continue
            # A command that ended with its last background process has exited; one whose
            # holder vanished without recording an exit code died with it.
            reason = "exited" if lease.exit_code is not None else "holder died"
            db.execute(
                "UPDATE leases SET state = 'released', released_at = ?, "
                "release_reason = ? WHERE seq = ?",
                (now, reason, lease.seq),
            )
            _journal(
                db,
                lease.seq,
                lease.repo_id,
                lease.lane,
                "lease.released",
                {"reason": reason, "exit_code": lease.exit_code},
            )
            if lease.wake:
                with suppress(OSError):
                    os.unlink(lease.wake)
        running = [lease for lease in live if lease.state is LeaseState.RUNNING]
        waiting = [lease for lease in live if lease.state is LeaseState.WAITING]
        if not waiting:
            return []
        caps = {lease.repo_id: lease.repo_cap for lease in live if lease.repo_cap is not None}
        decision = lanes.admit(running, waiting, self.slots, caps)
        order = db.execute("SELECT COALESCE(MAX(admit_order), 0) FROM leases").fetchone()[0]
        by_seq = {lease.seq: lease for lease in live}
        for seq in decision.admit:
            order += 1
            db.execute(
                "UPDATE leases SET state = 'running', admitted_at = ?, admit_order = ?, "
                "wait_reason = NULL WHERE seq = ?",
                (now, order, seq),
            )
            admitted_lease = by_seq[seq]
            _journal(db, seq, admitted_lease.repo_id, admitted_lease.lane, "lease.running", {})
        for seq, wait in decision.waits.items():
            other = by_seq.get(wait.other) if wait.other is not None else None
            before = by_seq[seq].wait_reason
            why = WaitReason(
                kind=wait.kind,
                lease=wait.other,
                command=other.command if other is not None else None,
                # The same reason as the last pass keeps its start: "waiting for #12 since …".
                since=before.since if before is not None and before.same(wait) else now,
            )
            db.execute("UPDATE leases SET wait_reason = ? WHERE seq = ?", (why.to_json(), seq))
        admitted = set(decision.admit)
        return [lease for lease in waiting if lease.seq in admitted]

    @staticmethod
    def _notify(admitted: list[Lease]) -> None:
        for lease in admitted:
            if lease.wake:
                _poke(lease.wake)

    # --- waiting -------------------------------------------------------------------------

    def wait(
        self,
        lease: Lease,
        waker: Waker,
        *,
        timeout: float | None,
        on_wait: Callable[[Lease], None] | None = None,
        cancel: Cancel | None = None,
        reenter: Callable[[], Lease | None] | None = None,
    ) -> Lease:
        """Block until `lease` runs. Calls `on_wait` once, the first time it has to wait.

        Raises `WaitTimeout` after `timeout` seconds, `Cancelled` as soon as `cancel` is set
        (the lease is then released either way), and `LeaseReleased` if the lease was released
        meanwhile. When `reenter` (asked at each wake) names a lease to run under instead (the
        one this process is a leftover of, whose command exited while it waited), `lease` is
        released and that one returned.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        announced = False
        while True:
            lease = self.get(lease.seq)
            if lease.state is LeaseState.RUNNING:
                return lease
            if lease.state is LeaseState.RELEASED:
                raise LeaseReleased(f"lease #{lease.seq} was released: {lease.release_reason}")
            outer = reenter() if reenter is not None else None
            if outer is not None:
                self.release(lease.seq, f"runs under #{outer.seq}")
                return outer
            if cancel is not None and cancel.cancelled:
                self.release(lease.seq, "cancelled")
                raise Cancelled(f"stopped waiting for lease #{lease.seq}: cancelled")
            if not announced and on_wait is not None:
                on_wait(lease)
                announced = True
            sleep = SAFETY_WAKE_SECONDS
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self.release(lease.seq, "timed out waiting")
                    raise WaitTimeout(
                        f"gave up after {timeout:g}s waiting for admission "
                        f"(lease #{lease.seq}: {lease.wait_reason or 'waiting'})"
                    )
                sleep = min(sleep, remaining)
            with _holder_fds(self.active(), self.ledger) as fds:
                woken = [waker.fileno(), *fds, *([cancel.fileno()] if cancel else [])]
                select.select(woken, [], [], sleep)
            waker.drain()
            self.run_pass()


def _journal(
    db: Connection, seq: int, repo_id: int, lane: str | None, kind: str, data: dict[str, Any]
) -> None:
    """A lease transition in the journal, in the same transaction as the transition: the board
    follows tasks and lanes from one cursor. A worktree lane's events are its task's; the
    integration lane's are the repo's (with the lane named)."""
    task = None if lane == lanes.INTEGRATION_LANE else lane
    extra = {"lane": lane} if lane == lanes.INTEGRATION_LANE else {}
    journal(
        db,
        task_id=task,
        repo_id=repo_id,
        kind=kind,
        actor="lanes",
        data={"lease": seq, **extra, **data},
    )


def _poke(path: str) -> None:
    """Write one byte to a waiter's FIFO without blocking; a waiter that is gone is ignored."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as err:
        if err.errno in (errno.ENXIO, errno.ENOENT):
            return
        raise
    try:
        os.write(fd, b"!")
    except BlockingIOError:
        pass  # the FIFO is full of pokes already: the waiter will wake anyway
    finally:
        os.close(fd)


@contextmanager
def _holder_fds(active: list[Lease], ledger: str) -> Iterator[list[int]]:
    """pidfds of every running lease's holder and command: readable when that process exits."""
    fds: list[int] = []
    try:
        for lease in active:
            if lease.state is not LeaseState.RUNNING:
                continue
            pids = [
                pid
                for pid, start in (
                    (lease.holder_pid, lease.holder_start),
                    (lease.child_pid, lease.child_start),
                )
                if pid is not None and pid != os.getpid() and procs.alive(pid, start)
            ]
            if not pids:
                pids = remaining(lease, ledger)  # kept by what its command left running
            for pid in pids:
                with suppress(OSError, AttributeError):
                    fds.append(os.pidfd_open(pid))
        yield fds
    finally:
        for fd in fds:
            os.close(fd)


class Waker:
    """The FIFO a waiting process sleeps on; whoever admits its lease writes a byte to it.

    Opened read-write so that the reader never sees end-of-file when a writer closes.
    """

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        pid, start = procs.me()
        self.path = directory / f"{pid}-{start}-{os.urandom(4).hex()}.wake"
        os.mkfifo(self.path, 0o600)
        self._fd = os.open(self.path, os.O_RDWR | os.O_NONBLOCK)
        if not stat.S_ISFIFO(os.fstat(self._fd).st_mode):
            raise LaneboardError(f"{self.path} is not a FIFO")

    def fileno(self) -> int:
        return self._fd

    def drain(self) -> None:
        with suppress(BlockingIOError):
            while os.read(self._fd, 4096):
                pass

    def close(self) -> None:
        os.close(self._fd)
        with suppress(FileNotFoundError):
            self.path.unlink()

    def __enter__(self) -> Waker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@value(frozen=False)
class Held:
    """A lease held for the duration of a `hold` block. Set `exit_code` to the command's exit
    code before the block ends; it is recorded when the lease is released."""

    lease: Lease
    store: LeaseStore
    inherited: bool = False
    """True when the block runs under an outer lease that covers the lane (no lease of its own)."""
    exit_code: int | None = None
    passed: bool = False
    """A signal was passed on to what the command left outside its group (`pass_on`)."""

    def record_child(self, pid: int, own_session: bool = False) -> None:
        """Record the command started under this lease (not for an inherited lease: the outer
        lease's command is what keeps it)."""
        if not self.inherited:
            self.store.set_child(self.lease.seq, pid, own_session)

    def stop_leftovers(self, grace: float = 5.0) -> None:
        """Stop everything the command left running, in its group or out of it (SIGTERM, then
        SIGKILL after `grace` seconds). Nothing for an inherited lease: what runs under the
        outer lease is its command's, not this block's."""
        if not self.inherited:
            lease = self.store.get(self.lease.seq)
            process.end(leftovers(lease, self.store.ledger), grace)

    def wait_leftovers_gone(self, deadline: float) -> bool:
        """Wait up to `deadline` seconds until nothing the command started runs (a sandbox's
        processes, which the kernel ends a moment after its command); True when nothing does."""
        if self.inherited:
            return True
        end = time.monotonic() + deadline
        lease = self.store.get(self.lease.seq)
        while leftovers(lease, self.store.ledger):
            if time.monotonic() > end:
                return False
            time.sleep(0.01)
        return True

    def pass_on(self, signum: int) -> None:
        """Send `signum` to the processes carrying this lease outside its command's process
        group (a signal passed on to the group does not reach them)."""
        if not self.inherited:
            lease = self.store.get(self.lease.seq)
            process.signal_each(strays(lease, self.store.ledger), signum)
            self.passed = True


@contextmanager
def hold(
    store: LeaseStore,
    *,
    repo_id: int,
    lane: str | None,
    kind: LeaseKind,
    command: list[str],
    repo_cap: int | None = None,
    timeout: float | None = None,
    on_wait: Callable[[Lease], None] | None = None,
    cancel: Cancel | None = None,
    parent: Held | None = None,
    claim: Claim | None = None,
) -> Iterator[Held]:
    """Hold a lane for the duration of the block: wait for admission, run the block, release.

    The lease is released when the block ends, however it ends; an exception while waiting
    (timeout, KeyboardInterrupt) cancels the waiting lease, which releases whoever it held back.
    Inside a command that runs under an outer lease (`$LANEBOARD_LEASE`): if that lease covers
    the lane (the same lane, or the repo's root lane) the block runs under it; if it conflicts
    without covering it (asking for the root lane from inside a worktree lane), waiting would
    wait for itself forever, so it is refused at once. Inside a block of this process's own
    (`parent`), or inside another lease of the repo that does not cover it, the new lease
    nests in that one: the two never conflict, and it takes no slot of its own. A `claim`
    asks all of this for another process (a caller of the channel) instead of this one.
    """
    outer = store.reentry(repo_id, lane, command, claim)
    if outer is not None:
        yield Held(outer, store, inherited=True)
        return
    nest = None if parent is None or parent.inherited else parent.lease.seq
    if nest is None:
        # A command laneboard itself runs under a lease of this repo (a gate or a setup calling
        # `exec --lane other`) runs in that lease's turn and slot: queueing it behind the cap
        # its own outer lease fills would wait for itself. A user's or an agent's lane command
        # asking for other lanes queues as any other, so it cannot fan out past the slots.
        around = store.outer(claim)
        if around is not None and around.repo_id == repo_id and around.kind in HOSTS:
            nest = around.seq
    with Waker(store.wake_dir) as waker:
        lease = store.request(
            repo_id=repo_id,
            lane=lane,
            kind=kind,
            command=command,
            repo_cap=repo_cap,
            wake=str(waker.path),
            parent=nest,
        )
        requested = lease.seq
        try:
            lease = store.wait(
                lease,
                waker,
                timeout=timeout,
                on_wait=on_wait,
                cancel=cancel,
                reenter=lambda: store.reentry(repo_id, lane, command, claim),
            )
        except BaseException:
            store.release(requested, "cancelled")
            raise
    if lease.seq != requested:  # it became a leftover of the lease it waited for
        yield Held(lease, store, inherited=True)
        return
    held = Held(lease, store)
    try:
        yield held
    finally:
        reason = "done" if held.exit_code is None else "exited"
        store.finish(lease.seq, reason, held.exit_code)
