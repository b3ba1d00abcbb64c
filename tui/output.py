"""How the CLI shows values: stable JSON documents (docs/cli.md) and plain text lines.

Every JSON document is an object whose `schema` field names its kind and version
(`"task/1"`); the field names are an interface scripts and agent hooks depend on: fields are
added, never renamed or removed (a golden test per command holds them). Values only: nothing
here reads the disk or the ledger.
"""

from __future__ import annotations

import json
import math
import shlex
import sys
import time
from typing import Any

from laneboard.core.domain.agents import AgentState, State
from laneboard.core.domain.lanes import Lease, Lingering
from laneboard.core.domain.models import Event, Repo, Task, TaskState
from laneboard.core.domain.queue import QueueLine, QueueReport, QueueView
from laneboard.core.domain.verdict import Verdict
from laneboard.core.domain.views import (
    Completion,
    Finding,
    GitState,
    LanesView,
    LaneView,
    Registration,
    ShimDir,
    TaskView,
)

VERSION = 1

CONTROLS = {c: "?" for c in [*range(0, 9), *range(11, 32), 127, *range(128, 160)]}
"""Terminal control characters (C0 but tab and newline, DEL, C1), as laneboard prints text it
did not write: each shown as `?`, never obeyed by the operator's terminal."""


def schema(kind: str) -> str:
    return f"{kind}/{VERSION}"


def iso(at: float | None) -> str | None:
    """Seconds since the epoch as an ISO 8601 UTC timestamp."""
    if at is None:
        return None
    # As datetime rounds (CPython's `_PyTime_DoubleToDenominator`): the fraction alone to
    # microseconds, half to even; then cut to milliseconds as `isoformat` does.
    fraction, whole = math.modf(at)
    micros = round(fraction * 1_000_000)
    seconds = int(whole) + micros // 1_000_000
    millis = micros % 1_000_000 // 1000
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"


def age(at: float | None, now: float | None = None) -> str:
    """How long ago, as `42s`, `7m`, `3h`, `5d`."""
    if at is None:
        return ""
    seconds = max(0, int((now or time.time()) - at))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


# --- JSON documents -----------------------------------------------------------------------


def task_fields(task: Task, repo: Repo) -> dict[str, Any]:
    return {
        "id": task.id,
        "name": task.name,
        "repo": repo.root,
        "state": task.state.value,
        "base_ref": task.base_ref,
        "base_sha": task.base_sha,
        "branch": task.branch,
        "target": task.target,
        "branch_created_by_us": task.branch_created_by_us,
        "branch_tip_at_creation": task.branch_tip_at_creation,
        "worktree_path": task.worktree_path,
        "worktree_area": task.area,
        "worktree_admin_name": task.admin_name,
        "worktree_created_by_us": task.worktree_created_by_us,
        "identity": task.identity.as_dict() if task.identity else None,
        "agent_profile": task.agent_profile,
        "conversation_id": task.conversation_id,
        "pane": pane_json(task),
        "reviewed_sha": task.reviewed_sha,
        "reviewed_at": iso(task.reviewed_at),
        "finalized_sha": task.finalized_sha,
        "target_old": task.target_old,
        "target_new": task.target_new,
        "pr_url": task.pr_url,
        "confined": task.confined,
        "confine_note": task.confine_note,
        "disposition": task.disposition.value if task.disposition else None,
        "parent_id": task.parent_id,
        "created_at": iso(task.created_at),
        "updated_at": iso(task.updated_at),
        "retired_at": iso(task.retired_at),
    }


def pane_json(task: Task) -> dict[str, Any] | None:
    if not task.tmux_pane:
        return None
    return {
        "socket": task.tmux_socket,
        "session_id": task.tmux_session,
        "window_id": task.tmux_window,
        "pane_id": task.tmux_pane,
    }


def agent_json(state: State | None) -> dict[str, Any] | None:
    if state is None:
        return None
    return {"state": state.state.value, "exit_code": state.code, "source": state.source}


def state_text(view: TaskView) -> str:
    """The task's state as `ls` shows it: its lifecycle state, except that a running task
    whose agent has ended (exited, or its pane lost) while no controller recorded it yet is
    not called `running` (`exited`, `lost`; `supervise` or the board records it)."""
    agent = view.agent
    if view.task.state is TaskState.RUNNING and agent is not None and agent.state in ENDED:
        return agent.state.value
    return view.task.state.value


ENDED = (AgentState.EXITED, AgentState.LOST)


def agent_text(view: TaskView) -> str:
    """What the agent does now (`working`, `exited(1)`, `runtime lost`) for a running task;
    for another, what was last recorded (`paused`, `exited(0)`); empty without an agent."""
    if view.agent is None:
        return view.task.agent_state or "" if view.task.live else ""
    if view.agent.state is AgentState.LOST:
        return "runtime lost"
    return str(view.agent) + (" (unconfined)" if view.task.confined is False else "")


def git_json(state: GitState | None) -> dict[str, Any] | None:
    if state is None:
        return None
    last = state.last_commit
    return {
        "present": state.present,
        "clean": state.clean,
        "head": state.head,
        "detached": state.detached,
        "staged": state.staged,
        "modified": state.modified,
        "untracked": state.untracked,
        "conflicted": state.conflicted,
        "ahead": state.ahead,
        "behind": state.behind,
        "last_commit": (
            {"sha": last.sha, "subject": last.subject, "at": iso(last.at)} if last else None
        ),
        "problem": state.problem,
    }


def lane_json(view: LaneView | None) -> dict[str, Any] | None:
    if view is None:
        return None
    return {
        "running": [lease_json(x) for x in view.running],
        "waiting": [lease_json(x) for x in view.waiting],
    }


def verdict_fields(verdict: Verdict) -> dict[str, Any]:
    return {
        "ok": verdict.ok,
        "reason": verdict.reason.value if verdict.reason else None,
        "detail": verdict.detail,
    }


def task_view_json(view: TaskView) -> dict[str, Any]:
    """A task with what its worktree holds and its lane does now."""
    return {
        **task_fields(view.task, view.repo),
        "git": git_json(view.git),
        "lane": lane_json(view.lane),
        "verification": verdict_fields(view.verdict) if view.verdict else None,
        "agent": agent_json(view.agent),
    }


def task_document(view: TaskView, **extra: Any) -> dict[str, Any]:
    return {"schema": schema("task"), **task_view_json(view), **extra}


def completion_json(done: Completion) -> dict[str, Any]:
    """A child's completion record: the same object `wait --json` lists and `show --json`
    carries as `completion` (docs/delegation.md)."""
    task = done.task
    return {
        "id": task.id,
        "name": task.name,
        "repo": done.repo.root,
        "parent_id": task.parent_id,
        "state": task.state.value,
        "done": done.done,
        "lost": done.lost,
        "worktree_path": task.worktree_path,
        "pane": pane_json(task),
        "branch": task.branch,
        "target": task.target,
        "base_sha": task.base_sha,
        "head_sha": done.head_sha,
        "branch_sha": done.branch_sha,
        "detached": done.detached,
        "ahead": done.ahead,
        "files": [
            {
                "path": f.path,
                "status": f.change.value,
                "old_path": f.old_path,
                "added": f.added,
                "removed": f.removed,
                "binary": f.binary,
            }
            for f in done.files
        ],
        "worktree": {
            "clean": done.clean,
            "staged": list(done.staged),
            "modified": list(done.modified),
            "untracked": list(done.untracked),
            "conflicted": list(done.conflicted),
            "problem": done.worktree_problem,
        },
        "checks": [
            {"name": c.name, "result": "pass" if c.passed else "fail", "at": iso(c.at)}
            for c in done.checks
        ],
        "message": done.message,
        "screen": done.screen,
        "exit_code": task.agent_exit,
        "reason": done.reason,
        "agent_profile": task.agent_profile,
        "conversation_id": task.conversation_id,
    }


def completions_document(done: list[Completion], pending: list[Task]) -> dict[str, Any]:
    return {
        "schema": schema("completions"),
        "completions": [completion_json(c) for c in done],
        "pending": [{"id": t.id, "name": t.name, "state": t.state.value} for t in pending],
    }


def completion_text(done: Completion) -> str:
    """A completion record for a person: a few lines."""
    task = done.task
    ahead = f"{done.ahead} commit(s) ahead of {task.base_sha[:12]}"
    plus = sum(f.added or 0 for f in done.files)
    minus = sum(f.removed or 0 for f in done.files)
    holds = done.worktree_problem or counts_text(
        len(done.staged), len(done.modified), len(done.untracked), len(done.conflicted)
    )
    lines = [
        f"{task.name} ({task.id}): {task.state.value}",
        f"  branch    {task.branch} at {(done.branch_sha or '(gone)')[:12]}, {ahead}",
        f"  files     {len(done.files)} changed, +{plus} -{minus}",
        f"  worktree  {task.worktree_path}: {holds}",
    ]
    if done.checks:
        shown = ", ".join(f"{c.name} {'pass' if c.passed else 'FAIL'}" for c in done.checks)
        lines.append(f"  checks    {shown}")
    if done.detached:
        lines.append(f"  head      {(done.head_sha or '')[:12]}: detached, not on {task.branch}")
    if done.lost:
        lines.append(f"  agent     its pane is gone (`laneboard resume {task.name}`)")
    if task.agent_exit not in (None, 0):
        lines.append(f"  agent     exited with {task.agent_exit}")
    if done.reason:
        lines.append(f"  reason    {done.reason}")
    if done.message:
        lines.append(f"  message   {done.message.splitlines()[0] if done.message else ''}")
    if task.conversation_id:
        lines.append(f"  resume    conversation {task.conversation_id}")
    return "\n".join(lines)


def tasks_document(views: list[TaskView]) -> dict[str, Any]:
    return {"schema": schema("tasks"), "tasks": [task_view_json(v) for v in views]}


def event_json(event: Event) -> dict[str, Any]:
    return {
        "seq": event.seq,
        "task_id": event.task_id,
        "at": iso(event.at),
        "kind": event.kind,
        "actor": event.actor.value,
        "data": event.data,
    }


def log_document(task: Task, repo: Repo, events: list[Event]) -> dict[str, Any]:
    return {
        "schema": schema("log"),
        **task_fields(task, repo),
        "events": [event_json(e) for e in events],
    }


def verdict_document(task: Task, verdict: Verdict) -> dict[str, Any]:
    return {
        "schema": schema("verdict"),
        "task": task.name,
        "task_id": task.id,
        "path": task.worktree_path,
        **verdict_fields(verdict),
    }


def finding_json(repo: Repo, finding: Finding) -> dict[str, Any]:
    return {
        "repo": repo.root,
        "kind": finding.kind,
        "task": finding.task,
        "task_id": finding.task_id,
        "detail": finding.detail,
        "fixed": finding.fixed,
        "resolved": finding.resolved,
    }


def findings_document(found: list[tuple[Repo, Finding]]) -> dict[str, Any]:
    return {
        "schema": schema("findings"),
        "findings": [finding_json(repo, f) for repo, f in found],
        "resolved": all(f.resolved for _, f in found),
    }


def lease_json(lease: Lease, lingering: tuple[Lingering, ...] = ()) -> dict[str, Any]:
    """A lease as scripts read it; `lingering` are the processes that keep it after its command
    exited (`lanes` looks for them)."""
    return {
        "seq": lease.seq,
        "lane": lease.lane,
        "kind": lease.kind.value,
        "state": lease.state.value,
        "command": list(lease.command),
        "pid": lease.holder_pid,
        "child_pid": lease.child_pid,
        "created_at": iso(lease.created_at),
        "admitted_at": iso(lease.admitted_at),
        "exit_code": lease.exit_code,
        "wait_reason": lease.wait_reason.as_dict() if lease.wait_reason else None,
        "lingering": [{"pid": found.pid, "command": found.command} for found in lingering],
    }


def lanes_document(report: LanesView) -> dict[str, Any]:
    return {
        "schema": schema("lanes"),
        "slots": report.slots,
        "used": report.used,
        "free": max(0, report.slots - report.used),
        "repos": [
            {
                "repo": repo.root,
                "lanes": [
                    {
                        "lane": view.label,
                        "task_id": view.task_id,
                        "running": [lease_json(x, view.left_by(x)) for x in view.running],
                        "waiting": [lease_json(x) for x in view.waiting],
                    }
                    for view in views
                ],
            }
            for repo, views in report.repos
        ],
    }


def registration_document(done: Registration) -> dict[str, Any]:
    return {
        "schema": schema("registration"),
        "repo": done.repo.root,
        "common_dir": done.repo.common_dir,
        "registered": done.registered,
        "moved_from": done.relocation.moved_from if done.relocation else None,
    }


def shims_document(shims: ShimDir) -> dict[str, Any]:
    return {
        "schema": schema("shims"),
        "task": shims.task.name,
        "task_id": shims.task.id,
        "bin": shims.path,
        "commands": list(shims.commands),
    }


def queue_entry_json(line: QueueLine) -> dict[str, Any]:
    entry = line.entry
    return {
        "position": line.position,
        "task": line.name,
        "task_id": entry.task_id,
        "target": entry.target,
        "sha": entry.sha,
        "state": entry.state.value,
        "added_at": iso(entry.added_at),
        "note": entry.note,
        "tell": entry.tell,
    }


def queue_document(view: QueueView) -> dict[str, Any]:
    return {
        "schema": schema("queue"),
        "entries": [queue_entry_json(line) for line in view.lines],
        "paused": list(view.paused),
        "gate_started_at": iso(view.gate_started_at),
        "gate_seconds": view.gate_seconds,
    }


def queue_run_document(report: QueueReport, notes: list[str]) -> dict[str, Any]:
    return {
        "schema": schema("queue-run"),
        "batches": report.batches,
        "gate_runs": report.gate_runs,
        "landed": list(report.landed),
        "returned": [{"task": name, "reason": why} for name, why in report.returned],
        "deferred": [{"task": name, "reason": why} for name, why in report.deferred],
        "paused": list(report.paused),
        "notes": notes,
    }


def emit_json(document: dict[str, Any]) -> None:
    json.dump(document, sys.stdout, indent=2, sort_keys=False)
    sys.stdout.write("\n")


# --- text ----------------------------------------------------------------------------------


def counts_text(staged: int, modified: int, untracked: int, conflicted: int) -> str:
    """`2 staged, 1 modified, 3 untracked, 1 conflicted` (the ones there are), or `clean`."""
    parts = [
        f"{n} {label}"
        for n, label in (
            (staged, "staged"),
            (modified, "modified"),
            (untracked, "untracked"),
            (conflicted, "conflicted"),
        )
        if n
    ]
    return ", ".join(parts) or "clean"


def git_text(state: GitState | None) -> str:
    """`clean`, or counts: `2 staged, 1 modified, 3 untracked, 1 conflicted`; then `↑2 ↓1`
    against the target."""
    if state is None:
        return ""
    if not state.present:
        return f"({state.problem})" if state.problem else "(gone)"
    text = counts_text(state.staged, state.modified, state.untracked, state.conflicted)
    if state.ahead is not None and state.behind is not None:
        text += f", {state.ahead} ahead, {state.behind} behind"
    return text


def commit_text(state: GitState | None, now: float | None = None) -> str:
    last = state.last_commit if state else None
    if last is None:
        return ""
    return f"{last.sha[:8]} {last.subject} ({age(last.at, now)} ago)"


def lane_text(view: LaneView | None, now: float | None = None) -> str:
    """`idle`, `running `cargo test` 12s`, or `waiting (conflict with #4 `make`)`."""
    if view is None:
        return ""
    if view.running:
        lease = view.running[0]
        text = f"running `{shlex.join(lease.command)}` {age(lease.admitted_at, now)}"
        if lease.exit_code is not None:
            text += f" (exited {lease.exit_code}; its background processes still run)"
        return text
    if view.waiting:
        lease = view.waiting[0]
        return f"waiting ({lease.wait_reason or 'waiting'})"
    return "idle"


def lanes_text(report: LanesView) -> str:
    """Per repo: each lane's state (idle, running with command and pid, waiting with reason)."""
    free = max(0, report.slots - report.used)
    lines = [f"slots: {report.used} of {report.slots} used, {free} free"]
    for repo, views in report.repos:
        lines.append(f"{repo.root}")
        for view in views:
            if not view.running and not view.waiting:
                lines.append(f"  {view.label:<20} idle")
            for lease in view.running:
                command = shlex.join(lease.command)
                left = view.left_by(lease)
                now = f"pid {lease.child_pid or lease.holder_pid}"
                if left:  # the command is gone: what it left running keeps the lane
                    now = "exited" if lease.exit_code is None else f"exited {lease.exit_code}"
                lines.append(
                    f"  {view.label:<20} running #{lease.seq} `{command}` "
                    f"({now}, {age(lease.admitted_at)})"
                )
                for found in left:
                    lines.append(f"  {'':<20}   left running: pid {found.pid} `{found.command}`")
            for lease in view.waiting:
                command = shlex.join(lease.command)
                lines.append(
                    f"  {view.label:<20} waiting #{lease.seq} `{command}` "
                    f"({lease.wait_reason}, {age(lease.created_at)})"
                )
    return "\n".join(lines)


def table(rows: list[list[str]], headers: list[str]) -> str:
    """Left-aligned columns separated by two spaces; the last column is not padded."""
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
    lines = []
    for row in [headers, *rows]:
        cells = [str(c).ljust(w) for c, w in zip(row[:-1], widths[:-1], strict=True)]
        lines.append("  ".join([*cells, str(row[-1])]).rstrip())
    return "\n".join(lines)


def as_tree(views: list[TaskView]) -> list[TaskView]:
    """`views` with every child right below its parent (depth first), roots and siblings in
    the order given; a task whose parent is not among them is a root here."""
    present = {v.task.id for v in views}
    below: dict[str | None, list[TaskView]] = {}
    for view in views:
        parent = view.task.parent_id if view.task.parent_id in present else None
        below.setdefault(parent, []).append(view)
    ordered: list[TaskView] = []
    todo = list(reversed(below.get(None, [])))
    while todo:
        view = todo.pop()
        ordered.append(view)
        todo += reversed(below.get(view.task.id, []))
    return ordered


def depth_in(task: Task, by_id: dict[str, Task]) -> int:
    """How many of `task`'s ancestors are in `by_id`."""
    depth, at = 0, task
    while at.parent_id in by_id and depth < 64:
        at = by_id[at.parent_id]
        depth += 1
    return depth


def tree_names(views: list[TaskView]) -> dict[str, str]:
    """Each task's name indented under its parent (`  └─ child`), by task id."""
    by_id = {v.task.id: v.task for v in views}
    named: dict[str, str] = {}
    for view in views:
        depth = depth_in(view.task, by_id)
        indent = "" if depth == 0 else "  " * (depth - 1) + "└─ "
        named[view.task.id] = indent + view.task.name
    return named


def queue_text(view: QueueView) -> str:
    """The queue as the operator reads it: each target's line in order, then what left."""
    if not view.lines:
        return "the merge queue is empty (`laneboard queue add NAME` puts a reviewed task in line)"
    rows = []
    for line in view.lines:
        entry = line.entry
        place = f"{line.position:>3}" if line.position is not None else "  -"
        note = f"  {entry.note}" if entry.note else ""
        rows.append(
            f"{place}  {line.name:<20} -> {entry.target:<12} {entry.sha[:12]}  "
            f"{entry.state.value}{note}"
        )
    for target in view.paused:
        rows.append(f"queue of {target}: paused")
    if view.gate_started_at is not None:
        rows.append(gate_progress(view, time.time()))
    return "\n".join(rows)


def gate_progress(view: QueueView, now: float) -> str:
    """`gate running 12s, about 18s left` (the estimate from the gate's recent runs)."""
    assert view.gate_started_at is not None
    ran = now - view.gate_started_at
    left = f", about {max(0.0, view.gate_seconds - ran):.0f}s left" if view.gate_seconds else ""
    return f"gate running {ran:.0f}s{left}"


def queue_summary(view: QueueView, now: float) -> str:
    """The board header's line for one repository's queue: how many wait, how many are in
    the batch under test, the gate's progress, paused targets."""
    waiting = sum(1 for line in view.lines if line.entry.state.value == "waiting")
    testing = sum(1 for line in view.lines if line.entry.state.value == "testing")
    parts = [f"queue: {waiting} in line"]
    if testing:
        parts.append(f"{testing} in the batch")
    if view.gate_started_at is not None:
        parts.append(gate_progress(view, now))
    if view.paused:
        parts.append(f"paused ({', '.join(view.paused)})")
    return ", ".join(parts)
