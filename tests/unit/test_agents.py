"""What an agent is doing (`detect`, pure), how each profile is launched and resumed, and how
config changes a profile."""

from __future__ import annotations

import pytest

from laneboard.core.domain.agents import (
    BUILTIN,
    DEBOUNCE,
    STALE_WORKING,
    Observed,
    custom,
    detect,
    launch_argv,
    pane_argv,
    profiles,
    session_name,
)

CLAUDE = BUILTIN["claude"]
NOW = 1000.0
IDLE_SCREEN = "● done: fix it\n\u276f \n"
BUSY_SCREEN = "✻ Working on it… (esc to interrupt)\n"
ASKING = "Do you want to proceed?\n\u276f Yes\n  No (Esc to cancel)\n"


def seen(**given: object) -> Observed:
    base: dict[str, object] = {"alive": True, "screen": IDLE_SCREEN, "screen_changed_at": NOW - 5}
    base.update(given)
    return Observed(**base)  # type: ignore[arg-type]


def state(observed: Observed, profile=CLAUDE) -> str:  # type: ignore[no-untyped-def]
    return str(detect(profile, observed, NOW))


def test_tmux_facts_come_first() -> None:
    assert state(seen(pane_present=False, hook="UserPromptSubmit", hook_at=NOW)) == "lost"
    assert state(seen(alive=False, exit_status=2, hook="PreToolUse", hook_at=NOW)) == "exited(2)"


def test_hook_events_say_what_the_agent_does() -> None:
    assert state(seen(hook="UserPromptSubmit", hook_at=NOW - 1, screen=BUSY_SCREEN)) == "working"
    assert state(seen(hook="PermissionRequest", hook_at=NOW - 1, screen=ASKING)) == "waiting"
    assert state(seen(hook="Stop", hook_at=NOW - 1)) == "idle"
    # An answered question still on the screen above an idle prompt is not "waiting".
    assert state(seen(hook="Stop", hook_at=NOW - 1, screen=ASKING + IDLE_SCREEN)) == "idle"


def test_a_screen_that_moved_after_the_hook_is_read_instead() -> None:
    # "waiting" answered, the agent now busy, and no hook said so
    moved = seen(hook="PermissionRequest", hook_at=NOW - 3, screen=BUSY_SCREEN,
                 screen_changed_at=NOW - 0.2)  # fmt: skip
    assert state(moved) == "working"
    # an idle hook followed by a new turn that sent none
    turn = seen(hook="Stop", hook_at=NOW - 3, screen=BUSY_SCREEN, screen_changed_at=NOW - 0.1)
    assert state(turn) == "working"


def test_a_stale_working_hook_is_not_believed_forever() -> None:
    still = NOW - STALE_WORKING - 1
    stale = seen(hook="PreToolUse", hook_at=still - 1, screen=IDLE_SCREEN, screen_changed_at=still)
    assert state(stale) == "idle"
    busy = seen(hook="PreToolUse", hook_at=still - 1, screen=BUSY_SCREEN, screen_changed_at=still)
    assert state(busy) == "working"  # the screen still says busy: the hook stands


def test_without_hooks_the_screen_rules_decide_with_a_debounce() -> None:
    assert state(seen(screen=ASKING)) == "waiting"
    assert state(seen(screen=BUSY_SCREEN, screen_changed_at=NOW - 10)) == "working"
    assert state(seen(screen="compiling\n", screen_changed_at=NOW - DEBOUNCE / 2)) == "working"
    assert state(seen(screen="compiling\n", screen_changed_at=NOW - DEBOUNCE - 0.1)) == "idle"
    assert state(seen(screen="", screen_changed_at=None)) == "starting"
    # an idle prompt is idle at once; a moving screen without one is working
    assert state(seen(screen=IDLE_SCREEN, screen_changed_at=NOW)) == "idle"
    assert state(seen(screen="compiling\n", screen_changed_at=NOW)) == "working"


@pytest.mark.parametrize(
    ("name", "fresh", "resumed"),
    [
        ("claude", ["claude", "--session-id", "ID", "--", "go"], ["claude", "--resume", "ID"]),
        (
            "gemini",
            ["gemini", "--session-id", "ID", "--prompt-interactive=go"],
            ["gemini", "--resume", "ID"],
        ),
        ("codex", ["codex", "--", "go"], ["codex", "resume", "ID"]),
        ("opencode", ["opencode"], ["opencode", "-s", "ID"]),  # its prompt is typed
        (
            "aider",
            ["aider", "--no-gitignore", "--no-show-release-notes"],
            ["aider", "--no-gitignore", "--no-show-release-notes"],
        ),
    ],
)
def test_each_agent_is_pinned_and_resumed_on_its_exact_conversation(
    name: str, fresh: list[str], resumed: list[str]
) -> None:
    profile = BUILTIN[name]
    pinned = "ID" if profile.pin else None
    assert launch_argv(profile, conversation=pinned, prompt="go", resuming=False) == fresh
    assert launch_argv(profile, conversation="ID", prompt="go", resuming=True) == resumed
    # never "the latest conversation in this directory"
    assert not {"-c", "--continue", "--last"} & set(resumed)


def test_a_subcommand_resume_runs_the_profiles_own_program() -> None:
    """A real Codex at another path (`command` changed in config) resumed as plain `codex`,
    which was not on PATH: its pane died with status 127."""
    codex = profiles({"codex": {"command": ["/opt/codex/bin/codex"]}})["codex"]
    argv = launch_argv(codex, conversation="ID", prompt=None, resuming=True)
    assert argv == ["/opt/codex/bin/codex", "resume", "ID"]


def test_a_fork_resumes_the_old_conversation_into_the_new_one_and_only_where_it_can() -> None:
    argv = launch_argv(
        BUILTIN["claude"], conversation="NEW", prompt="go", resuming=True, forking="OLD"
    )
    assert argv == ["claude", "--resume", "OLD", "--fork-session", "--session-id", "NEW"]
    for name in ("codex", "gemini", "opencode", "aider", "shell"):
        with pytest.raises(ValueError, match="cannot fork"):
            launch_argv(
                BUILTIN[name], conversation="NEW", prompt=None, resuming=True, forking="OLD"
            )


def test_the_pane_runs_the_argv_exactly() -> None:
    argv = ["my agent", "--flag=$HOME", "it's; rm -rf /"]
    wrapped = pane_argv(argv)
    assert wrapped[:2] == ["sh", "-c"] and wrapped[-3:] == argv
    assert custom(["aider", "--model", "x"]).command == ("aider", "--model", "x")


def test_config_overrides_and_adds_profiles_and_names_what_is_wrong() -> None:
    found = profiles(
        {"claude": {"command": ["/opt/claude"], "busy": ["thinking"]}, "mine": {"command": ["a"]}}
    )
    assert found["claude"].command == ("/opt/claude",)
    assert found["claude"].pin == ("--session-id", "{id}")  # the rest stays built in
    assert found["mine"].command == ("a",)
    for config, message in [
        ({"claude": {"colour": "red"}}, "claude.colour: not a profile field"),
        ({"claude": {"busy": ["("]}}, "claude.busy: '(' is not a regular expression"),
        ({"claude": {"prompt": "shout"}}, "claude.prompt: expected one of"),
        ({"new": {"busy": ["x"]}}, "new.command: a new profile needs its command"),
        ({"claude": {"command": "claude"}}, "claude.command: expected a list of strings"),
        ({"aider": {"private": ["../up"]}}, "aider.private: '../up' is not a plain name"),
        ({"aider": {"private": ["a/b"]}}, "aider.private: 'a/b' is not a plain name"),
        ({"aider": {"private": [".git"]}}, "aider.private: '.git' is not a plain name"),
        ({"aider": {"private": [".."]}}, "aider.private: '..' is not a plain name"),
    ]:
        with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("'", "'")):
            profiles(config)  # type: ignore[arg-type]


def test_session_names_are_ones_tmux_keeps() -> None:
    assert session_name("my.app:v2") == "lb-my-app-v2"


def test_opencode_stream_events_become_event_file_lines() -> None:
    from laneboard.core.adapters.eventstream import line_for

    def status(kind: str) -> dict[str, object]:
        return {
            "type": "session.status",
            "properties": {"sessionID": "s1", "status": {"type": kind}},
        }

    assert line_for(status("busy")) == "working\ts1\t-\n"
    assert line_for(status("idle")) == "idle\ts1\t-\n"
    asked = {"type": "permission.asked", "properties": {"sessionID": "s1"}}
    assert line_for(asked) == "waiting\ts1\tpermission\n"
    assert line_for({"type": "message.part.updated", "properties": {}}) is None
    assert line_for({"type": "session.status", "properties": {"status": "nonsense"}}) is None
