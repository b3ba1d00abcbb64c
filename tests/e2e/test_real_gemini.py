"""The real gemini program in a laneboard task, from its first prompt to a permission question to
idle (`tests/e2e/realagent_flow.py` says what is checked and how the program is run)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.realagent_flow import api, exercise
from tests.fakes.modelapi import ModelAPI

__all__ = ["api"]  # the fixture, found by pytest here


@pytest.mark.tmux
def test_real_gemini_runs_in_a_task_from_prompt_to_permission_to_idle(
    repo: Path, cli, server, api: ModelAPI, isolated_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    exercise("gemini", repo, cli, server, api, isolated_env, monkeypatch)
