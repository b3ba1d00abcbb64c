"""The five built-in profiles with the REAL agent programs, against a fake model API.

Each agent is the program from its registry at the version `.ci/install-agents` pins, installed
in `$LANEBOARD_AGENTS_CACHE` (outside the checkout), run by laneboard in a task (real git, real
tmux, bwrap when the machine has it) with the built-in profile and only `command` and `env`
changed: the cached program, pointed at `tests/fakes/modelapi.py` on loopback, past its
first-run screens by files in the test's HOME. One test per agent, each a few seconds: the
first prompt is delivered once, a tool call that needs permission reads `waiting`, the
answered turn reads `idle`, and nothing of the agent lands in the worktree.

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

CACHE = Path(
    os.environ.get("LANEBOARD_AGENTS_CACHE")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "laneboard-agents"
)
"""Read at import, before the tests' HOME is isolated."""
VERSIONS = {
    "claude": "2.1.197",
    "codex": "0.171.0",
    "gemini": "0.61.0",
    "opencode": "1.18.33",
    "aider": "0.86.2",
}
"""The versions `.ci/install-agents` installs; the screens in tests/screens are theirs."""
API_KEY = "sk-ant-fake-key-000000000000"


def program(agent: str) -> Path:
    """The installed program, or the test fails (or skips, offline) saying why not."""
    version = VERSIONS[agent]
    if agent == "aider":
        found = CACHE / f"aider-{version}" / "bin" / "aider"
    else:
        found = CACHE / "npm" / f"{agent}-{version}" / "node_modules" / ".bin" / agent
    if found.exists():
        return found
    try:
        status = (CACHE / "status" / agent).read_text().strip()
    except OSError:
        status = "never installed: run .ci/install-agents"
    if status.startswith("offline:"):
        pytest.skip(f"{agent} {version} is not installed ({status})")
    pytest.fail(f"{agent} {version} is not installed in {CACHE} ({status})")


@pytest.fixture
def api() -> Iterator[ModelAPI]:
    served = ModelAPI().start()
    yield served
    served.stop()


def _setup(agent: str, home: Path, worktree: Path, url: str) -> tuple[list[str], dict[str, str]]:
    """The agent's files in the test's HOME (past onboarding, trust and login, pointed at the
    fake API), and the extra argv and environment its profile gets."""
    if agent == "claude":
        (home / ".claude.json").write_text(
            json.dumps(
                {
                    "hasCompletedOnboarding": True,
                    "customApiKeyResponses": {"approved": [API_KEY[-20:]], "rejected": []},
                    "projects": {str(worktree): {"hasTrustDialogAccepted": True}},
                }
            )
        )
        return [], {
            "ANTHROPIC_BASE_URL": url,
            "ANTHROPIC_API_KEY": API_KEY,
            "DISABLE_AUTOUPDATER": "1",
        }
    if agent == "codex":
        (home / ".codex").mkdir()
        (home / ".codex" / "config.toml").write_text(
            'model = "fake-model"\nmodel_provider = "fake"\napproval_policy = "on-request"\n'
            'sandbox_mode = "read-only"\n'
            f'[model_providers.fake]\nname = "fake"\nbase_url = "{url}/v1"\n'
            'wire_api = "responses"\nenv_key = "FAKE_API_KEY"\n'
            f'[projects."{worktree}"]\ntrust_level = "trusted"\n'
        )
        return [], {"FAKE_API_KEY": "k"}
    if agent == "gemini":
        (home / ".gemini").mkdir()
        (home / ".gemini" / "settings.json").write_text(
            json.dumps({"security": {"auth": {"selectedType": "gemini-api-key"}}})
        )
        (home / ".gemini" / "trustedFolders.json").write_text(
            json.dumps({str(worktree): "TRUST_FOLDER"})
        )
        return [], {"GEMINI_API_KEY": "k", "GOOGLE_GEMINI_BASE_URL": url}
    if agent == "opencode":
        config = home / ".config" / "opencode"
        config.mkdir(parents=True)
        provider = {
            "npm": "@ai-sdk/openai-compatible",
            "name": "Fake",
            "options": {"baseURL": f"{url}/v1", "apiKey": "k"},
            "models": {"fake-model": {"name": "Fake"}},
        }
        (config / "opencode.json").write_text(
            json.dumps(
                {
                    "provider": {"fake": provider},
                    "model": "fake/fake-model",
                    "small_model": "fake/fake-model",
                    "permission": {"bash": "ask"},
                    "autoupdate": False,
                    "share": "disabled",
                }
            )
        )
        return [], {"OPENCODE_DISABLE_MODELS_FETCH": "1"}
    assert agent == "aider"
    return [
        "--model", "openai/fake-model", "--no-check-update", "--no-show-model-warnings",
        "--no-gitignore", "--no-show-release-notes",
    ], {
        "OPENAI_API_BASE": f"{url}/v1",
        "OPENAI_API_KEY": "k",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }  # fmt: skip


def _until(check: Callable[[], bool], what: str, within: float = 40.0) -> None:
    end = time.monotonic() + within
    while time.monotonic() < end:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"not {what} within {within}s")


OPEN = {
    "opencode": "its first prompt is not typed within 40 s of `new` (its first start takes ~15 s "
    "in a fresh HOME; not yet found why the controller does not type it later)",
    "aider": "its first prompt is not typed within 40 s, and under bwrap it cannot write its "
    "history in laneboard's state dir (read-only inside the sandbox, rightly)",
}
"""What does not work yet with these real agents (issue 21): shown in the summary, not run."""


@pytest.mark.tmux
@pytest.mark.parametrize(
    "agent",
    [
        pytest.param(name, marks=pytest.mark.xfail(run=False, reason=f"{name}: {OPEN[name]}"))
        if name in OPEN
        else name
        for name in VERSIONS
    ],
)
def test_a_real_agent_runs_in_a_task_from_prompt_to_permission_to_idle(
    agent: str, repo: Path, cli, server, api: ModelAPI, isolated_env: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    found = program(agent)
    monkeypatch.setenv("LANEBOARD_TMUX_SOCKET", server.socket_name)
    worktree = repo / ".worktrees" / "t"
    extra, env = _setup(agent, isolated_env, worktree, api.url)
    home = Path(os.environ["LANEBOARD_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(
        f"[agents.profiles.{agent}]\ncommand = {json.dumps([str(found), *extra])}\n"
        f"env = {{ {', '.join(f'{k} = {json.dumps(v)}' for k, v in env.items())} }}\n"
    )

    def state() -> str:
        cli("supervise", "--once")  # the controller: types a prompt its starter gave up on
        return str(doc(cli("show", "t", "--json"))["agent"]["state"])

    def screen() -> str:
        return "\n".join(server.cmd("capture-pane", "-p", "-J", "-t", "t").stdout)

    began = time.monotonic()
    assert cli("new", "t", "--agent", agent, "--prompt", "hello there").code == 0
    try:
        _until(lambda: any(p.endswith("hello there") for p in api.prompts()), "prompted")
        _until(lambda: state() == "idle", f"idle after the first turn ({state()})")
        # the first prompt went in once, as a prompt (not into a start-up question)
        main = [p for p in api.prompts(main=True) if p.strip().endswith("hello there")]
        assert len(set(main)) == 1, main
        prompted = time.monotonic() - began

        assert cli("send", "t", f"{ASK} make a file").code == 0
        _until(lambda: state() == "waiting", f"waiting on its permission ({state()})")
        server.cmd("send-keys", "-t", "t", "Enter" if agent != "aider" else "y")
        if agent == "aider":
            server.cmd("send-keys", "-t", "t", "Enter")
        _until(lambda: state() == "idle", f"idle after the answered turn ({state()})")
    except AssertionError as err:
        raise AssertionError(f"{err}\n--- {agent}'s screen ---\n{screen()}") from None
    print(f"{agent} {VERSIONS[agent]}: first prompt answered after {prompted:.1f}s")
    # nothing of the agent lands in the worktree (its history, its settings)
    untracked = git(worktree, "status", "--porcelain", "--ignored")
    assert set(untracked.split()) <= {"??", "asked.txt", ".aider.tags.cache.v4/"}, untracked
