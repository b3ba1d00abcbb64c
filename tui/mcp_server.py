"""`laneboard mcp`: the delegation tools over the Model Context Protocol, on stdio.

A coordinating agent adds this server to its MCP config (docs/delegation.md) and gets six
tools: `delegate` (spawn a child task with a prompt), `wait`, `status`, `send`, `cancel` and
`review`. Each tool runs the laneboard command line with `--json` and returns its document
unchanged, so a tool's result is exactly what the CLI prints; a refused command is a tool
error carrying the CLI's one-line reasons.

Scope is the command line's, in one place (`tui.cli` checks a caller): inside a task's sandbox
every command goes through the task's channel, whose server runs it scoped to that task's
subtree; started elsewhere for a task (`LANEBOARD_TASK`, `--task`, or the worktree it starts
in), the server scopes its commands the same way (`LANEBOARD_CALLER`); started elsewhere for no
task, it serves the repository it is started in, unscoped.

Tools run in worker threads (`anyio.to_thread`), so a long `wait` does not hold back another
call.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from laneboard.core.domain.channel import CALLER_ENV
from laneboard.core.domain.errors import LaneboardError
from laneboard.core.domain.values import value

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


@value
class Scope:
    """Whom one server's commands are for: a task (`root`, with its name), or none."""

    root: str | None
    name: str | None
    repo: str | None
    """`--repo` for its commands (None inside a sandbox: the channel knows)."""
    env: dict[str, str]
    """Added to each command's environment."""

    def repo_args(self) -> list[str]:
        return ["--repo", self.repo] if self.repo else []


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

    server = FastMCP(
        "laneboard",
        log_level="WARNING",  # its stderr is the agent's MCP log: requests are not news
        instructions=(
            "Delegate pieces of work to child tasks, each in its own git worktree and branch "
            "started from your current commit; wait for their completion records; review, then "
            "let the operator (or `laneboard finalize`) integrate. A child's exit never merges."
            + (f" You are task {scope.name}; you see only your own subtree." if scope.root else "")
        ),
    )

    async def off(words: list[str]) -> dict[str, Any]:
        found: dict[str, Any] = await anyio.to_thread.run_sync(cli, words, scope.env)
        return found

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
        words += ["--parent", scope.root] if scope.root else ["--no-parent"]
        if agent:
            words += [f"--agent={agent}"]
        if command:
            words += [f"--cmd={command}"]
        if target:
            words += [f"--target={target}"]
        return await off([*words, *scope.repo_args(), "--", name])  # a name is never an option

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
        seconds = WAIT_DEFAULT if timeout is None else timeout
        words = ["wait", "--timeout", str(seconds), *(["--any"] if any else [])]
        return await off([*words, *scope.repo_args(), "--", *names])

    @server.tool()
    async def status(name: str | None = None) -> dict[str, Any]:
        """One task's record with its completion record (`name`), or, with no name, every task
        below you (state, agent, worktree, lane)."""
        if name is None:
            below = [f"--children={scope.root}"] if scope.root else []
            return await off(["ls", *below, *scope.repo_args()])
        return await off(["show", *scope.repo_args(), "--", name])

    @server.tool()
    async def send(name: str, text: str, when_idle: bool = True) -> dict[str, Any]:
        """Type TEXT into a child's agent, then Enter (by default once it is idle or waiting,
        never into a busy agent)."""
        words = ["send", *(["--when-idle", "--timeout", "300"] if when_idle else [])]
        return await off([*words, *scope.repo_args(), "--", name, _fits("text", text)])

    @server.tool()
    async def cancel(name: str, children: str = "keep") -> dict[str, Any]:
        """Cancel a child: before its agent started, stop its setup and remove exactly what it
        created (state cancelled); after, stop its agent and keep its worktree and branch
        (state retained). `children`: keep (default) or cancel its own children."""
        return await off(["cancel", f"--children={children}", *scope.repo_args(), "--", name])

    @server.tool()
    async def review(name: str) -> dict[str, Any]:
        """A child's review: its commits and changed files since the merge base with its
        target, what is uncommitted, and whether the reviewed SHA is pinned."""
        return await off(["review", *scope.repo_args(), "--", name])

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
    """Serve on stdio until the client closes the stream. Inside a task's sandbox the scope is
    that task (its channel says which); elsewhere it is `task_id`, else the task whose worktree
    the server was started in (an agent starts it in its own), else none."""
    from laneboard.core.service import inside

    channel = inside.channel()
    if channel is not None:
        me = inside.whoami(channel)
        scope = Scope(str(me["task"]), str(me["name"]), None, {})
    else:
        from laneboard.tui.root import open_service

        found = open_service()
        root = found.task_by_id(task_id) if task_id else found.task_at(Path(os.getcwd()))
        where = Path(found.repo(root.repo_id).root) if root else Path(os.getcwd())
        if root is None:
            found.repo(where)  # refused (one line) outside a registered repository
        extra = {CALLER_ENV: root.id, "LANEBOARD_TASK": root.id} if root else {}
        if root is not None and root.tmux_socket:  # its children's agents run on its server
            extra["LANEBOARD_TMUX_SOCKET"] = root.tmux_socket
        scope = Scope(root.id if root else None, root.name if root else None, str(where), extra)
    build(scope).run("stdio")
    return 0
