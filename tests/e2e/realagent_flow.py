"""The five built-in profiles with the REAL agent programs, against a fake model API.

Each agent is the program from its registry at the version `.ci/install-agents` pins, installed
in `$LANEBOARD_AGENTS_CACHE` (outside the checkout), run by laneboard in a task (real git, real
tmux, bwrap when the machine has it) with the built-in profile and only `command` and `env`
changed: the cached program, pointed at `tests/fakes/modelapi.py` on loopback, past its
first-run screens by files in the test's HOME. One test module per agent
(`test_real_<agent>.py`), each a few seconds to a minute: the first prompt is delivered once, a
tool call that needs permission reads `waiting`, the answered turn reads `idle`, and nothing of
the agent lands in the worktree.

An agent that is not installed fails its test, naming why; one whose install failed only for
lack of network (`offline:` in its status) is skipped with that reason, visible in the summary.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import doc, git
from tests.fakes.modelapi import ASK, ModelAPI
from tests.realagents import VERSIONS, program, setup


@pytest.fixture
def api() -> Iterator[ModelAPI]:
    served = ModelAPI().start()
    yield served
    served.stop()


def _until(check: Callable[[], bool], what: str, within: float = 40.0) -> None:
    end = time.monotonic() + within
    while time.monotonic() < end:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"not {what} within {within}s")


def exercise(
    agent: str, repo: Path, cli, server, api: ModelAPI, isolated_env: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """The whole flow with `agent` (each agent's test module calls it: one module per agent,
    so that xdist, which deals whole modules to its workers, runs the agents side by side)."""
    found = program(agent)
    monkeypatch.setenv("LANEBOARD_TMUX_SOCKET", server.socket_name)
    worktree = repo / ".worktrees" / "t"
    extra, env = setup(agent, isolated_env, worktree, api.url)
    home = Path(os.environ["LANEBOARD_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(
        f"[agents.profiles.{agent}]\ncommand = {json.dumps([str(found), *extra])}\n"
        f"env = {{ {', '.join(f'{k} = {json.dumps(v)}' for k, v in env.items())} }}\n"
    )

    def state() -> str:
        # the controller, one round (it types a prompt its starter gave up on)
        cli("supervise", "--once", "--interval", "0.01")
        agent_now = doc(cli("show", "t", "--json"))["agent"]
        return str(agent_now["state"]) if agent_now else "none"

    def screen() -> str:
        return "\n".join(server.cmd("capture-pane", "-p", "-J", "-t", "t").stdout)

    began = time.monotonic()
    assert cli("new", "t", "--agent", agent, "--prompt", "hello there").code == 0
    try:
        _until(lambda: state() and any("hello there" in p for p in api.prompts()), "prompted")
        _until(lambda: state() == "idle", f"idle after the first turn ({state()})")
        # the first prompt went in once, as a prompt (not into a start-up question)
        # (aider offers no tools: all its requests are its turns)
        main = [p for p in api.prompts(main=agent != "aider") if "hello there" in p]
        assert len(set(main)) == 1, main
        prompted = time.monotonic() - began

        assert cli("send", "t", f"{ASK} make a file").code == 0
        _until(lambda: state() == "waiting", f"waiting on its permission ({state()})")
        server.cmd("send-keys", "-t", "t", "Enter" if agent != "aider" else "y")
        if agent == "aider":
            server.cmd("send-keys", "-t", "t", "Enter")
        _until(lambda: state() == "idle", f"idle after the answered turn ({state()})")
        turns = time.monotonic() - began
        # nothing of the agent lands in the worktree (its history, its settings)
        untracked = git(worktree, "status", "--porcelain", "--ignored")
        assert set(untracked.split()) <= {"??", "asked.txt"}, untracked

        # pause and resume: the same conversation goes on, and the first send after the
        # resume is taken (an agent that still loads then may drop the Enter: `send` sees no
        # sign of it taking the text and presses Enter again). Not for aider (no ids: it
        # starts anew).
        if agent == "aider":
            return
        assert cli("pause", "t").code == 0
        assert cli("resume", "t").code == 0
        _until(lambda: state() == "idle", f"idle after resume ({state()})")
        assert cli("send", "t", "and again").code == 0
        _until(lambda: any("and again" in p for p in api.prompts()), "the turn after resume")
        after = [b for _, b in list(api.requests) if "and again" in json.dumps(b)]
        assert "hello there" in json.dumps(after[-1]), "resumed another conversation"
        _until(lambda: state() == "idle", f"idle after the resumed turn ({state()})")
    except AssertionError as err:  # the failure says what the agent showed and what was recorded
        journal = [
            (e["kind"], e.get("data")) for e in doc(cli("log", "t", "--json"))["events"][-8:]
        ]
        raise AssertionError(
            f"{err}\n--- {agent}'s screen ---\n{screen()}\n--- its journal ---\n{journal}"
            f"\n--- show ---\n{doc(cli('show', 't', '--json'))}"
        ) from None
    print(
        f"{agent} {VERSIONS[agent]}: first turn {prompted:.1f}s, permission turn done "
        f"{turns:.1f}s, after pause and resume {time.monotonic() - began:.1f}s"
    )
