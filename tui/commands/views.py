"""Commands that read: ls, show, log, verify and doctor."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from laneboard.core.domain.errors import UsageError
from laneboard.core.domain.models import Task
from laneboard.tui.commands.common import (
    here_or_all,
    repo_arg,
)
from laneboard.tui.root import open_service

if TYPE_CHECKING:
    import argparse

    from laneboard.core.domain.views import TaskView


def cmd_ls(args: argparse.Namespace) -> int:
    from laneboard.core.service.app import NotRegistered
    from laneboard.tui import output

    service = open_service()
    if args.follow:
        if not args.json or args.children or args.all:
            raise UsageError("--follow goes with --json alone (every live task of this machine)")
        from laneboard.tui.follow import follow

        return follow(service)
    if args.children:
        top = service.resolve(repo_arg(args), args.children)
        below = {t.id for t in service.descendants(top, include_retired=args.all)}
        views = [
            v for v in service.tasks(top.repo_id, include_retired=args.all) if v.task.id in below
        ]
        if args.json:
            output.emit_json(output.tasks_document(views))
        elif not views:
            print(f"no children of {top.name}")
        else:
            _print_tasks(views, top.repo_id)
        return 0
    try:
        where, views = here_or_all(args, lambda at: service.tasks(at, include_retired=args.all))
        if where is None and not args.local and service.hosts():
            from laneboard.tui.commands.hosts import list_with_hosts

            return list_with_hosts(args, service, views, lambda v: _print_tasks(v, None))
    except NotRegistered as err:
        # Listing an unregistered repo is not an error: it simply has no tasks yet.
        if args.json:
            output.emit_json(output.tasks_document([]))
        else:
            print(f"no tasks: {err}")
        return 0
    if args.json:
        output.emit_json(output.tasks_document(views))
        return 0
    if not views:
        print("no tasks" if where is None else f"no tasks in {service.repo(where).root}")
        return 0
    _print_tasks(views, where)
    return 0


def _print_tasks(views: list[TaskView], where: object) -> None:
    """The task table; children indented under their parent (`└─`)."""
    from laneboard.tui import output

    views = output.as_tree(views)
    names = output.tree_names(views)
    rows = [
        [
            names[v.task.id],
            output.state_text(v),
            v.task.target or "",
            output.git_text(v.git),
            output.commit_text(v.git),
            output.agent_text(v),
            output.lane_text(v.lane),
            *([] if where is not None else [v.repo.root]),
        ]
        for v in views
    ]
    headers = ["NAME", "STATE", "TARGET", "WORKTREE", "LAST COMMIT", "AGENT", "LANE"]
    print(output.table(rows, headers + ([] if where is not None else ["REPO"])))


def cmd_show(args: argparse.Namespace) -> int:
    from laneboard.tui import output

    service = open_service()
    view = service.task(repo_arg(args), args.name)
    gaps = service.confinement_gaps() if view.task.confined else []
    if args.json:
        done = service.completion(view.task)
        document = output.task_document(
            view, completion=output.completion_json(done), confine_gaps=gaps
        )
        output.emit_json(document)
        return 0
    task = view.task
    lines = [
        ("task", f"{task.name} ({task.id})"),
        ("state", task.state.value),
        ("branch", task.branch + (f" → {task.target}" if task.target else "")),
        ("worktree", task.worktree_path),
    ]
    if task.parent_id:
        parent = service.task_by_id(task.parent_id)
        lines.append(("parent", f"{parent.name} ({parent.id})"))
    below = service.children(task)
    if below:
        lines.append(("children", ", ".join(f"{t.name} ({t.state.value})" for t in below)))
    if task.reviewed_sha:
        when = f" ({output.age(task.reviewed_at)} ago)" if task.reviewed_at else ""
        lines.append(("reviewed", f"{task.reviewed_sha}{when}"))
    if task.finalized_sha:
        how = "published" if task.disposition and task.disposition.value == "published" else ""
        old, new = task.target_old or "", task.target_new or ""
        moved = f" ({old[:12]} -> {new[:12]})" if new else ""
        lines.append(
            ("finalized", f"{task.finalized_sha} {how or 'into ' + str(task.target)}{moved}")
        )
    if task.pr_url:
        lines.append(("pull request", task.pr_url))
    if task.live:
        lines += [
            ("holds", output.git_text(view.git)),
            ("last commit", output.commit_text(view.git) or "(none)"),
            ("agent", _agent_line(view)),
            *([("confined", _confined_text(task))] if task.confined is not None else []),
            ("lane", output.lane_text(view.lane)),
            ("health", str(view.verdict) if view.verdict else ""),
        ]
    else:
        lines.append(("retired", f"{task.disposition} {output.iso(task.retired_at)}"))
    lines += [("confine gap", gap) for gap in gaps]
    if args.verbose:
        for key, value in output.task_fields(task, view.repo).items():
            lines.append((key, "" if value is None else str(value)))
    for key, value in lines:
        print(f"{key + ':':<14}{value}".rstrip())
    return 0


def _confined_text(task: Task) -> str:
    if task.confined:
        return (
            "yes: bwrap (it writes its own worktree, branches and objects; every other "
            "checkout, ref and object, and laneboard's state, are read-only or hidden)"
        )
    return f"no: {task.confine_note or 'unconfined'}"


def _agent_line(view: TaskView) -> str:
    from laneboard.tui import output

    task = view.task
    if task.agent_profile is None:
        return "(none: `laneboard start` starts one)"
    parts = [task.agent_profile]
    if view.agent is not None:
        parts.append(output.agent_text(view))
    if task.tmux_pane:
        parts.append(f"pane {task.tmux_pane}")
    if task.conversation_id:
        parts.append(f"conversation {task.conversation_id}")
    return ", ".join(parts)


def cmd_log(args: argparse.Namespace) -> int:
    import json

    from laneboard.tui import output

    service = open_service()
    task, events = service.log(repo_arg(args), args.name)
    if args.json:
        output.emit_json(output.log_document(task, service.repo(repo_arg(args)), events))
        return 0
    print(f"{task.name} ({task.id}): {task.state.value}")
    for event in events:
        data = json.dumps(event.data, sort_keys=True) if event.data else ""
        print(f"{output.iso(event.at)}  {event.actor.value:<6} {event.kind:<22} {data}".rstrip())
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    from laneboard.tui import output

    task, verdict = open_service().verify(repo_arg(args), args.name, repin=args.repin)
    if args.json:
        output.emit_json(output.verdict_document(task, verdict))
    elif verdict.ok:
        print(f"ok: {task.worktree_path}")
    else:
        print(f"rejected: {verdict}", file=sys.stderr)
    return 0 if verdict.ok else 1


def cmd_doctor(args: argparse.Namespace) -> int:
    from laneboard.tui import output

    service = open_service()
    _, report = here_or_all(args, lambda at: service.doctor(at, fix=args.fix))
    findings = [(repo, f) for repo, found in report for f in found]
    if args.json:
        output.emit_json(output.findings_document(findings))
    elif not findings:
        print("no problems found")
    else:
        for repo, finding in findings:
            who = f" {finding.task}" if finding.task else ""
            fixed = f" [{finding.fixed}]" if finding.fixed else ""
            print(f"{repo.root}: {finding.kind}{who}: {finding.detail}{fixed}")
    return 0 if all(f.resolved for _, f in findings) else 1
