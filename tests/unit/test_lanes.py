"""Lane conflicts and admission: scenarios first, then properties over random schedules.

The property tests drive a small board simulator: leases arrive on random lanes of two repos,
running ones finish, waiting ones are cancelled, and after every event one admission pass runs and
its admitted leases start. Every step of that trace is checked against the rules of DESIGN.md
section 4, and the board is finally drained to show that every lease is eventually admitted.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from laneboard.core.domain.lanes import (
    INTEGRATION_LANE,
    Admission,
    Lease,
    LeaseKind,
    LeaseState,
    Wait,
    WaitKind,
    admit,
    conflicts,
)


@dataclass(frozen=True)
class C:
    """A claim with nothing but what admission reads."""

    seq: int
    repo_id: int
    lane: str | None = None
    parent: int | None = None


def root(seq: int, repo: int = 1) -> C:
    return C(seq, repo, None)


def wt(seq: int, lane: str, repo: int = 1) -> C:
    return C(seq, repo, lane)


# --- conflicts ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        (wt(1, "x"), wt(2, "x"), True),
        (wt(1, "x"), root(2), True),
        (root(1), wt(2, "x"), True),
        (root(1), root(2), True),
        (wt(1, "x"), wt(2, "y"), False),
        (root(1, repo=1), root(2, repo=2), False),
        (root(1, repo=1), wt(2, "x", repo=2), False),
        (wt(1, "x", repo=1), wt(2, "x", repo=2), False),
    ],
)
def test_conflicts_follow_the_lane_hierarchy(a: C, b: C, expected: bool) -> None:
    assert conflicts(a, b) is expected
    assert conflicts(b, a) is expected


def test_integration_lane_conflicts_with_root_and_itself_only() -> None:
    integration = wt(1, INTEGRATION_LANE)
    assert conflicts(integration, root(2))
    assert conflicts(integration, wt(2, INTEGRATION_LANE))
    assert not conflicts(integration, wt(2, "a1b2c3d4e5f6"))
    assert not conflicts(integration, wt(2, INTEGRATION_LANE, repo=2))


def test_a_nested_root_lease_runs_inside_its_parent_but_waits_for_everything_else() -> None:
    integration = wt(1, INTEGRATION_LANE)
    lane_command = wt(2, "a1b2c3d4e5f6")
    nested = C(3, 1, None, parent=1)
    assert not conflicts(nested, integration)
    assert admit([integration], [nested], slots=4).admit == (3,)
    decision = admit([integration, lane_command], [nested], slots=4)
    assert decision.waits[3] == Wait(WaitKind.CONFLICT, 2)
    other_integration = wt(4, INTEGRATION_LANE)
    assert admit([integration], [other_integration, nested], slots=4).admit == (3,)


def test_a_nested_lease_is_not_queued_behind_leases_that_wait_for_its_parent() -> None:
    integration = wt(1, INTEGRATION_LANE)
    second = wt(2, INTEGRATION_LANE)  # waits for the first integration
    nested = C(3, 1, None, parent=1)  # the first integration's brief root lease
    decision = admit([integration], [second, nested], slots=4)
    assert decision.admit == (3,)
    assert decision.waits[2] == Wait(WaitKind.CONFLICT, 1)


def test_a_nested_lease_runs_in_its_parents_slot() -> None:
    integration = wt(1, INTEGRATION_LANE)
    assert admit([integration], [C(2, 1, None, parent=1)], slots=1).admit == (2,)
    assert admit([integration], [C(2, 1, None, parent=1)], slots=1, repo_caps={1: 1}).admit == (2,)
    # Without its parent running, it is an ordinary lease.
    assert admit([wt(5, "x")], [C(2, 1, None, parent=1)], slots=1).waits[2] == Wait(
        WaitKind.CONFLICT, 5
    )


# --- scenarios ------------------------------------------------------------------------------


def test_sibling_lanes_run_together() -> None:
    decision = admit(running=[wt(1, "x")], waiting=[wt(2, "y"), wt(3, "z")], slots=4)
    assert decision == Admission(admit=(2, 3), waits={})


def test_same_lane_runs_one_command_at_a_time_in_arrival_order() -> None:
    decision = admit(running=[], waiting=[wt(2, "x"), wt(1, "x")], slots=4)
    assert decision == Admission(admit=(1,), waits={2: Wait(WaitKind.CONFLICT, 1)})


def test_root_lease_waits_for_running_worktree_leases() -> None:
    decision = admit(running=[wt(2, "y"), wt(1, "x")], waiting=[root(3)], slots=4)
    assert decision.admit == ()
    assert decision.waits == {3: Wait(WaitKind.CONFLICT, 1)}


def test_root_lease_holds_back_later_worktree_lease() -> None:
    decision = admit(running=[wt(1, "x")], waiting=[root(2), wt(3, "y")], slots=4)
    assert decision.admit == ()
    assert decision.waits == {2: Wait(WaitKind.CONFLICT, 1), 3: Wait(WaitKind.BEHIND, 2)}


def test_worktree_lease_waits_for_running_root_lease() -> None:
    decision = admit(running=[root(1)], waiting=[wt(2, "x")], slots=4)
    assert decision == Admission(admit=(), waits={2: Wait(WaitKind.CONFLICT, 1)})


def test_independent_lane_overtakes_blocked_one() -> None:
    # 2 waits for the running 1 on lane x; 3 (lane y) and 4 (another repo) need not wait for it.
    decision = admit(
        running=[wt(1, "x")], waiting=[wt(2, "x"), wt(3, "y"), root(4, repo=2)], slots=4
    )
    assert decision == Admission(admit=(3, 4), waits={2: Wait(WaitKind.CONFLICT, 1)})


def test_cancelling_a_waiting_root_lease_releases_those_it_held_back() -> None:
    running = [wt(1, "x")]
    waiting = [root(2), wt(3, "y"), wt(4, "z")]
    before = admit(running, waiting, slots=4)
    assert before.admit == ()
    assert before.waits[3] == before.waits[4] == Wait(WaitKind.BEHIND, 2)

    after = admit(running, [w for w in waiting if w.seq != 2], slots=4)
    assert after == Admission(admit=(3, 4), waits={})


def test_root_lease_starts_when_the_last_worktree_lease_ends_and_holds_the_rest_back() -> None:
    decision = admit(running=[], waiting=[root(2), wt(3, "x"), root(4)], slots=4)
    assert decision.admit == (2,)
    assert decision.waits == {3: Wait(WaitKind.CONFLICT, 2), 4: Wait(WaitKind.CONFLICT, 2)}


def test_lease_admitted_in_the_same_pass_blocks_a_later_conflicting_one() -> None:
    decision = admit(running=[], waiting=[wt(1, "x"), root(2)], slots=4)
    assert decision == Admission(admit=(1,), waits={2: Wait(WaitKind.CONFLICT, 1)})


def test_lease_waiting_for_a_slot_still_holds_back_later_conflicting_leases() -> None:
    # The root lease 2 is first in line for the next slot; the worktree lease 3 must not take it.
    decision = admit(running=[root(1, repo=2)], waiting=[root(2), wt(3, "x")], slots=1)
    assert decision.waits == {2: Wait(WaitKind.SLOT), 3: Wait(WaitKind.BEHIND, 2)}


def test_lease_queued_behind_its_own_lane_says_so_while_slots_are_full() -> None:
    # Both wait for a slot, but 3 must also wait for 2: "behind #2" tells the operator why.
    decision = admit(running=[wt(1, "y")], waiting=[wt(2, "x"), wt(3, "x")], slots=1)
    assert decision.waits == {2: Wait(WaitKind.SLOT), 3: Wait(WaitKind.BEHIND, 2)}


def test_freed_slot_goes_to_the_earliest_unblocked_lease() -> None:
    decision = admit(running=[], waiting=[wt(5, "y"), wt(3, "x"), wt(4, "x")], slots=1)
    assert decision.admit == (3,)
    assert decision.waits == {4: Wait(WaitKind.CONFLICT, 3), 5: Wait(WaitKind.SLOT)}


def test_repo_cap_limits_one_repo_but_not_another() -> None:
    decision = admit(
        running=[wt(1, "x")],
        waiting=[wt(2, "y"), wt(3, "z"), wt(4, "x", repo=2), wt(5, "y", repo=2)],
        slots=8,
        repo_caps={1: 2},
    )
    assert decision.admit == (2, 4, 5)
    assert decision.waits == {3: Wait(WaitKind.REPO_CAP)}


def test_lowered_slot_count_admits_nothing_new() -> None:
    running = [wt(1, "x"), wt(2, "y"), wt(3, "x", repo=2)]
    decision = admit(running, waiting=[wt(4, "z"), wt(5, "a", repo=3)], slots=2)
    assert decision == Admission(admit=(), waits={4: Wait(WaitKind.SLOT), 5: Wait(WaitKind.SLOT)})


def test_duplicate_seq_is_refused() -> None:
    with pytest.raises(ValueError, match="duplicate lease seq"):
        admit(running=[wt(1, "x")], waiting=[wt(1, "y")], slots=4)


@pytest.mark.parametrize(
    ("wait", "text"),
    [
        (Wait(WaitKind.SLOT), "slot"),
        (Wait(WaitKind.REPO_CAP), "repo cap"),
        (Wait(WaitKind.CONFLICT, 12), "conflict with #12"),
        (Wait(WaitKind.BEHIND, 9), "behind #9"),
    ],
)
def test_wait_reads_as_the_board_shows_it(wait: Wait, text: str) -> None:
    assert str(wait) == text


def test_ledger_lease_is_a_claim() -> None:
    def lease(seq: int, lane: str | None, state: LeaseState) -> Lease:
        return Lease(
            seq=seq,
            repo_id=1,
            lane=lane,
            kind=LeaseKind.EXEC,
            state=state,
            holder_pid=100 + seq,
            holder_start=1,
            command=["make"],
            created_at=0.0,
        )

    running = [lease(1, "task-a", LeaseState.RUNNING)]
    waiting = [lease(2, None, LeaseState.WAITING), lease(3, "task-b", LeaseState.WAITING)]
    decision = admit(running, waiting, slots=4)
    assert decision.waits == {2: Wait(WaitKind.CONFLICT, 1), 3: Wait(WaitKind.BEHIND, 2)}


# --- the board simulator --------------------------------------------------------------------


@dataclass(frozen=True)
class Arrive:
    repo_id: int
    lane: str | None


@dataclass(frozen=True)
class Finish:
    pick: int
    """Index (modulo) into the running leases; a no-op when nothing runs."""


@dataclass(frozen=True)
class Cancel:
    pick: int
    """Index (modulo) into the waiting leases; a no-op when nothing waits."""


@dataclass(frozen=True)
class Nest:
    """A lease asked for inside a running one (an integration's brief root lease, a gate's
    `exec --lane`): `pick` chooses the parent among the running leases (a no-op when none)."""

    pick: int
    lane: str | None


Event = Arrive | Finish | Cancel | Nest


@dataclass(frozen=True)
class Schedule:
    slots: int
    repo_cap: int | None
    """One cap applied to every repo of the schedule, or none."""
    events: list[Event]

    @property
    def caps(self) -> dict[int, int]:
        return {} if self.repo_cap is None else {repo: self.repo_cap for repo in range(4)}


@dataclass(frozen=True)
class Step:
    """One admission pass: the board it saw, what it decided, and the board after starting."""

    running_before: tuple[C, ...]
    waiting_before: tuple[C, ...]
    decision: Admission
    running: tuple[C, ...]
    waiting: tuple[C, ...]


@dataclass(frozen=True)
class Trace:
    steps: list[Step]
    arrived: list[C]
    cancelled: set[int]
    admitted: list[int]
    """Seqs in the order they started, over the whole run."""
    drained: bool
    """Nothing was left running or waiting once the board was drained."""


def simulate(schedule: Schedule) -> Trace:
    """Play the events, one admission pass after each, then finish everything that runs."""
    running: list[C] = []
    waiting: list[C] = []
    arrived: list[C] = []
    cancelled: set[int] = set()
    admitted: list[int] = []
    steps: list[Step] = []

    def admission_pass() -> None:
        decision = admit(running, waiting, schedule.slots, schedule.caps)
        before = (tuple(running), tuple(waiting))
        started = set(decision.admit)
        running.extend(w for w in waiting if w.seq in started)
        waiting[:] = [w for w in waiting if w.seq not in started]
        admitted.extend(decision.admit)
        steps.append(Step(*before, decision, tuple(running), tuple(waiting)))

    for event in schedule.events:
        match event:
            case Arrive(repo_id, lane):
                lease = C(len(arrived) + 1, repo_id, lane)
                arrived.append(lease)
                waiting.append(lease)
            case Finish(pick) if running:
                running.pop(pick % len(running))
            case Cancel(pick) if waiting:
                cancelled.add(waiting.pop(pick % len(waiting)).seq)
            case Nest(pick, lane) if running:
                parent = running[pick % len(running)]
                lease = C(len(arrived) + 1, parent.repo_id, lane, parent=parent.seq)
                arrived.append(lease)
                waiting.append(lease)
        admission_pass()

    # Drain: no new arrivals; the oldest running lease finishes, then a pass runs. Each round ends
    # one lease, so more rounds than leases would mean a pass left an idle board idle.
    for _ in range(len(arrived) + 1):
        if not running:
            break
        running.remove(min(running, key=lambda c: c.seq))
        admission_pass()
    return Trace(steps, arrived, cancelled, admitted, not running and not waiting)


REPOS = (1, 2)
LANES = (None, "a", "b", "c")

# Arrivals are listed twice so they outnumber finishes and cancels and queues actually build up.
events = st.one_of(
    st.builds(Arrive, st.sampled_from(REPOS), st.sampled_from(LANES)),
    st.builds(Arrive, st.sampled_from(REPOS), st.sampled_from(LANES)),
    st.builds(Finish, st.integers(0, 7)),
    st.builds(Cancel, st.integers(0, 7)),
)
schedules = st.builds(
    Schedule,
    slots=st.integers(1, 4),
    repo_cap=st.none() | st.integers(1, 2),
    events=st.lists(events, max_size=40),
)
board = settings(max_examples=250, deadline=None)
nested_events = st.one_of(
    events,
    st.builds(Nest, st.integers(0, 7), st.sampled_from(LANES)),
    st.builds(Nest, st.integers(0, 7), st.sampled_from(LANES)),
)
nested_schedules = st.builds(
    Schedule,
    slots=st.integers(1, 4),
    repo_cap=st.none() | st.integers(1, 2),
    events=st.lists(nested_events, max_size=40),
)


def _conflicting_earlier(lease: C, leases: Sequence[C]) -> list[C]:
    return [o for o in leases if o.seq < lease.seq and conflicts(lease, o)]


def _at_capacity(step: Step, lease: C, slots: int, repo_cap: int | None) -> bool:
    in_repo = sum(1 for r in step.running if r.repo_id == lease.repo_id)
    return len(step.running) >= slots or (repo_cap is not None and in_repo >= repo_cap)


# --- properties -----------------------------------------------------------------------------


@board
@given(schedules)
def test_conflicting_leases_never_run_together(schedule: Schedule) -> None:
    """(1) Safety: after every pass, no two running leases conflict."""
    for step in simulate(schedule).steps:
        for i, a in enumerate(step.running):
            for b in step.running[i + 1 :]:
                assert not conflicts(a, b), f"#{a.seq} and #{b.seq} run together"


@board
@given(schedules)
def test_running_never_exceeds_slots_or_repo_cap(schedule: Schedule) -> None:
    """(2) Capacity: starting from an empty board, slots and the repo cap are never exceeded."""
    for step in simulate(schedule).steps:
        assert len(step.running) <= schedule.slots
        if schedule.repo_cap is not None:
            per_repo = Counter(r.repo_id for r in step.running)
            assert max(per_repo.values(), default=0) <= schedule.repo_cap


@board
@given(schedules)
def test_no_lease_overtakes_an_earlier_waiting_lease_it_conflicts_with(
    schedule: Schedule,
) -> None:
    """(3a) FIFO per conflict: nothing starts ahead of an earlier lease it conflicts with.

    Together with (3b) this is the no-starvation guarantee: the set of leases that can delay a
    waiting root lease is fixed when it arrives and only shrinks.
    """
    for step in simulate(schedule).steps:
        for started in step.decision.admit:
            lease = next(w for w in step.waiting_before if w.seq == started)
            overtaken = _conflicting_earlier(lease, step.waiting)
            assert not overtaken, f"#{started} started ahead of #{overtaken[0].seq}"
        # The same fact as a board invariant: what runs never arrived after a conflicting
        # lease that still waits.
        for w in step.waiting:
            assert all(r.seq < w.seq for r in step.running if conflicts(r, w))


@board
@given(schedules)
def test_waiting_root_lease_starts_once_earlier_conflicting_leases_end(
    schedule: Schedule,
) -> None:
    """(3b) A root lease still waiting after a pass has an earlier conflicting lease running or
    waiting, or else it waits only for a slot and every slot is taken."""
    for step in simulate(schedule).steps:
        for w in step.waiting:
            if w.lane is not None:
                continue
            if _conflicting_earlier(w, step.running + step.waiting):
                continue
            assert step.decision.waits[w.seq] == Wait(WaitKind.SLOT), f"root #{w.seq}"
            assert len(step.running) >= schedule.slots


@board
@given(schedules)
def test_unblocked_lease_starts_whenever_capacity_allows(schedule: Schedule) -> None:
    """(4) No head-of-line blocking: a lease that conflicts with nothing running and nothing
    waiting before it is left waiting only when the slots or its repo's cap are used up."""
    for step in simulate(schedule).steps:
        for w in step.waiting:
            if any(conflicts(w, r) for r in step.running):
                continue
            if _conflicting_earlier(w, step.waiting):
                continue
            assert step.decision.waits[w.seq].kind in {WaitKind.SLOT, WaitKind.REPO_CAP}
            assert _at_capacity(step, w, schedule.slots, schedule.repo_cap), f"#{w.seq} idles"


@board
@given(schedules)
def test_every_lease_is_eventually_admitted(schedule: Schedule) -> None:
    """(3c) Liveness: once arrivals stop and running leases finish, every lease not cancelled
    has started, and conflicting leases started in arrival order."""
    trace = simulate(schedule)
    assert trace.drained
    expected = {c.seq for c in trace.arrived} - trace.cancelled
    assert set(trace.admitted) == expected
    order = {seq: i for i, seq in enumerate(trace.admitted)}
    by_seq = {c.seq: c for c in trace.arrived}
    for a in trace.admitted:
        for b in trace.admitted:
            if a < b and conflicts(by_seq[a], by_seq[b]):
                assert order[a] < order[b], f"#{b} started before the earlier #{a}"


@board
@given(schedules, st.randoms(use_true_random=False))
def test_admit_is_deterministic_and_admits_in_seq_order(
    schedule: Schedule, rnd: random.Random
) -> None:
    """(5) The decision depends on the board, not on input order, and covers every waiter."""
    for step in simulate(schedule).steps:
        running, waiting = list(step.running_before), list(step.waiting_before)
        rnd.shuffle(running)
        rnd.shuffle(waiting)
        again = admit(running, waiting, schedule.slots, schedule.caps)
        assert again == step.decision
        assert list(again.admit) == sorted(set(again.admit))
        assert set(again.admit).isdisjoint(again.waits)
        assert set(again.admit) | set(again.waits) == {w.seq for w in waiting}


@board
@given(schedules)
def test_every_wait_names_a_true_reason(schedule: Schedule) -> None:
    """(6) What the board shows is a fact: a conflict names the lowest conflicting running lease,
    "behind" the lowest earlier waiting one it conflicts with, and slot or repo cap waits happen
    only when nothing conflicts and that capacity is really used up."""
    for step in simulate(schedule).steps:
        for w in step.waiting:
            wait = step.decision.waits[w.seq]
            # The board as `w` found it: what ran before the pass and what started ahead of it.
            seen = [r for r in step.running if r in step.running_before or r.seq < w.seq]
            blockers = sorted(r.seq for r in seen if conflicts(r, w))
            ahead = sorted(o.seq for o in _conflicting_earlier(w, step.waiting))
            in_repo = sum(1 for r in seen if r.repo_id == w.repo_id)
            match wait.kind:
                case WaitKind.CONFLICT:
                    assert blockers and wait.other == blockers[0]
                case WaitKind.BEHIND:
                    assert not blockers and ahead and wait.other == ahead[0]
                case WaitKind.SLOT:
                    assert not blockers and not ahead and wait.other is None
                    assert len(seen) >= schedule.slots
                case WaitKind.REPO_CAP:
                    assert not blockers and not ahead and wait.other is None
                    assert len(seen) < schedule.slots
                    assert schedule.repo_cap is not None and in_repo >= schedule.repo_cap


# --- nested leases ----------------------------------------------------------------------------


@board
@given(nested_schedules)
def test_with_nested_leases_only_a_lease_and_its_parent_may_conflict_and_run(
    schedule: Schedule,
) -> None:
    """(N1) Safety with nesting: two running leases conflict only when one is the other's
    parent."""
    for step in simulate(schedule).steps:
        for i, a in enumerate(step.running):
            for b in step.running[i + 1 :]:
                family = a.parent == b.seq or b.parent == a.seq
                assert family or not (
                    a.repo_id == b.repo_id
                    and (a.lane is None or b.lane is None or a.lane == b.lane)
                ), f"#{a.seq} and #{b.seq} run together"


@board
@given(nested_schedules)
def test_a_nested_lease_waits_only_for_running_conflicts(schedule: Schedule) -> None:
    """(N2) No waiting for itself: a lease nested in a running one is never held back behind a
    waiting lease, nor for a slot or a repo cap (its parent holds those)."""
    for step in simulate(schedule).steps:
        running = {r.seq for r in step.running_before}
        for w in step.waiting_before:
            if w.parent in running and w.seq in step.decision.waits:
                assert step.decision.waits[w.seq].kind is WaitKind.CONFLICT, f"#{w.seq}"


@board
@given(nested_schedules)
def test_leases_of_their_own_never_exceed_the_slots(schedule: Schedule) -> None:
    """(N3) Capacity with nesting: the leases that took a slot of their own (not nested in a
    running parent when they started) never exceed the slots."""
    own: set[int] = set()
    for step in simulate(schedule).steps:
        before = {r.seq for r in step.running_before}
        for seq in step.decision.admit:
            lease = next(w for w in step.waiting_before if w.seq == seq)
            if lease.parent not in before:
                own.add(seq)
        assert sum(1 for r in step.running if r.seq in own) <= schedule.slots


@board
@given(nested_schedules)
def test_with_nested_leases_every_lease_is_eventually_admitted(schedule: Schedule) -> None:
    """(N4) Liveness with nesting: draining the board starts every lease not cancelled."""
    trace = simulate(schedule)
    assert trace.drained
    assert set(trace.admitted) == {c.seq for c in trace.arrived} - trace.cancelled
