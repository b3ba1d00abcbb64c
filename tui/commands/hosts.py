"""Hosts: `host add/ls/check`, any command sent to a host's laneboard (`--host NAME`, or a task
named `HOST:TASK`), and the hosts' tasks in `ls` (docs/hosts.md)."""

from __future__ import annotations

import codecs
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from laneboard import __version__
from laneboard.core.domain.errors import UsageError
from laneboard.core.domain.hosts import split_task
from laneboard.tui.output import CONTROLS
from laneboard.tui.root import open_service

if TYPE_CHECKING:
    import argparse

    from laneboard.core.domain.views import TaskView
    from laneboard.core.service.app import Service

LOCAL_ONLY = frozenset({"host", "exec", "mcp", "signal", "supervise"})
"""Commands never sent to a host: `host` is about hosts; the others act on this machine's own
panes, lanes and channel (run them on the host itself)."""


def cmd_host(args: argparse.Namespace) -> int:
    from laneboard.tui import output

    if args.install and args.action != "check":
        raise UsageError("--install goes with host check")
    service = open_service()
    words = list(args.names)
    if args.action == "add":
        if len(words) != 2:
            raise UsageError("host add NAME DESTINATION [--ssh-config FILE] [--laneboard CMD]")
        host = service.add_host(
            words[0], words[1], ssh_config=args.ssh_config, laneboard=args.laneboard_command
        )
        if args.json:
            output.emit_json({"schema": output.schema("host"), **_host_json(host)})
        else:
            print(f"added host {host.name}: {host.destination}")
        return 0
    if args.action == "ls":
        if words:
            raise UsageError("host ls takes no names")
        hosts = service.hosts()
        if args.json:
            listed = [_host_json(h) for h in hosts]
            output.emit_json({"schema": output.schema("hosts"), "hosts": listed})
        elif not hosts:
            print("no hosts (laneboard host add NAME DESTINATION)")
        else:
            rows = [[h.name, h.destination, h.ssh_config or "", h.laneboard] for h in hosts]
            print(output.table(rows, ["NAME", "DESTINATION", "SSH CONFIG", "LANEBOARD"]))
        return 0
    if args.action == "check":
        if len(words) != 1:
            raise UsageError("host check NAME [--agent PROFILE] [--install]")
        found = service.check_host(words[0], args.agent)
        wanted = next((t for t in found.tools if t.name == "laneboard"), None)
        if args.install and found.reachable and wanted is not None and not wanted.ok:
            program = service.install_on_host(words[0])
            print(f"installed laneboard {__version__} on {words[0]}: {program}", file=sys.stderr)
            found = service.check_host(words[0], args.agent)
        if args.json:
            output.emit_json({"schema": output.schema("hostcheck"), **_check_json(found)})
        elif not found.reachable:
            print(f"{found.host.name}: {found.error}", file=sys.stderr)
        else:
            for tool in found.tools:
                what = tool.found or f"missing: needed for {tool.needed_for}"
                mark = "ok" if tool.ok else "--"
                note = f" ({tool.problem})" if tool.problem else ""
                print(f"{mark} {tool.name:<16}{what}{note}")
        return 0 if found.ok else 1
    raise UsageError(f"host {args.action}: the actions are add, ls and check")


def _host_json(host: Any) -> dict[str, Any]:
    return {
        "name": host.name,
        "destination": host.destination,
        "ssh_config": host.ssh_config,
        "laneboard": host.laneboard,
        "connect_timeout": host.connect_timeout,
        "timeout": host.timeout,
        "poll": host.poll,
    }


def _check_json(found: Any) -> dict[str, Any]:
    return {
        "host": found.host.name,
        "reachable": found.reachable,
        "error": found.error,
        "ok": found.ok,
        "tools": [
            {"name": t.name, "found": t.found, "needed_for": t.needed_for, "problem": t.problem}
            for t in found.tools
        ],
    }


# --- commands sent to a host ----------------------------------------------------------------


def _task_refs(args: argparse.Namespace) -> list[str]:
    refs: list[str] = []
    for dest in ("name", "names"):
        given = getattr(args, dest, None)
        refs += given if isinstance(given, list) else [given] if isinstance(given, str) else []
    return refs


def remote(args: argparse.Namespace) -> str | None:
    """The host a command is for: `--host NAME`, or the host of its tasks (`HOST:TASK`);
    None when it is for this machine. Tasks of two hosts in one command are refused."""
    if args.subcommand is None or args.command in LOCAL_ONLY:
        return None
    if getattr(args, "fetch_into", None):
        return None  # finalize of a host's task into a repository here: run here
    hosts = {split_task(ref)[0] for ref in _task_refs(args)} - {None}
    given = getattr(args, "host", None)
    if given:
        hosts.add(given)
    if len(hosts) > 1:
        raise UsageError(f"one host per command: {', '.join(sorted(str(h) for h in hosts))}")
    return hosts.pop() if hosts else None


def forward(host: str, args: argparse.Namespace, words: Sequence[str]) -> int:
    """Run the command on `host`'s laneboard: the same words, without `--host` and with each
    `HOST:TASK` named as the host knows it; `--repo` (when not given) is the repository the
    host says the task is in. Its output comes back as it comes, its exit code is this one's."""
    service = open_service()
    refs = {ref: split_task(ref)[1] for ref in _task_refs(args) if split_task(ref)[0] == host}
    sent: list[str] = []
    skip = False
    for word in words:
        if skip:
            skip = False
        elif word == "--host":
            skip = True
        elif word.startswith("--host="):
            pass
        elif word in refs:
            sent.append(refs.pop(word))
        else:
            sent.append(word)
    if args.command == "ls" and "--local" not in sent:
        sent.append("--local")  # the host's own tasks: never its hosts' (no loops)
    if not getattr(args, "repo", None) and _task_refs(args):
        root = service.remote_repo(host, split_task(_task_refs(args)[0])[1])
        if root is not None:
            sent = ["--repo", root, *sent]
    raw = args.command in ("attach", "shell")
    tty = raw and sys.stdin.isatty() and sys.stdout.isatty()
    out, err = _writer(sys.stdout, printable=not raw), _writer(sys.stderr, printable=not raw)
    return service.on_host(host, sent, tty=tty, out=out, err=err)


def _writer(stream: Any, *, printable: bool) -> Callable[[bytes], None]:
    """What passes a host's output on to `stream` as it comes. With `printable`, its terminal
    control characters are shown as `?` (`tui.output.CONTROLS`), as laneboard prints its own
    text: a host's laneboard does that there, but what comes over the connection is the
    host's to choose. UTF-8 split between two chunks is decoded whole, so a C1 control cannot
    slip through in two halves; bytes that are not UTF-8 pass unchanged."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="surrogateescape")

    def write(chunk: bytes) -> None:
        if printable:
            text = decoder.decode(chunk).translate(CONTROLS)
            chunk = text.encode("utf-8", errors="surrogateescape")
        buffer = getattr(stream, "buffer", None)
        if buffer is not None:
            buffer.write(chunk)
        else:  # a test's StringIO
            stream.write(chunk.decode(errors="surrogateescape"))
        stream.flush()

    return write


# --- the hosts' tasks in `ls` ----------------------------------------------------------------


def list_with_hosts(
    args: argparse.Namespace,
    service: Service,
    views: list[TaskView],
    print_local: Callable[[list[TaskView]], None],
) -> int:
    """`ls` of every repository: this machine's tasks, then each host's (asked of all hosts at
    once; a host that does not answer shows its tasks as last seen, `unreachable`)."""
    from laneboard.tui import output, remote

    answers = service.host_tasks(include_retired=args.all)
    if args.json:
        document = output.tasks_document(views)
        document["tasks"] = [{**t, "host": None} for t in document["tasks"]]
        for answer in answers:
            document["tasks"] += [remote.task_json(t, answer) for t in answer.tasks]
        document["hosts"] = [remote.host_json(a) for a in answers]
        output.emit_json(document)
        return 0
    if views:
        print_local(views)
    elif not any(a.tasks for a in answers):
        print("no tasks")
    rows = remote.rows(answers)
    if rows:
        if views:
            print()
        print(output.table(rows, remote.HEADERS))
    for answer in answers:
        if not answer.reachable:
            seen = (
                f"; tasks as last seen {output.age(answer.seen_at)} ago" if answer.seen_at else ""
            )
            print(f"laneboard: {answer.error}{seen}", file=sys.stderr)
    return 0
