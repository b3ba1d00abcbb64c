"""Lane conflicts and lease admission (DESIGN.md section 4).

Owns the one decision of which waiting leases may start now, and why each of the others waits.
Pure: facts in, decision out. It must never do I/O, read a clock or import git, subprocess or
sqlite: the ledger calls it inside its write transaction on the leases table and records what it
returns, so that every laneboard process (TUI, CLI, hooks, `laneboard exec`) decides alike.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable, Mapping, Sequence
from enum import StrEnum
from typing import Any, Protocol

from laneboard.core.domain.values import value

SHIM_MARKER = b"# laneboard-shim"
"""The second line of every lane command shim; command lookup skips files that carry it, so a
shim never calls itself."""

LEASE_ENV = "LANEBOARD_LEASE"
"""Set in a command's environment to the seqs of the leases it runs under, outermost first.
Children inherit it, so every process a command starts carries the id of its lease, including
those that leave its process group or session (`setsid`, daemons): the lease is held while
any of them lives (DESIGN.md section 5b)."""
LEDGER_ENV = "LANEBOARD_LEDGER"
"""Set beside `LEASE_ENV` to the ledger the seqs are of (its real path): a second board, or
another test's, numbers its leases from 1 too."""
MARKERS = (LEASE_ENV, LEDGER_ENV)
"""The environment that marks a process as started under a lease."""


class Claim(Protocol):
    """What admission needs to know about a lease; `core.models.Lease` satisfies it.

    `seq` orders arrivals and is unique across running and waiting claims. `lane` is None for the
    repo's root lane, else a worktree lane key (the task id).
    """

    @property
    def seq(self) -> int: ...

    @property
    def repo_id(self) -> int: ...

    @property
    def lane(self) -> str | None: ...

    @property
    def parent(self) -> int | None: ...


INTEGRATION_LANE = "integration"
"""The lane key of a repo's integration lane (finalize). Task lanes are keyed by 12-hex-digit
task ids, so it can never be one: it conflicts with the root lane and with itself only."""


def conflicts(a: Claim, b: Claim) -> bool:
    """True when `a` and `b` may not run at the same time.

    Symmetric. Lanes of different repos never conflict; a root-lane claim conflicts with every
    claim of its repo; any other lane (a worktree lane, the integration lane) conflicts with
    itself and its root lane; siblings never. A claim nested in another (`parent`, the same
    holder taking the root lane briefly inside its integration) never conflicts with it.
    """
    if a.repo_id != b.repo_id:
        return False
    if a.parent == b.seq or b.parent == a.seq:
        return False
    return a.lane is None or b.lane is None or a.lane == b.lane


class WaitKind(StrEnum):
    """Why a waiting lease was not admitted in this pass."""

    SLOT = "slot"
    """Every machine-wide slot is held by a running (or just admitted) lease."""
    REPO_CAP = "repo-cap"
    """The repo already runs as many leases as its cap allows."""
    CONFLICT = "conflict"
    """A running (or just admitted) lease holds a conflicting lane."""
    BEHIND = "behind"
    """An earlier waiting lease conflicts with this one and goes first (FIFO per conflict)."""


@value
class Wait:
    """The reason one waiting lease stays waiting, as the board and `laneboard exec` show it."""

    kind: WaitKind
    other: int | None = None
    """Seq of the lease it conflicts with or waits behind; None for slot and repo cap."""

    def __str__(self) -> str:
        match self.kind:
            case WaitKind.SLOT:
                return "slot"
            case WaitKind.REPO_CAP:
                return "repo cap"
            case WaitKind.CONFLICT:
                return f"conflict with #{self.other}"
            case WaitKind.BEHIND:
                return f"behind #{self.other}"


@value
class Admission:
    """The decision of one admission pass over the whole board.

    Every waiting seq appears exactly once: either in `admit` or as a key of `waits`.
    """

    admit: tuple[int, ...]
    """Seqs to start now, in increasing seq order."""
    waits: dict[int, Wait]
    """Every waiting seq not admitted, with the reason it waits."""


def admit(
    running: Sequence[Claim],
    waiting: Sequence[Claim],
    slots: int,
    repo_caps: Mapping[int, int] | None = None,
) -> Admission:
    """Decide which waiting claims start now.

    Waiting claims are considered in seq order, whatever order they are passed in. A claim waits
    on a conflicting running or just admitted claim (CONFLICT), else on a conflicting earlier
    waiting claim (BEHIND), else for a slot, else for the repo cap; otherwise it is admitted.

    Fairness: a waiting claim holds back every later claim it conflicts with, so a root lease is
    never starved by a stream of worktree leases; a claim that conflicts with nothing running or
    waiting before it starts as soon as a slot (and the repo cap) allows, so one blocked lane does
    not block independent ones. When several leases explain a wait, `other` names the lowest seq.

    `repo_caps` maps a repo id to the most leases it may run at once; a repo not in it has no cap
    beyond `slots`.

    `running` may already hold more than `slots` (the config was lowered); then nothing new is
    admitted, and nothing running is touched: stopping leases is not admission's business.
    Raises ValueError when a seq appears twice, since the ledger's ordering is then broken.
    """
    seqs = [c.seq for c in running] + [c.seq for c in waiting]
    if len(seqs) != len(set(seqs)):
        raise ValueError("duplicate lease seq in admission input")

    started: list[Claim] = list(running)
    per_repo: dict[int, int] = {}
    for claim in running:
        per_repo[claim.repo_id] = per_repo.get(claim.repo_id, 0) + 1
    admitted: list[int] = []
    held: list[Claim] = []
    waits: dict[int, Wait] = {}

    for claim in sorted(waiting, key=lambda c: c.seq):
        wait = _first_reason(
            claim, started, held, slots, (repo_caps or {}).get(claim.repo_id), per_repo
        )
        if wait is None:
            started.append(claim)
            per_repo[claim.repo_id] = per_repo.get(claim.repo_id, 0) + 1
            admitted.append(claim.seq)
        else:
            held.append(claim)
            waits[claim.seq] = wait
    return Admission(admit=tuple(admitted), waits=waits)


def _first_reason(
    claim: Claim,
    started: Sequence[Claim],
    held: Sequence[Claim],
    slots: int,
    repo_cap: int | None,
    per_repo: dict[int, int],
) -> Wait | None:
    """The reason `claim` must wait, in order of precedence, or None when it may start.

    A claim nested in a running one of its holder (`parent`) is part of that lease, which was
    admitted in its turn and holds a slot: it waits only for running conflicts. Queueing it
    behind waiting leases (which may wait for its parent) or for a slot (its parent may hold
    the last) would wait for itself."""
    blocker = _lowest_conflict(claim, started)
    if blocker is not None:
        return Wait(WaitKind.CONFLICT, blocker)
    if claim.parent is not None and any(c.seq == claim.parent for c in started):
        return None
    ahead = _lowest_conflict(claim, held)
    if ahead is not None:
        return Wait(WaitKind.BEHIND, ahead)
    if len(started) >= slots:
        return Wait(WaitKind.SLOT)
    if repo_cap is not None and per_repo.get(claim.repo_id, 0) >= repo_cap:
        return Wait(WaitKind.REPO_CAP)
    return None


def _lowest_conflict(claim: Claim, others: Iterable[Claim]) -> int | None:
    return min((o.seq for o in others if conflicts(claim, o)), default=None)


# --- leases as values ----------------------------------------------------------------------


class LeaseState(StrEnum):
    """A lease waits, then runs while its command lives, then is released (never deleted)."""

    WAITING = "waiting"
    RUNNING = "running"
    RELEASED = "released"


class LeaseKind(StrEnum):
    """What a lease was taken for."""

    EXEC = "exec"
    """A command run with `laneboard exec` (or a shim)."""
    PROVISION = "provision"
    """`git worktree add` while creating a task (root lane)."""
    SETUP = "setup"
    """The setup command of a new worktree (its worktree lane)."""
    REMOVE = "remove"
    """Removing a worktree and its branch (root lane)."""
    RESTORE = "restore"
    """Bringing a discarded task back from a snapshot (root lane)."""
    INTEGRATE = "integrate"
    """Integration into a target branch: the integration lane for merge and gate, with root
    leases nested in it for the scratch worktree and the move of the target."""
    REBASE = "rebase"
    """The rebase of a task's branch onto its target (its worktree lane)."""
    REPAIR = "repair"
    """`git worktree repair` of laneboard's worktrees after their repository moved (root lane)."""
    REWIND = "rewind"
    """Bringing a task's worktree back to one of its checkpoints (its worktree lane)."""


@value
class Lease:
    """One row of the leases table. `seq` orders arrivals; `lane` is None for the root lane, else
    the id of the task whose worktree lane it claims."""

    seq: int
    repo_id: int
    lane: str | None
    kind: LeaseKind
    state: LeaseState
    holder_pid: int
    holder_start: int
    command: tuple[str, ...]
    created_at: float
    admitted_at: float | None = None
    released_at: float | None = None
    release_reason: str | None = None
    child_pid: int | None = None
    child_start: int | None = None
    wake: str | None = None
    wait_reason: WaitReason | None = None
    """Why it waits (the last admission pass's answer); None once it runs."""
    admit_order: int | None = None
    repo_cap: int | None = None
    exit_code: int | None = None
    pgid: int | None = None
    """The process group the command was started in (its own)."""
    sid: int | None = None
    """The session the command was started in, when it got one of its own (no terminal)."""
    parent: int | None = None
    """The running lease this one nests in (it does not conflict with it)."""
    ended_at: float | None = None
    """When the holder's block ended while processes of its command still ran: from then on
    only those processes keep the lease, not the holder."""

    @property
    def is_root(self) -> bool:
        return self.lane is None


@value
class Lingering:
    """A process that keeps a lease after the lease's command has exited: one it started, left
    in its process group or session, or gone from them (`setsid`, a daemon's double fork) and
    found by the lease's id in its environment."""

    lease: int
    pid: int
    command: str
    """Its command line, as `/proc/<pid>/cmdline` has it (or its name)."""


@value
class WaitReason:
    """Why a waiting lease waits, as data: what kind of wait, for which lease and command, and
    since when this same reason has held."""

    kind: WaitKind
    lease: int | None = None
    command: tuple[str, ...] | None = None
    since: float = 0.0

    def same(self, wait: Wait) -> bool:
        return self.kind is wait.kind and self.lease == wait.other

    def __str__(self) -> str:
        text = str(Wait(self.kind, self.lease))
        return text + (f" `{shlex.join(self.command)}`" if self.command else "")

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "lease": self.lease,
            "command": list(self.command) if self.command is not None else None,
            "since": self.since,
        }

    def to_json(self) -> str:
        return json.dumps(self.as_dict())

    @classmethod
    def from_json(cls, raw: str | None) -> WaitReason | None:
        """The reason stored by an admission pass; None for none (or an unreadable one)."""
        if not raw:
            return None
        try:
            data = json.loads(raw)
            return cls(
                kind=WaitKind(data["kind"]),
                lease=data.get("lease"),
                command=tuple(data["command"]) if data.get("command") is not None else None,
                since=float(data.get("since") or 0.0),
            )
        except (ValueError, KeyError, TypeError):
            return None
