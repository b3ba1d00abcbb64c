"""The `laneboard` command line: parse, call the application service, print, exit.

The parser is built from the commands declared once in `laneboard.core.service.commands`; each
command's handler below calls the service (`laneboard.core.service.app`) or, for `exec`, its
lean entry (`laneboard.core.service.lanes`), and prints values (`laneboard.tui.output`).

Exit codes: 0 success, 1 refused (the reason on stderr, one line per reason), 2 usage error,
75 gave up waiting for a lane; `exec` exits with its command's code. Bad input never produces a
traceback; set `LANEBOARD_DEBUG=1` to see one for an unexpected internal error.

Imports are made inside each command: `laneboard exec` (run for every shimmed `cargo` or `make`)
loads neither the TUI stack nor pygit2, and pydantic only when a config file must be validated.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from laneboard.core.domain.channel import CALLER_ENV, refused
from laneboard.core.domain.errors import LaneboardError, UsageError, WaitTimeout
from laneboard.core.domain.models import Task, TaskState

if TYPE_CHECKING:
    import argparse

    from laneboard.core.domain.lanes import Lease
    from laneboard.core.domain.views import Outcome, TaskView
    from laneboard.core.service.app import Service
    from laneboard.sessions.tmux import TmuxRuntime

Handler = Callable[["argparse.Namespace"], int]


class _Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGHUP during a command that changes things: unwound like Ctrl-C, so that
    provisioning rolls back and leases are released before the process ends."""


T = TypeVar("T")

_OPENED: list[Service] = []
"""Services this invocation opened; `main` closes their connections when the command ends."""


def open_service() -> Service:
    from laneboard.core.service.app import Service

    def runtime() -> TmuxRuntime:
        from laneboard.sessions.tmux import TmuxRuntime

        return TmuxRuntime(Service.tmux_socket())

    service = Service(
        runtime=runtime, on_notice=lambda line: print(f"laneboard: {line}", file=sys.stderr)
    )
    _OPENED.append(service)
    return service


def _where(args: argparse.Namespace) -> Path:
    return Path(args.repo or os.getcwd())


def _here_or_all(
    args: argparse.Namespace, call: Callable[[Path | None], T]
) -> tuple[Path | None, T]:
    """`call` on `--repo` or the cwd's repository; on every registered repo (None) when the
    cwd is in no repository and `--repo` is absent. Returns what was asked and the answer."""
    from laneboard.core.service.app import NotARepository

    if args.repo:
        return Path(args.repo), call(Path(args.repo))
    here = Path.cwd()
    try:
        return here, call(here)
    except NotARepository:
        return None, call(None)


def _report(args: argparse.Namespace, done: Outcome, line: str, **extra: object) -> int:
    """The outcome of a command that changed one task: its JSON document, or one line."""
    from laneboard.core.domain.views import TaskView
    from laneboard.tui import output

    if args.json:
        output.emit_json(output.task_document(TaskView(done.task, done.repo), **extra))
    else:
        print(f"{done.task.name}: {line}")
    return 0


def _print_wait(lease: Lease) -> None:
    """The one line a command prints when it has to wait for its lane."""
    lane = "the root lane" if lease.lane is None else "its lane"
    print(f"laneboard: waiting for {lane}: {lease.wait_reason}", file=sys.stderr, flush=True)


def _print_output(chunk: bytes) -> None:
    """A setup command's output, passed through as it comes (to stderr: stdout is the result)."""
    stream = getattr(sys.stderr, "buffer", None)
    if stream is not None:
        stream.write(chunk)
    else:
        sys.stderr.write(chunk.decode(errors="replace"))
    sys.stderr.flush()


# --- commands -------------------------------------------------------------------------------


def cmd_init(args: argparse.Namespace) -> int:
    from laneboard.tui import output

    done = open_service().init(Path(args.path or args.repo or os.getcwd()))
    if args.json:
        output.emit_json(output.registration_document(done))
    else:
        print(f"{'registered' if done.registered else 'already registered'}: {done.repo.root}")
    return 0


def _command(args: argparse.Namespace) -> list[str] | None:
    import shlex

    if args.agent_command is None:
        return None
    if args.agent:
        raise UsageError("give --agent or --cmd, not both")
    try:
        words = shlex.split(args.agent_command)
    except ValueError as err:
        raise UsageError(f"--cmd: {err}") from None
    if not words:
        raise UsageError("--cmd: an empty command")
    return words


def _started_line(task: Task) -> str:
    if task.state is TaskState.QUEUED:
        return "queued: agents.max_running agents run already; it starts when one ends"
    where = f" in pane {task.tmux_pane}" if task.tmux_pane else ""
    return f"{task.state.value}{where} at {task.worktree_path} on {task.branch}"


def _parent_of(args: argparse.Namespace) -> str | None:
    """The task a new task is spawned from: `--parent`, else the task whose pane (or setup)
    this runs in (`LANEBOARD_TASK`), unless `--no-parent`."""
    if args.no_parent:
        if args.parent:
            raise UsageError("give --parent or --no-parent, not both")
        return None
    return args.parent or os.environ.get("LANEBOARD_TASK") or None


def _print_notes(done: Outcome) -> None:
    for note in done.notes:
        print(f"laneboard: {note}", file=sys.stderr)


def cmd_new(args: argparse.Namespace) -> int:
    if args.no_start and (args.agent or args.agent_command or args.prompt):
        raise UsageError("--no-start starts no agent: drop --agent, --cmd and --prompt")
    parent = _parent_of(args)
    done = open_service().new(
        _where(args),
        args.name,
        base=args.base,
        target=args.target,
        parent=parent,
        start=not args.no_start,
        agent=args.agent,
        command=_command(args),
        prompt=args.prompt,
        on_wait=_print_wait,
        on_output=_print_output,
    )
    _print_notes(done)
    line = _child_line(done.task) + _started_line(done.task)
    return _report(args, done, line, notes=list(done.notes))


def _child_line(task: Task) -> str:
    if not task.parent_id:
        return ""
    parent = open_service().task_by_id(task.parent_id)
    return f"child of {parent.name}; "


def cmd_wait(args: argparse.Namespace) -> int:
    from laneboard.tui import changes, output

    service = open_service()
    tasks = [service.resolve(_where(args), name) for name in args.names]
    if args.timeout is not None and not (0 <= args.timeout < float("inf")):
        raise UsageError("--timeout must be a finite number of seconds, 0 or more")
    try:
        with changes.Feed.for_service(service) as feed:
            service.wait(tasks, any_=args.any_, timeout=args.timeout, wake=feed.wait)
    except WaitTimeout:
        if args.json:  # the records of those that did finish are not lost with the timeout
            output.emit_json(output.completions_document(*service.finished(tasks)))
        raise
    done, pending = service.finished(tasks)
    if args.json:
        output.emit_json(output.completions_document(done, pending))
    else:
        print("\n".join(output.completion_text(c) for c in done))
        for task in pending:
            print(f"{task.name}: still {task.state.value}")
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    children: Literal["keep", "cancel"] = "keep"
    if args.children == "cancel":
        children = "cancel"
    elif args.children not in (None, "keep"):
        raise UsageError("--children is keep or cancel")
    done = open_service().cancel(_where(args), args.name, children=children, on_wait=_print_wait)
    _print_notes(done)
    kept = any(note.startswith("kept: ") for note in done.notes)
    if done.task.state is TaskState.CANCELLED and kept:
        line = "cancelled; some of what it created was kept (the reasons above)"
    elif done.task.state is TaskState.CANCELLED:
        line = "cancelled; what it created was removed"
    elif done.task.state is TaskState.RETAINED:
        line = f"retained (its agent had started); {done.task.worktree_path} and branch kept"
    else:
        line = f"{done.task.state.value}; nothing to cancel"
    return _report(args, done, line, notes=list(done.notes))


def cmd_retry(args: argparse.Namespace) -> int:
    options: dict[str, Any] = {"on_wait": _print_wait, "on_output": _print_output}
    if args.no_start:
        options["start"] = False
    done = open_service().retry(_where(args), args.name, **options)
    _print_notes(done)
    line = "retried: " + _child_line(done.task) + _started_line(done.task)
    return _report(args, done, line, notes=list(done.notes))


def cmd_mcp(args: argparse.Namespace) -> int:
    from laneboard.tui import mcp_server

    if args.config:
        print(mcp_server.config_text(args.config))
        return 0
    return mcp_server.serve(args.task or os.environ.get("LANEBOARD_TASK") or None)


def cmd_start(args: argparse.Namespace) -> int:
    done = open_service().start(
        _where(args), args.name, agent=args.agent, command=_command(args), prompt=args.prompt
    )
    return _report(args, done, _started_line(done.task))


def cmd_attach(args: argparse.Namespace) -> int:
    argv = open_service().attach(_where(args), args.name)
    if argv is None:
        return 0
    env = {key: value for key, value in os.environ.items() if key != "TMUX"}
    os.execvpe(argv[0], argv, env)


def cmd_send(args: argparse.Namespace) -> int:
    done = open_service().send(
        _where(args), args.name, args.text, when_idle=args.when_idle, timeout=args.timeout
    )
    return _report(args, done, "sent")


def cmd_shell(args: argparse.Namespace) -> int:
    pane = open_service().shell(_where(args), args.name)
    print(f"{args.name}: shell in pane {pane.pane_id}")
    return 0


def _each_or_one(
    args: argparse.Namespace,
    states: tuple[TaskState, ...],
    act: Callable[[Service], Callable[[Path | str | int, str], Outcome]],
    verb: str,
) -> int:
    """`pause`/`resume` of one named task, or with `--all` of every task in `states` (of the
    repository here, or of all when there is none); one line per task changed."""
    service = open_service()
    if args.all == bool(args.name):
        raise UsageError("name a task or give --all")
    if args.name:
        done = act(service)(_where(args), args.name)
        return _report(args, done, f"{verb}" if done.changed else f"already {verb}; nothing to do")
    _, found = _here_or_all(args, lambda at: service.each(at, states))
    failed = 0
    for repo_id, task in found:
        try:
            done = act(service)(repo_id, task.id)
            if done.changed:
                print(f"{task.name}: {verb}")
        except LaneboardError as err:
            failed += 1
            print(f"laneboard: {task.name}: {err}", file=sys.stderr)
    return 1 if failed else 0


def cmd_pause(args: argparse.Namespace) -> int:
    return _each_or_one(args, (TaskState.RUNNING,), lambda s: s.pause, "paused")


def cmd_resume(args: argparse.Namespace) -> int:
    # --all: paused tasks, and running ones whose pane is gone (a running agent is left as is)
    return _each_or_one(args, (TaskState.PAUSED, TaskState.RUNNING), lambda s: s.resume, "resumed")


def cmd_signal(args: argparse.Namespace) -> int:
    task = args.task or os.environ.get("LANEBOARD_TASK")
    if not task:
        raise UsageError("--task ID is needed outside a laneboard pane")
    if not (args.state or args.check or args.message is not None):
        raise UsageError("give --state (working, waiting, idle, done), --check or --message")
    service = open_service()
    task = service.task_by_id(task).id
    if args.check:
        name, sep, result = args.check.partition("=")
        if not sep:
            raise UsageError("--check is NAME=pass or NAME=fail")
        service.report_check(task, name, result)
    if args.message is not None:
        service.report_message(task, args.message)
    if args.state:
        service.signal(task, args.state)
    return 0


def cmd_supervise(args: argparse.Namespace) -> int:
    from laneboard.core.service.app import Cancel

    service = open_service()
    cancel = Cancel()
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(signum, lambda *_: cancel.cancel())
    interval = args.interval or 1.0

    def changed(task: Task) -> None:
        print(f"{task.name}: {task.state.value} {task.agent_state or ''}".rstrip(), flush=True)

    service.supervise(
        interval=interval, cancel=cancel, on_change=changed, rounds=1 if args.once else None
    )
    return 0


def cmd_ls(args: argparse.Namespace) -> int:
    from laneboard.core.service.app import NotRegistered
    from laneboard.tui import output

    service = open_service()
    if args.children:
        top = service.resolve(_where(args), args.children)
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
        where, views = _here_or_all(args, lambda at: service.tasks(at, include_retired=args.all))
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
    view = service.task(_where(args), args.name)
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
    task, events = service.log(_where(args), args.name)
    if args.json:
        output.emit_json(output.log_document(task, service.repo(_where(args)), events))
        return 0
    print(f"{task.name} ({task.id}): {task.state.value}")
    for event in events:
        data = json.dumps(event.data, sort_keys=True) if event.data else ""
        print(f"{output.iso(event.at)}  {event.actor.value:<6} {event.kind:<22} {data}".rstrip())
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    from laneboard.tui import output

    task, verdict = open_service().verify(_where(args), args.name, repin=args.repin)
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
    _, report = _here_or_all(args, lambda at: service.doctor(at, fix=args.fix))
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


def cmd_retain(args: argparse.Namespace) -> int:
    done = open_service().retain(_where(args), args.name)
    if not done.changed:
        return _report(args, done, "already retained; nothing to do")
    return _report(args, done, f"retained; {done.task.worktree_path} and {done.task.branch} kept")


def cmd_discard(args: argparse.Namespace) -> int:
    done = open_service().discard(_where(args), args.name, force=args.force, on_wait=_print_wait)
    saved = (
        f"; saved in {done.snapshot} (laneboard restore {done.task.name})" if done.snapshot else ""
    )
    return _report(args, done, f"discarded{saved}", snapshot=done.snapshot)


def cmd_restore(args: argparse.Namespace) -> int:
    done = open_service().restore(
        _where(args), args.name, as_name=args.as_name, on_wait=_print_wait
    )
    return _report(args, done, f"restored at {done.task.worktree_path} on {done.task.branch}")


def cmd_exec(args: argparse.Namespace) -> int:
    from laneboard.core.service.lanes import run_in_lane

    command = list(args.argv)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        raise UsageError("exec needs a command after `--`")
    if args.timeout is not None and not (0 <= args.timeout < float("inf")):
        raise UsageError("--timeout must be a finite number of seconds, 0 or more")
    return run_in_lane(
        _where(args),
        None if args.root else args.lane,
        command,
        timeout=args.timeout,
        on_wait=None if args.quiet else _print_wait,
        on_note=None if args.quiet else _print_note,
    )


def _print_note(line: str) -> None:
    print(f"laneboard: {line}", file=sys.stderr, flush=True)


def cmd_lanes(args: argparse.Namespace) -> int:
    from laneboard.tui import output

    service = open_service()
    _, report = _here_or_all(args, service.lanes)
    if args.json:
        output.emit_json(output.lanes_document(report))
    else:
        print(output.lanes_text(report))
    return 0


def cmd_shims(args: argparse.Namespace) -> int:
    from laneboard.sessions.shims import write_shims
    from laneboard.tui import output

    service = open_service()
    plan = service.shims(_where(args), args.name)
    root = Path(service.repo(_where(args)).root)
    write_shims(plan.task.id, plan.task.name, root, list(plan.commands), Path(plan.path))
    if args.json:
        output.emit_json(output.shims_document(plan))
    else:
        print(plan.path)
    return 0


def _page(text: str) -> None:
    """Print `text`, through the pager when stdout is a terminal (a large diff pages)."""
    import shlex
    import subprocess

    if not sys.stdout.isatty():
        sys.stdout.write(text if text.endswith("\n") or not text else text + "\n")
        return
    pager = shlex.split(os.environ.get("PAGER") or "less -R -F -X")
    try:
        subprocess.run(pager, input=text.encode(errors="surrogateescape"), check=False)
    except OSError:
        sys.stdout.write(text + "\n")


def cmd_review(args: argparse.Namespace) -> int:
    from laneboard.tui import output, reviews

    service = open_service()
    if args.mark:
        task, repo, seen = service.mark_reviewed(_where(args), args.name)
        if not args.json:
            print(f"{task.name}: reviewed {seen.tip}")
            if seen.uncommitted or seen.untracked:
                count = len(seen.uncommitted) + len(seen.untracked)
                print(
                    f"laneboard: warning: {count} uncommitted file(s) are not part of the "
                    "review; finalize refuses them until they are committed",
                    file=sys.stderr,
                )
    else:
        task, repo, seen = service.review(_where(args), args.name)
    wanted = (args.file,) if args.file else None
    files = [f for f in seen.committed.files if wanted is None or f.path in wanted]
    if args.file and not files:
        raise LaneboardError(f"{task.name}: {args.file} is not among the changed files")
    show = args.patch or bool(args.file)
    if args.json:
        patches: dict[str, str | None] | None = None
        if show:
            patches = {}
            for change in files:
                if reviews.patch_summary(change, seen.merge_base, seen.tip) is None:
                    paths = (change.path, *((change.old_path,) if change.old_path else ()))
                    raw = service.patch(repo.id, task.id, paths)
                    patches[change.path] = raw.decode(errors="surrogateescape")
                else:
                    patches[change.path] = None
        output.emit_json(reviews.review_document(task, repo, seen, patches))
        return 0
    if args.mark and not show:
        return 0
    parts = [] if args.file else [reviews.review_text(task, seen)]
    if show:
        shown: list[str] = []
        for change in files:
            summary = reviews.patch_summary(change, seen.merge_base, seen.tip)
            if summary is not None:
                parts.append(summary)
            else:
                shown += [change.path, *((change.old_path,) if change.old_path else ())]
        if shown:
            parts.append(
                service.patch(repo.id, task.id, tuple(shown)).decode(errors="surrogateescape")
            )
    _page("\n".join(parts))
    return 0


def cmd_conflicts(args: argparse.Namespace) -> int:
    from laneboard.tui import reviews

    service = open_service()
    _, report = _here_or_all(args, service.conflicts)
    if args.json:
        from laneboard.tui import output

        output.emit_json(reviews.conflicts_document(report))
        return 0
    targets = {
        view.task.id: view.task.target
        for repo, _ in report
        for view in service.tasks(repo.id, facts=False)
    }
    print(reviews.conflicts_text(report, targets))
    return 0


def _finalize_one(
    args: argparse.Namespace, service: Service, name: str | int, where: Path | int
) -> Outcome:
    return service.finalize(
        where,
        str(name),
        into=args.into,
        strategy=args.strategy,
        on_wait=_print_wait,
        on_output=_print_output,
    )


def _finalized_line(done: Outcome, into: str | None) -> str:
    task = done.task
    old, new = task.target_old or "", task.target_new or ""
    moved = "already in it" if old == new else f"{old[:12]} -> {new[:12]}"
    where = "worktree and branch removed" if not done.notes else "; ".join(done.notes)
    return f"finalized {task.finalized_sha} into {into or task.target} ({moved}); {where}"


def cmd_finalize(args: argparse.Namespace) -> int:
    if args.all_ready == bool(args.name):
        raise UsageError("name a task or give --all-ready")
    if args.publish and (args.into or args.strategy or args.all_ready):
        raise UsageError(
            "--publish pushes the task's branch: --into, --strategy and --all-ready are for --merge"
        )
    if args.merge and (args.remote or args.pr or args.draft):
        raise UsageError("--remote, --pr and --draft are for --publish")
    given = (("--into", args.into), ("--strategy", args.strategy), ("--remote", args.remote))
    for option, value in given:
        if value is not None and not value.strip():
            raise UsageError(f"{option} needs a value")
    service = open_service()
    where = _where(args)
    if args.publish:
        done, note, remote = service.publish(
            where, args.name, remote=args.remote, pr=args.pr, draft=args.draft
        )
        line = f"published {done.task.finalized_sha} to {remote} {done.task.branch}"
        if done.task.pr_url:
            line += f"; pull request {done.task.pr_url}"
        result = _report(args, done, line, notes=[note] if note else [])
        if note:
            print(f"laneboard: {note}", file=sys.stderr)
        return result
    if not args.all_ready:
        done = _finalize_one(args, service, args.name, where)
        return _report(args, done, _finalized_line(done, args.into), notes=list(done.notes))
    ready = service.ready(where)
    chosen = {t.id for t in ready}
    for view in service.tasks(where, facts=False):
        task = view.task
        skipped = task.reviewed_sha and task.live and task.id not in chosen
        if skipped and task.state is not TaskState.FINALIZED:
            print(f"laneboard: skipped {task.name}: its branch moved since review", file=sys.stderr)
    if not ready:
        print("no reviewed task is ready (its branch still at the reviewed SHA)")
        return 0
    for i, task in enumerate(ready):
        try:
            done = _finalize_one(args, service, task.id, where)
        except LaneboardError as err:
            print(f"laneboard: {task.name}: {err}", file=sys.stderr)
            rest = [t.name for t in ready[i + 1 :]]
            if rest:
                print(f"laneboard: not attempted: {', '.join(rest)}", file=sys.stderr)
            return 1
        print(f"{done.task.name}: {_finalized_line(done, args.into)}")
    return 0


def cmd_rebase(args: argparse.Namespace) -> int:
    done, conflicts = open_service().rebase(_where(args), args.name, on_wait=_print_wait)
    if conflicts:
        raise LaneboardError(
            f"{done.task.name}: the rebase stopped with conflicts in {', '.join(conflicts)}; "
            f"resolve them in {done.task.worktree_path} (`git rebase --continue`) or "
            "`git rebase --abort` there"
        )
    tip = done.task.branch
    return _report(args, done, f"rebased {tip} onto {done.task.target}")


HANDLERS: dict[str, Handler] = {
    "init": cmd_init,
    "new": cmd_new,
    "ls": cmd_ls,
    "show": cmd_show,
    "log": cmd_log,
    "verify": cmd_verify,
    "doctor": cmd_doctor,
    "retain": cmd_retain,
    "discard": cmd_discard,
    "restore": cmd_restore,
    "exec": cmd_exec,
    "lanes": cmd_lanes,
    "shims": cmd_shims,
    "start": cmd_start,
    "attach": cmd_attach,
    "send": cmd_send,
    "shell": cmd_shell,
    "pause": cmd_pause,
    "resume": cmd_resume,
    "signal": cmd_signal,
    "supervise": cmd_supervise,
    "review": cmd_review,
    "conflicts": cmd_conflicts,
    "finalize": cmd_finalize,
    "rebase": cmd_rebase,
    "wait": cmd_wait,
    "cancel": cmd_cancel,
    "retry": cmd_retry,
    "mcp": cmd_mcp,
}
CHANGES = frozenset(
    {
        "init",
        "new",
        "start",
        "pause",
        "resume",
        "retain",
        "discard",
        "restore",
        "doctor",
        "verify",
        "finalize",
        "rebase",
        "cancel",
        "retry",
    }
)
"""Commands during which SIGTERM and SIGHUP unwind like Ctrl-C (rollback, lease release)."""


def _board(args: argparse.Namespace) -> int:
    """`laneboard` with no arguments on a terminal: the board."""
    from laneboard.core.domain.models import Actor
    from laneboard.tui.board.app import BoardApp

    service = open_service()
    service.actor = Actor.TUI
    here = None
    with contextlib.suppress(LaneboardError):
        here = service.repo(_where(args)).root
    app = BoardApp(service, here=here)
    service.on_notice = lambda line: app.call_from_thread(app.notify, line)
    app.run()
    return 0


RAW = frozenset({"exec", "attach", "mcp", "shell"})
"""Commands whose output is not laneboard's text: a command's own, a terminal's, a protocol."""


class _Printable:
    """stdout and stderr as laneboard prints its text: a terminal control character in what an
    agent wrote (a commit subject, a message, a file name) is shown as `?`, never obeyed by the
    operator's terminal (an escape that sets its clipboard, clears its screen, retitles it).
    JSON escapes them already."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        return int(self.stream.write(text.translate(_CONTROLS)))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


_CONTROLS = {c: "?" for c in [*range(0, 9), *range(11, 32), 127, *range(128, 160)]}


@contextlib.contextmanager
def _printable() -> Any:
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Printable(sys.stdout), _Printable(sys.stderr)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


def _inside() -> str | None:
    from laneboard.core.service import inside

    return inside.channel()


def _through_channel(channel: str, args: argparse.Namespace, words: list[str]) -> int:
    """Inside a task's sandbox: `exec` and `mcp` run here (a lane command in the sandbox it is
    in, its lane held through the channel; the MCP server's tools are commands that go through
    the channel); everything else is asked of laneboard outside, which runs it scoped to the
    task's subtree or refuses it with one line."""
    from laneboard.core.service import inside

    if args.subcommand is None:
        name = os.environ.get("LANEBOARD_TASK_NAME") or os.environ.get("LANEBOARD_LANE") or "a"
        raise LaneboardError(refused(None, name) or "")
    if args.command in ("exec", "mcp"):
        return int(args.handler(args))
    return inside.run(channel, words)


def _check_caller(args: argparse.Namespace, caller_id: str) -> None:
    """A command run for a confined task through its channel (`CALLER_ENV`) does only what
    `core.domain.channel.ALLOWED` lists, on tasks within the caller's reach, in the caller's
    own repository; anything else is refused with one line, before anything changes."""
    from laneboard.core.domain.channel import ALLOWED, Reach, flag_refusal, out_of_reach

    service = open_service()
    caller = service.task_by_id(caller_id)
    command = args.command if args.subcommand is not None else None
    why = refused(command, caller.name)
    if why is not None:
        raise LaneboardError(why)
    assert command is not None
    rule = ALLOWED[command]
    for dest in rule.refused:
        if getattr(args, dest, None):
            raise LaneboardError(flag_refusal(command, dest, caller.name))
    if getattr(args, "repo", None) and service.repo(Path(args.repo)).id != caller.repo_id:
        raise LaneboardError(
            f"--repo {args.repo} is not {caller.name}'s repository: refused from its sandbox"
        )
    for dest in rule.names:
        given = getattr(args, dest, None)
        for ref in given if isinstance(given, list) else [given] if given else []:
            task = service.resolve(caller.repo_id, ref)
            inside = service.within(caller, task)
            if rule.reach is Reach.SELF:
                inside = task.id == caller.id
            elif rule.reach is Reach.BELOW:
                inside = inside and task.id != caller.id
            if not inside:
                raise LaneboardError(out_of_reach(rule.reach, caller.name, ref))
    if command == "ls" and not args.children:
        args.children = caller.id
    args.repo = getattr(args, "repo", None) or service.repo(caller.repo_id).root


def _unwind_on_hangup() -> None:
    def interrupted(signum: int, frame: object) -> None:
        raise _Interrupted(signum)

    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, interrupted)


def _exec_fast(argv: Sequence[str]) -> SimpleNamespace | None:
    """`exec`'s arguments read without building the whole parser (every shimmed `cargo` pays
    for this start), or None when they need argparse (help, a mistake: it says what is wrong)."""
    words = list(argv)
    repo = None
    if words[:1] == ["--repo"] and len(words) > 1:
        repo, words = words[1], words[2:]
    if words[:1] != ["exec"]:
        return None
    found: dict[str, Any] = {"lane": None, "root": False, "timeout": None, "quiet": False}
    rest = words[1:]
    while rest and rest[0] != "--":
        word = rest.pop(0)
        if word in ("--root", "--quiet"):
            found[word[2:]] = True
        elif word in ("--lane", "--timeout", "--repo") and rest and rest[0] != "--":
            value = rest.pop(0)
            if word == "--timeout":
                try:
                    found["timeout"] = float(value)
                except ValueError:
                    return None
            else:
                found[word[2:]] = value
        else:
            return None
    if not rest or (found["lane"] is None) == (not found["root"]):
        return None
    found.setdefault("repo", repo)
    return SimpleNamespace(argv=rest, handler=cmd_exec, command="exec", **found)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `laneboard` console script."""
    for stream in (sys.stdout, sys.stderr):
        # Paths may hold any bytes: print them as the bytes they are, never fail on them.
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="surrogateescape")
    try:
        words = sys.argv[1:] if argv is None else argv
        caller = os.environ.get(CALLER_ENV)
        # A caller of a channel never takes the lean path: its command is parsed and checked.
        fast = None if caller else _exec_fast(words)
        if fast is not None:
            return cmd_exec(fast)  # type: ignore[arg-type]
        from laneboard.tui.parser import build

        args = build(HANDLERS, words).parse_args(words)
        channel = _inside()
        if channel is not None:
            return _through_channel(channel, args, list(words))
        if caller:
            _check_caller(args, caller)
        if args.subcommand is None:
            if sys.stdin.isatty() and sys.stdout.isatty():
                return _board(args)
            build(HANDLERS).print_help()
            return 0
        if args.command in CHANGES and argv is None:  # not when called inside a test process
            _unwind_on_hangup()
        if args.command in RAW:
            return int(args.handler(args))
        with _printable():
            return int(args.handler(args))
    except LaneboardError as err:
        print(f"laneboard: {err}", file=sys.stderr)
        for detail in err.details:
            print(f"  {detail}", file=sys.stderr)
        return err.exit_code
    except BrokenPipeError:  # the reader went away (`laneboard ls | head`): not an error
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except KeyboardInterrupt:
        print(
            "laneboard: interrupted (`laneboard doctor` shows anything left half-done)",
            file=sys.stderr,
        )
        return 130
    except Exception as err:  # the last line of defence against a traceback
        if os.environ.get("LANEBOARD_DEBUG"):
            raise
        print(f"laneboard: internal error: {type(err).__name__}: {err}", file=sys.stderr)
        print("  (set LANEBOARD_DEBUG=1 to see the traceback)", file=sys.stderr)
        return 1
    finally:
        while _OPENED:
            _OPENED.pop().close()


if __name__ == "__main__":
    sys.exit(main())
