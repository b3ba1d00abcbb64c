"""Commands that make and run tasks: init, new, wait, cancel, retry, start, attach, send, shell,
pause, resume, signal, supervise and the MCP server."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from laneboard.core.domain.errors import LaneboardError, UsageError, WaitTimeout
from laneboard.core.domain.models import Task, TaskState
from laneboard.tui.commands.common import (
    STOPPING,
    here_or_all,
    print_notes,
    print_output,
    print_wait,
    repo_arg,
    report,
    said_if_slow,
)
from laneboard.tui.root import open_service

if TYPE_CHECKING:
    import argparse

    from laneboard.core.domain.views import Outcome
    from laneboard.core.service.app import Service


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


def cmd_new(args: argparse.Namespace) -> int:
    if args.no_start and (args.agent or args.agent_command or args.prompt):
        raise UsageError("--no-start starts no agent: drop --agent, --cmd and --prompt")
    parent = _parent_of(args)
    done = open_service().new(
        repo_arg(args),
        args.name,
        base=args.base,
        target=args.target,
        parent=parent,
        start=not args.no_start,
        agent=args.agent,
        command=_command(args),
        prompt=args.prompt,
        on_wait=print_wait,
        on_output=print_output,
    )
    print_notes(done)
    line = _child_line(done.task) + _started_line(done.task)
    return report(args, done, line, notes=list(done.notes))


def _child_line(task: Task) -> str:
    if not task.parent_id:
        return ""
    parent = open_service().task_by_id(task.parent_id)
    return f"child of {parent.name}; "


def cmd_wait(args: argparse.Namespace) -> int:
    from laneboard.tui import changes, output

    service = open_service()
    tasks = [service.resolve(repo_arg(args), name) for name in args.names]
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
    done = open_service().cancel(repo_arg(args), args.name, children=children, on_wait=print_wait)
    print_notes(done)
    kept = any(note.startswith("kept: ") for note in done.notes)
    if done.task.state is TaskState.CANCELLED and kept:
        line = "cancelled; some of what it created was kept (the reasons above)"
    elif done.task.state is TaskState.CANCELLED:
        line = "cancelled; what it created was removed"
    elif done.task.state is TaskState.RETAINED:
        line = f"retained (its agent had started); {done.task.worktree_path} and branch kept"
    else:
        line = f"{done.task.state.value}; nothing to cancel"
    return report(args, done, line, notes=list(done.notes))


def cmd_retry(args: argparse.Namespace) -> int:
    options: dict[str, Any] = {"on_wait": print_wait, "on_output": print_output}
    if args.no_start:
        options["start"] = False
    done = open_service().retry(repo_arg(args), args.name, **options)
    print_notes(done)
    line = "retried: " + _child_line(done.task) + _started_line(done.task)
    return report(args, done, line, notes=list(done.notes))


def cmd_mcp(args: argparse.Namespace) -> int:
    from laneboard.tui import mcp_server

    if args.config:
        print(mcp_server.config_text(args.config))
        return 0
    return mcp_server.serve(args.task or os.environ.get("LANEBOARD_TASK") or None)


def cmd_start(args: argparse.Namespace) -> int:
    done = open_service().start(
        repo_arg(args), args.name, agent=args.agent, command=_command(args), prompt=args.prompt
    )
    return report(args, done, _started_line(done.task))


def cmd_attach(args: argparse.Namespace) -> int:
    argv = open_service().attach(repo_arg(args), args.name)
    if argv is None:
        return 0
    env = {key: value for key, value in os.environ.items() if key != "TMUX"}
    os.execvpe(argv[0], argv, env)


def cmd_send(args: argparse.Namespace) -> int:
    done = open_service().send(
        repo_arg(args), args.name, args.text, when_idle=args.when_idle, timeout=args.timeout
    )
    print_notes(done)
    return report(args, done, "sent", notes=list(done.notes))


def cmd_shell(args: argparse.Namespace) -> int:
    pane = open_service().shell(repo_arg(args), args.name)
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
        with said_if_slow(
            f"{args.name}: {STOPPING}" if verb == "paused" else f"{args.name}: starting"
        ):
            done = act(service)(repo_arg(args), args.name)
        return report(args, done, f"{verb}" if done.changed else f"already {verb}; nothing to do")
    _, found = here_or_all(args, lambda at: service.each(at, states))
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
