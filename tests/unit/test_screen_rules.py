"""The built-in profiles' screen rules over screens captured from the real agents.

`tests/screens/<agent>-<version>/<state>--<what>.txt` is one screen (`capture-pane -p -J`) of
that agent at that version, taken while a test drove it against the fake model API
(`tests/capture_screens.py` takes them again for a newer version). The file name says what
laneboard must read from it with no hook event: `idle`, `working` or `waiting`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from laneboard.core.domain.agents import (
    BUILTIN,
    DEBOUNCE,
    Observed,
    detect,
    read_screen,
    ready_for_prompt,
)

SCREENS = Path(__file__).resolve().parent.parent / "screens"
NOW = 1000.0
CAPTURED = sorted(SCREENS.glob("*/*.txt"))


def _case(path: Path) -> tuple[str, str, str]:
    agent = path.parent.name.rsplit("-", 1)[0]
    expected = path.stem.split("--", 1)[0]
    return agent, expected, path.read_text()


def test_every_agent_has_captured_screens_of_each_state() -> None:
    seen = {(_case(path)[0], _case(path)[1]) for path in CAPTURED}
    for agent in ("claude", "codex", "gemini", "opencode", "aider"):
        for state in ("idle", "waiting"):
            assert (agent, state) in seen, f"no {state} screen of {agent}"


@pytest.mark.parametrize("path", CAPTURED, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_a_captured_screen_reads_as_what_the_agent_was_doing(path: Path) -> None:
    agent, expected, screen = _case(path)
    profile = BUILTIN[agent]
    still = Observed(alive=True, screen=screen, screen_changed_at=NOW - DEBOUNCE - 1)
    assert str(detect(profile, still, NOW)) == expected
    if expected != "idle" or profile.idle:
        # Redrawn a moment ago (an attach, a resize): the same reading, when the screen
        # itself says it; only an agent with no idle line of its own waits for a still screen.
        redrawn = Observed(alive=True, screen=screen, screen_changed_at=NOW - 0.1)
        assert str(detect(profile, redrawn, NOW)) == expected


@pytest.mark.parametrize("path", CAPTURED, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_a_redraw_after_a_hook_is_no_evidence_against_it(path: Path) -> None:
    """Issue 20: after an attach (the resize redraws the whole screen) a hook's idle or
    waiting stood only until the screen moved, and then the screen rules read it again."""
    agent, expected, screen = _case(path)
    profile = BUILTIN[agent]
    hook = {"idle": "Stop", "waiting": "PermissionRequest"}.get(expected)
    if hook is None:
        return
    redrawn = Observed(
        alive=True, screen=screen, hook=hook, hook_at=NOW - 10, screen_changed_at=NOW - 0.1
    )
    assert str(detect(profile, redrawn, NOW)) == expected


@pytest.mark.parametrize("path", CAPTURED, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_a_typed_prompt_waits_for_an_idle_screen(path: Path) -> None:
    """A first prompt typed into aider's start-up question answered it (issue 21, item 5)."""
    agent, expected, screen = _case(path)
    assert ready_for_prompt(BUILTIN[agent], screen) == (expected == "idle")


PROCEED = "Do you want to proceed?\n\u276f 1. Yes\n  2. No\nEsc to cancel\n"
CLAUDE_BOX = "─" * 40 + "\n\u276f \n" + "─" * 40 + "\n  ? for shortcuts\n"


@pytest.mark.parametrize(
    ("agent", "screen", "hook", "moved", "expected"),
    [
        # issue 20: an answered question 4-6 lines above the idle prompt, after a redraw
        ("claude", PROCEED + "● Done\n✻ Cooked for 1s\n" + CLAUDE_BOX, None, True, "idle"),
        ("claude", PROCEED + "● Done\n✻ Cooked for 1s\n" + CLAUDE_BOX, "Stop", True, "idle"),
        ("claude", PROCEED + "● Done\n" + CLAUDE_BOX, "PermissionRequest", True, "idle"),
        # the same question still open (no prompt under it) is waiting, hook or not
        ("claude", "● Bash(touch x)\n" + PROCEED, None, True, "waiting"),
        ("claude", "● Bash(touch x)\n" + PROCEED, "PermissionRequest", True, "waiting"),
        ("claude", "● Bash(touch x)\n" + PROCEED, "Stop", True, "waiting"),
        # aider: answered (Y)es/(N)o lines above its idle prompt (issue 21, item 5)
        ("aider", "Add .aider* to .gitignore? (Y)es/(N)o [Yes]: y\nAider v0.86.2\n> \n",
         None, True, "idle"),
        ("aider", "Aider v0.86.2\nRun shell command? (Y)es/(N)o [Yes]:\n", None, False,
         "waiting"),
        # aider's hook says idle as its reply ends; its question follows within a second
        ("aider", "Aider v0.86.2\ndiff> lb-ask\ntouch x\nRun shell command? (Y)es/(N)o [Yes]:\n",
         "Stop", False, "waiting"),
        ("aider", "Aider v0.86.2\ndiff> \n", None, True, "idle"),  # its mode before `>`
        # Claude's idle footer is no spinner (issue 21, item 7)
        ("claude", CLAUDE_BOX.replace("shortcuts", "shortcuts · Auto-updating…"), None, True,
         "idle"),
        ("claude", "✶ Waddling…\n" + CLAUDE_BOX, None, False, "working"),
    ],
)  # fmt: skip
def test_agent_state_is_believed_only_with_evidence(
    agent: str, screen: str, hook: str | None, moved: bool, expected: str
) -> None:
    changed = NOW - 0.1 if moved else NOW - DEBOUNCE - 1
    seen = Observed(
        alive=True, screen=screen, hook=hook, hook_at=NOW - 5 if hook else None,
        screen_changed_at=changed,
    )  # fmt: skip
    state = detect(BUILTIN[agent], seen, NOW)
    assert str(state) == expected
    assert state.source == ("hook" if hook and expected == {"Stop": "idle"}.get(hook) else
                            state.source)  # fmt: skip


def test_only_the_live_region_can_hold_an_open_question() -> None:
    answered = read_screen(BUILTIN["claude"], PROCEED + "● Done\n" + CLAUDE_BOX)
    assert not answered.waiting and answered.prompt
    assert read_screen(BUILTIN["claude"], PROCEED).waiting
