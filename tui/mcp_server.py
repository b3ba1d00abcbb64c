"""`laneboard mcp`: the delegation tools over the Model Context Protocol, on stdio.

A coordinating agent adds this server to its MCP config (docs/delegation.md) and gets six
tools: `delegate` (spawn a child task with a prompt), `wait`, `status`, `send`, `cancel` and
`review`. Each tool runs the laneboard command line with `--json` and returns its document
unchanged, so a tool's result is exactly what the CLI prints; a refused command is a tool
error carrying the CLI's one-line reasons. Started in a task's pane (`LANEBOARD_TASK`, or
`--task`), the server is scoped to that task's subtree: it spawns children of that task, and
every other tool refuses a task that is not below it. Started elsewhere it serves the
repository it is started in, unscoped.

Tools run in worker threads (`anyio.to_thread`), so a long `wait` does not hold back another
call; a child command inherits the server's environment, and inside a confined pane the
commands that create or remove worktrees run outside the sandbox (`tui.outside`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from laneboard.core.domain.errors import LaneboardError

if TYPE_CHECKING:
    from laneboard.core.domain.models import Task
    from laneboard.core.service.app import Service

WAIT_DEFAULT = 600.0
TEXT_MAX = 100_000
"""Bytes a prompt or a sent text may have: it goes on a command line (Linux takes 128 KiB an
argument)."""


def _fits(what: str, text: str) -> str:
    size = len(text.encode(errors="surrogateescape"))
    if size > TEXT_MAX:
        raise LaneboardError(
            f"the {what} is {size} bytes, more than {TEXT_MAX}: write it to a file in your "
            "worktree and point to that file"
        )
    return text


"""Seconds `wait` blocks when the caller gives no timeout (MCP clients time requests out)."""


class Scope:
    """Which tasks one server may touch: `root`'s subtree, or all (no root)."""

    def __init__(self, service: Service, root: Task | None, where: Path) -> None:
        self.service = service
        self.root = root
        self.where = where

    def task(self, ref: str, *, self_ok: bool = False) -> Task:
        """The task `ref` names, refused unless it is below the root (or the root itself,
        with `self_ok`)."""
        found = self.service.resolve(self.where, ref)
        if self.root is not None:
            inside = self.service.within(self.root, found)
            if not inside or (found.id == self.root.id and not self_ok):
                raise LaneboardError(f"{ref!r} is not a task below {self.root.name}")
        return found

    def repo_args(self, task: Task | None = None) -> list[str]:
        at = task or self.root
        if at is None:
            return ["--repo", str(self.where)]
        return ["--repo", self.service.repo(at.repo_id).root]


def cli(words: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run `laneboard WORDS` with `--json` (put before a `--` in WORDS, after which the
    caller's names and text go, so none is taken for an option), `env` added to this
    process's environment; its document, or a `LaneboardError` with what it said."""
    at = words.index("--") if "--" in words else len(words)
    done = subprocess.run(
        [sys.executable, "-m", "laneboard.tui.cli", *words[:at], "--json", *words[at:]],
        capture_output=True,
        check=False,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )
    said = done.stderr.decode(errors="replace").strip()
    if done.returncode != 0:
        lines = [line.removeprefix("laneboard: ") for line in said.splitlines() if line.strip()]
        raise LaneboardError("; ".join(lines) or f"laneboard exited with {done.returncode}")
    document: dict[str, Any] = json.loads(done.stdout.decode(errors="replace") or "{}")
    notes = [
        line.removeprefix("laneboard: ")
        for line in said.splitlines()
        if line.startswith("laneboard: ")
    ]
    if notes and "notes" not in document:
        document["notes"] = notes
    return document


def build(scope: Scope) -> Any:
    """The FastMCP server with laneboard's tools bound to `scope`."""
    import anyio
    from mcp.server.fastmcp import FastMCP

    root = scope.root
    server = FastMCP(
        "laneboard",
        log_level="WARNING",  # its stderr is the agent's MCP log: requests are not news
        instructions=(
            "Delegate pieces of work to child tasks, each in its own git worktree and branch "
            "started from your current commit; wait for their completion records; review, then "
            "let the operator (or `laneboard finalize`) integrate. A child's exit never merges."
            + (f" You are task {root.name}; you see only your own subtree." if root else "")
        ),
    )

    # An MCP client may start this server with a bare environment: what a command needs to
    # know about the task it runs for (and to run outside its sandbox) is passed explicitly.
    extra: dict[str, str] = {}
    if root is not None:
        extra["LANEBOARD_TASK"] = root.id
        extra["LANEBOARD_REPO"] = scope.service.repo(root.repo_id).root
        if root.tmux_socket:  # its children's agents run on its tmux server
            extra["LANEBOARD_OUTSIDE"] = root.tmux_socket
            extra["LANEBOARD_TMUX_SOCKET"] = root.tmux_socket

    async def off(run: Any, words: list[str]) -> Any:
        return await anyio.to_thread.run_sync(run, words, extra)

    @server.tool()
    async def delegate(
        name: str,
        prompt: str,
        agent: str | None = None,
        command: str | None = None,
        target: str | None = None,
    ) -> dict[str, Any]:
        """Spawn a child task NAME in its own worktree and branch, started at your current HEAD
        commit (uncommitted edits are not copied: commit first), with its agent given PROMPT.
        `agent` picks a profile (claude, codex, gemini, ...), `command` runs a command line
        instead; `target` is the branch it will be merged into (default: your branch).
        Returns the new task's record."""
        words = ["new", f"--prompt={_fits('prompt', prompt)}"]
        if root is not None:
            words += ["--parent", root.id]
        else:
            words += ["--no-parent"]
        if agent:
            words += [f"--agent={agent}"]
        if command:
            words += [f"--cmd={command}"]
        if target:
            words += [f"--target={target}"]
        words += [*scope.repo_args(), "--", name]  # a name is never taken for an option
        document: dict[str, Any] = await off(cli, words)
        return document

    @server.tool()
    async def wait(
        names: list[str], any: bool = False, timeout: float | None = None
    ) -> dict[str, Any]:
        """Block until the named child tasks finish (ready for review, failed or cancelled;
        with `any`, until the first does), then return their completion records: branch, base
        and head SHA, commits ahead, changed files with +/-, worktree clean or not, the checks
        they reported, their last message and screen, the conversation id. `timeout` seconds
        (default 600) gives up with an error naming those still at work."""
        if not names:
            raise LaneboardError("name at least one task to wait for")
        tasks = [scope.task(ref) for ref in names]
        seconds = WAIT_DEFAULT if timeout is None else timeout
        words = ["wait", "--timeout", str(seconds), *(["--any"] if any else [])]
        words += [*scope.repo_args(tasks[0]), "--", *(t.id for t in tasks)]
        document: dict[str, Any] = await off(cli, words)
        return document

    @server.tool()
    async def status(name: str | None = None) -> dict[str, Any]:
        """One task's record with its completion record (`name`), or, with no name, every task
        below you (state, agent, worktree, lane)."""
        if name is None:
            if root is None:
                document: dict[str, Any] = await off(cli, ["ls", *scope.repo_args()])
                return document
            document = await off(cli, ["ls", f"--children={root.id}", *scope.repo_args()])
            return document
        task = scope.task(name, self_ok=True)
        document = await off(cli, ["show", *scope.repo_args(task), "--", task.id])
        return document

    @server.tool()
    async def send(name: str, text: str, when_idle: bool = True) -> dict[str, Any]:
        """Type TEXT into a child's agent, then Enter (by default once it is idle or waiting,
        never into a busy agent)."""
        task = scope.task(name)
        words = ["send", *(["--when-idle", "--timeout", "300"] if when_idle else [])]
        words += [*scope.repo_args(task), "--", task.id, _fits("text", text)]  # may start with -
        document: dict[str, Any] = await off(cli, words)
        return document

    @server.tool()
    async def cancel(name: str, children: str = "keep") -> dict[str, Any]:
        """Cancel a child: before its agent started, stop its setup and remove exactly what it
        created (state cancelled); after, stop its agent and keep its worktree and branch
        (state retained). `children`: keep (default) or cancel its own children."""
        task = scope.task(name)
        words = ["cancel", f"--children={children}", *scope.repo_args(task), "--", task.id]
        document: dict[str, Any] = await off(cli, words)
        return document

    @server.tool()
    async def review(name: str) -> dict[str, Any]:
        """A child's review: its commits and changed files since the merge base with its
        target, what is uncommitted, and whether the reviewed SHA is pinned."""
        task = scope.task(name)
        document: dict[str, Any] = await off(cli, ["review", *scope.repo_args(task), "--", task.id])
        return document

    return server


def config_text(agent: str) -> str:
    """How to add this server to an agent, with this laneboard's own interpreter (an agent's
    pane may not have laneboard on its PATH)."""
    command, args = sys.executable, ["-m", "laneboard", "mcp"]
    home = os.environ.get("LANEBOARD_HOME")
    env = {"LANEBOARD_HOME": home} if home else {}
    entry: dict[str, Any] = {"command": command, "args": args, **({"env": env} if env else {})}
    if agent == "claude":
        added = " ".join(f"-e {k}={v}" for k, v in env.items())
        return (
            f"claude mcp add --scope user {added + ' ' if added else ''}laneboard -- "
            + " ".join([command, *args])
            + "\n\n# or, in a project's .mcp.json:\n"
            + json.dumps({"mcpServers": {"laneboard": entry}}, indent=2)
        )
    if agent == "codex":
        lines = ["[mcp_servers.laneboard]", f"command = {json.dumps(command)}"]
        lines.append(f"args = {json.dumps(args)}")
        if env:
            lines.append(f"env = {{ LANEBOARD_HOME = {json.dumps(home)} }}")
        return "# in ~/.codex/config.toml\n" + "\n".join(lines)
    if agent == "gemini":
        return "# in ~/.gemini/settings.json (or a project's .gemini/settings.json)\n" + json.dumps(
            {"mcpServers": {"laneboard": entry}}, indent=2
        )
    raise LaneboardError(f"--config: one of claude, codex, gemini, not {agent!r}")


def serve(task_id: str | None) -> int:
    """Serve on stdio until the client closes the stream. The scope is `task_id`, else the
    task whose worktree the server was started in (an agent starts it in its own), else none."""
    from laneboard.tui.cli import _service

    service = _service()
    root = service.task_by_id(task_id) if task_id else service.task_at(Path(os.getcwd()))
    where = Path(service.repo(root.repo_id).root) if root else Path(os.getcwd())
    if root is None:
        service.repo(where)  # refused (one line) outside a registered repository
    build(Scope(service, root, where)).run("stdio")
    return 0
