"""How the CLI shows values: stable JSON documents (docs/cli.md) and plain text lines.

The JSON field names are an interface that scripts and agent hooks depend on; add fields, never
rename or remove them.
"""

from __future__ import annotations

import json
import shlex
import sys
import time
from datetime import UTC, datetime
from typing import Any

from laneboard.core.adapters.verify import Verdict
from laneboard.core.domain.lanes import Lease
from laneboard.core.domain.models import Event, Repo, Task
from laneboard.core.operations.doctor import Finding
from laneboard.core.service.app import LanesReport


def iso(at: float | None) -> str | None:
    """Seconds since the epoch as an ISO 8601 UTC timestamp."""
    if at is None:
        return None
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def task_json(task: Task, repo: Repo) -> dict[str, Any]:
    return {
        "id": task.id,
        "name": task.name,
        "repo": repo.root,
        "state": task.state.value,
        "base_ref": task.base_ref,
        "base_sha": task.base_sha,
        "branch": task.branch,
        "branch_created_by_us": task.branch_created_by_us,
        "branch_tip_at_creation": task.branch_tip_at_creation,
        "worktree_path": task.worktree_path,
        "worktree_area": task.area,
        "worktree_admin_name": task.admin_name,
        "worktree_created_by_us": task.worktree_created_by_us,
        "identity": task.identity.as_dict() if task.identity else None,
        "reviewed_sha": task.reviewed_sha,
        "finalized_sha": task.finalized_sha,
        "disposition": task.disposition.value if task.disposition else None,
        "created_at": iso(task.created_at),
        "updated_at": iso(task.updated_at),
        "retired_at": iso(task.retired_at),
    }


def event_json(event: Event) -> dict[str, Any]:
    return {
        "seq": event.seq,
        "task_id": event.task_id,
        "at": iso(event.at),
        "kind": event.kind,
        "actor": event.actor.value,
        "data": event.data,
    }


def verdict_json(task: Task, verdict: Verdict) -> dict[str, Any]:
    return {
        "task": task.name,
        "task_id": task.id,
        "path": task.worktree_path,
        "ok": verdict.ok,
        "reason": verdict.reason.value if verdict.reason else None,
        "detail": verdict.detail,
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


def lease_json(lease: Lease) -> dict[str, Any]:
    return {
        "seq": lease.seq,
        "lane": lease.lane,
        "kind": lease.kind.value,
        "state": lease.state.value,
        "command": lease.command,
        "pid": lease.holder_pid,
        "child_pid": lease.child_pid,
        "created_at": iso(lease.created_at),
        "admitted_at": iso(lease.admitted_at),
        "wait_reason": lease.wait_reason.as_dict() if lease.wait_reason else None,
    }


def lanes_json(report: LanesReport) -> dict[str, Any]:
    return {
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
                        "running": [lease_json(x) for x in view.running],
                        "waiting": [lease_json(x) for x in view.waiting],
                    }
                    for view in views
                ],
            }
            for repo, views in report.repos
        ],
    }


def _since(at: float | None) -> str:
    if at is None:
        return ""
    seconds = max(0, int(time.time() - at))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def lanes_text(report: LanesReport) -> str:
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
                pid = lease.child_pid or lease.holder_pid
                lines.append(
                    f"  {view.label:<20} running #{lease.seq} `{command}` "
                    f"(pid {pid}, {_since(lease.admitted_at)})"
                )
            for lease in view.waiting:
                command = shlex.join(lease.command)
                lines.append(
                    f"  {view.label:<20} waiting #{lease.seq} `{command}` "
                    f"({lease.wait_reason}, {_since(lease.created_at)})"
                )
    return "\n".join(lines)


def emit_json(document: Any) -> None:
    json.dump(document, sys.stdout, indent=2, sort_keys=False)
    sys.stdout.write("\n")


def table(rows: list[list[str]], headers: list[str]) -> str:
    """Left-aligned columns separated by two spaces; the last column is not padded."""
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
    lines = []
    for row in [headers, *rows]:
        cells = [str(c).ljust(w) for c, w in zip(row[:-1], widths[:-1], strict=True)]
        lines.append("  ".join([*cells, str(row[-1])]))
    return "\n".join(lines)
