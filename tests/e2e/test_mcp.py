"""`laneboard mcp` driven by a real MCP client session from the official SDK, over stdio, as a
coordinating agent's client drives it: list the tools, fan out three children, wait for their
records, look at one, send to one, cancel one, and be refused outside its own subtree."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import doc, git
from tests.procs import LANEBOARD, laneboard_env

pytestmark = pytest.mark.tmux


async def call(session: Any, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await session.call_tool(tool, arguments)
    text = result.content[0].text if result.content else ""
    assert not result.isError, text
    document: dict[str, Any] = json.loads(text)
    return document


async def refused(session: Any, tool: str, **arguments: Any) -> str:
    result = await session.call_tool(tool, arguments)
    assert result.isError
    return str(result.content[0].text)


async def test_a_coordinator_delegates_waits_and_reviews_over_mcp(
    repo: Path, cli, workers, server
) -> None:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    parent = doc(cli("new", "coord", "--no-start", "--json"))
    other = doc(cli("new", "other", "--no-start", "--json"))
    params = StdioServerParameters(
        command=LANEBOARD[0],
        args=[*LANEBOARD[1:], "mcp", "--task", parent["id"]],
        env=laneboard_env(),
        cwd=str(repo),
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = {tool.name for tool in (await session.list_tools()).tools}
        assert tools == {"delegate", "wait", "status", "send", "cancel", "review"}
        for n in (1, 2):
            made = await call(
                session,
                "delegate",
                name=f"c{n}",
                prompt=f"write c{n}.txt {n} ;; commit c{n} ;; check unit pass ;; exit 0",
                agent="worker",
            )
            assert made["parent_id"] == parent["id"] and made["base_sha"] == parent["base_sha"]
        slow = await call(session, "delegate", name="c3", prompt="sleep 60", agent="worker")
        assert "still at work after 0s" in await refused(session, "wait", names=["c3"], timeout=0)
        done = await call(session, "wait", names=["c1", "c2"], timeout=30)
        records = {c["name"]: c for c in done["completions"]}
        assert set(records) == {"c1", "c2"}
        for name, record in records.items():
            assert record["head_sha"] == git(repo, "rev-parse", f"lb/{name}/work")
            assert record["ahead"] == 1 and record["checks"][0]["result"] == "pass"
        listed = await call(session, "status")
        assert sorted(t["name"] for t in listed["tasks"]) == ["c1", "c2", "c3"]
        shown = await call(session, "status", name="c1")
        assert shown["completion"]["head_sha"] == records["c1"]["head_sha"]
        reviewed = await call(session, "review", name="c1")
        assert [f["path"] for f in reviewed["files"]] == ["c1.txt"]
        sent = await call(session, "send", name="c3", text="-v", when_idle=False)
        assert sent["name"] == "c3"
        cancelled = await call(session, "cancel", name="c3")
        assert cancelled["state"] == "retained" and cancelled["id"] == slow["id"]
        # Its own subtree only: not the task beside it, not itself.
        assert "is not coord or a task below it" in await refused(
            session, "status", name=other["id"]
        )
        assert "not a task below coord" in await refused(session, "cancel", name="coord")
        taken = await refused(session, "delegate", name="c1", prompt="again", agent="worker")
        assert "taken" in taken
        # What the caller types is never taken for an option, and a bad call is one line.
        assert "name" in await refused(session, "delegate", name="--help", prompt="x")
        assert "at least one" in await refused(session, "wait", names=[])
    assert doc(cli("show", "other", "--json"))["state"] == "provisioned"
    assert git(repo, "rev-parse", "lb/coord/work") == parent["base_sha"]  # nothing was merged


async def test_an_agent_in_a_confined_pane_delegates_through_its_own_mcp_server(
    repo: Path, cli, workers, server
) -> None:
    """The server is started by the agent's client in its worktree with a bare environment: it
    finds its task by its working directory and spawns the child outside the sandbox."""
    import asyncio

    steps = "mcp got.json k1 write k.txt K ; commit k ; check unit pass ; exit 0 ;; exit 0"
    made = doc(cli("new", "coord", "--agent", "worker", "--prompt", steps, "--json"))
    assert made["confined"] is True, made["confine_note"]
    got = Path(made["worktree_path"]) / "got.json"
    found = None
    for _ in range(1200):
        try:  # the agent's own file is the only sign it is done; it may be half-written
            found = json.loads(got.read_text())
            break
        except (OSError, ValueError):
            await asyncio.sleep(0.05)
    assert found is not None, "the agent never wrote its result"
    assert found["delegate"]["parent_id"] == made["id"], found
    record = found["wait"]["completions"][0]
    assert record["name"] == "k1" and record["state"] == "ready_for_review"
    assert record["pane"]["socket"] == made["pane"]["socket"]  # on its parent's tmux server
    assert record["head_sha"] == git(repo, "rev-parse", "lb/k1/work") and record["ahead"] == 1, (
        json.dumps(record)
    )
    assert record["checks"] == [{"name": "unit", "result": "pass", "at": record["checks"][0]["at"]}]
