"""The real agent programs for tests and for capturing their screens: where
`.ci/install-agents` installed each one (its pinned version), and what each needs in a HOME to
start without network and without its first-run screens, pointed at the fake model API
(`tests/fakes/modelapi.py`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

CACHE = Path(
    os.environ.get("LANEBOARD_AGENTS_CACHE")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "laneboard-agents"
)
"""Read at import, before the tests' HOME is isolated."""
REQUIRED = bool(os.environ.get("LANEBOARD_REQUIRE_AGENTS"))
"""`.ci/run` sets it: there a missing agent fails its test. Elsewhere (a developer's machine
without npm or the network) it is skipped, its reason in pytest's summary. Read at import: the
tests' environment drops every `LANEBOARD_` variable."""
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
    if status.startswith("offline:") or not REQUIRED:
        pytest.skip(f"{agent} {version} is not installed in {CACHE} ({status})")
    pytest.fail(f"{agent} {version} is not installed in {CACHE} ({status})")


def setup(
    agent: str, home: Path, worktree: Path, url: str, *, trusted: bool = True
) -> tuple[list[str], dict[str, str]]:
    """The agent's files in the test's HOME (past onboarding, trust and login, pointed at the
    fake API), and the extra argv and environment its profile gets. Not `trusted`: the
    agent's folder-trust question is left for it to ask."""
    trust = [str(worktree)] if trusted else []
    if agent == "claude":
        (home / ".claude.json").write_text(
            json.dumps(
                {
                    "hasCompletedOnboarding": True,
                    "customApiKeyResponses": {"approved": [API_KEY[-20:]], "rejected": []},
                    "projects": {path: {"hasTrustDialogAccepted": True} for path in trust},
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
            + "".join(f'[projects."{path}"]\ntrust_level = "trusted"\n' for path in trust)
        )
        return [], {"FAKE_API_KEY": "k"}
    if agent == "gemini":
        (home / ".gemini").mkdir()
        (home / ".gemini" / "settings.json").write_text(
            json.dumps({"security": {"auth": {"selectedType": "gemini-api-key"}}})
        )
        (home / ".gemini" / "trustedFolders.json").write_text(
            json.dumps({path: "TRUST_FOLDER" for path in trust})
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
        # diff: its shell suggestions (`Run shell command? (Y)es/(N)o`) are the permission
        "--model", "openai/fake-model", "--edit-format", "diff", "--no-check-update",
        "--no-show-model-warnings",
        "--no-gitignore", "--no-show-release-notes", "--no-analytics",
    ], {
        "OPENAI_API_BASE": f"{url}/v1",
        "OPENAI_API_KEY": "k",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }  # fmt: skip
