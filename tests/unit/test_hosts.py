"""The pure parts of hosts (`core.domain.hosts`): names, `HOST:TASK`, the ssh command lines,
a remote refusal's line and `host check`'s probe output."""

from __future__ import annotations

import shlex

import pytest

from laneboard.core.domain.errors import LaneboardError
from laneboard.core.domain.hosts import (
    Host,
    RemoteTask,
    StreamBroken,
    apply_stream,
    check_host_name,
    fetch_source,
    master_argv,
    parse_check,
    refusal,
    remote_argv,
    restarted_since,
    split_task,
    stream_document,
)

HOST = Host("build", "me@build.example", "/cfg/ssh_config", "~/bin/laneboard", 7, 30)


def test_a_task_named_with_its_host_splits_one_way_only() -> None:
    assert split_task("build:fix-login") == ("build", "fix-login")
    assert split_task("fix-login") == (None, "fix-login")
    assert split_task("Build:x") == (None, "Build:x")  # not a host name: left to the task lookup
    assert split_task("build:") == (None, "build:")


@pytest.mark.parametrize("name", ["local", "Build", "-x", "a b", "", "x" * 64])
def test_host_names_are_refused_when_they_would_read_two_ways(name: str) -> None:
    with pytest.raises(LaneboardError):
        check_host_name(name)


def test_every_ssh_line_reads_the_hosts_config_file_and_never_asks() -> None:
    for argv in (
        master_argv(HOST, "/s/build-1", 600),
        remote_argv(HOST, "/s/build-1", ["ls", "--json"], tty=False),
    ):
        assert argv[:3] == ["ssh", "-F", "/cfg/ssh_config"]
        assert "BatchMode=yes" in argv and "ConnectTimeout=7" in argv
        assert "ControlPath=/s/build-1" in argv
        assert argv.index("me@build.example") > argv.index("BatchMode=yes")
    master = master_argv(HOST, "/s/build-1", 600)
    assert {"ControlMaster=yes", "ControlPersist=600", "-f", "-N"} <= set(master)
    command = remote_argv(HOST, "/s/build-1", ["send", "t", "it's; rm -rf ~"], tty=False)
    assert "ControlMaster=no" in command and "-T" in command
    assert command[-2:] == ["--", "~/bin/laneboard send t 'it'\"'\"'s; rm -rf ~'"]
    assert shlex.split(command[-1])[1:] == ["send", "t", "it's; rm -rf ~"]
    assert "-t" in remote_argv(HOST, "/s/build-1", ["attach", "t"], tty=True)


def test_without_a_config_file_ssh_reads_the_users_own() -> None:
    argv = remote_argv(Host("b", "b"), "/s/b", ["ls"], tty=False)
    assert "-F" not in argv


def test_a_remote_refusal_is_its_first_line_and_the_details() -> None:
    said = "laneboard: discard refused: 1 blocker\n  untracked file: notes.md\n"
    assert refusal(said) == ("discard refused: 1 blocker", ["untracked file: notes.md"])
    assert refusal("")[0] == "the host's laneboard failed and said nothing"


def test_an_unreachable_task_keeps_its_last_state_beside_it() -> None:
    task = RemoteTask("build", {"name": "t", "state": "running"}, reachable=False)
    assert (task.state, task.last_state, task.qualified) == ("unreachable", "running", "build:t")


def test_host_check_reads_each_tool_and_flags_an_old_git() -> None:
    output = "laneboard\tlaneboard 0.2.0\ngit\t/usr/bin/git (git version 2.30.2)\nbwrap\t\n"
    tools = parse_check(output, [("laneboard", "a"), ("git", "b"), ("tmux", "c"), ("bwrap", "d")])
    assert [(t.name, t.ok) for t in tools] == [
        ("laneboard", True),
        ("git", False),
        ("tmux", False),
        ("bwrap", False),
    ]
    assert tools[1].problem == "git 2.30 is older than 2.38 (merge-tree --write-tree)"
    assert tools[2].found is None


def test_what_a_host_says_on_the_board_has_no_control_characters() -> None:
    """The board's journal pane and its refusals show a host's words: escapes there would
    reach the terminal through the screen the board paints."""
    import pytest

    from laneboard.core.domain.errors import LaneboardError
    from laneboard.tui.board.hosts import run_on_host

    class Host:
        def __init__(self, code: int) -> None:
            self.code = code

        def on_host(self, host, words, *, tty, out, err):  # type: ignore[no-untyped-def]
            (out if self.code == 0 else err)(b"laneboard: \x1b]0;pwned\x07no \xc2\x9b1m\n")
            return self.code

    said = run_on_host(Host(0), "build", ["log", "t"])
    assert said == "laneboard: ?]0;pwned?no ?1m\n"
    with pytest.raises(LaneboardError) as refused:
        run_on_host(Host(1), "build", ["log", "t"])
    assert "\x1b" not in str(refused.value) and "\x07" not in str(refused.value)


GOOD = {"id": "0123456789ab", "name": "t", "branch": "refs/heads/lb/t/work", "repo": "/srv/app"}


def test_a_fetch_takes_the_hosts_task_id_branch_and_repository_as_they_are() -> None:
    assert fetch_source("build", GOOD) == ("0123456789ab", "lb/t/work", "/srv/app")


@pytest.mark.parametrize(
    ("field", "given"),
    [
        ("id", "../../heads/main"),
        ("id", ""),
        ("branch", "lb/t:refs/heads/main"),
        ("branch", "-c core.sshCommand=evil"),
        ("branch", "a/../../main"),
        ("branch", "lb/t/"),
        ("branch", "lb t"),
        ("repo", "--upload-pack=evil"),
        ("repo", "relative/path"),
        ("repo", "/srv/app\nsecond"),
    ],
)
def test_a_fetch_refuses_what_a_host_says_that_would_read_as_more_than_a_name(
    field: str, given: str
) -> None:
    """What comes over the connection is the host's to choose: nothing of it reaches a git
    command here unless it is a plain id, branch or absolute path."""
    with pytest.raises(LaneboardError, match="the host's answer"):
        fetch_source("build", {**GOOD, field: given})


@pytest.mark.parametrize(
    ("before", "now", "said"),
    [
        (None, {"boot": "b1", "tmux": 100.0}, None),  # never streamed: nothing to compare
        ({"boot": "b1", "tmux": 100.0}, {"boot": "b1", "tmux": 100.0}, None),  # a reconnect
        ({"boot": "b1", "tmux": 100.0}, {"boot": "b2", "tmux": 200.0}, "rebooted"),
        ({"boot": "b1", "tmux": None}, {"boot": "b2", "tmux": None}, "rebooted"),
        ({"boot": "b1", "tmux": 100.0}, {"boot": "b1", "tmux": 300.0}, "tmux server restarted"),
        ({"boot": "b1", "tmux": 100.0}, {"boot": "b1", "tmux": None}, "tmux server ended"),
        ({"boot": "b1", "tmux": None}, {"boot": "b1", "tmux": 300.0}, None),  # none ran before
        ({"boot": None, "tmux": 100.0}, {"boot": None, "tmux": 300.0}, "tmux server restarted"),
    ],
)
def test_a_host_back_says_whether_it_rebooted_or_its_tmux_server_changed(
    before: dict[str, object] | None, now: dict[str, object], said: str | None
) -> None:
    assert restarted_since(before, now) == said


def test_a_stream_applies_the_whole_list_then_changes_and_departures() -> None:
    tasks: dict[str, dict[str, object]] = {"old": {"id": "old"}}
    apply_stream(tasks, {"schema": "tasks/1", "tasks": [{"id": "a"}, {"id": "b", "n": 1}]})
    assert list(tasks) == ["a", "b"]
    apply_stream(tasks, {"tasks": [{"id": "b", "n": 2}], "gone": ["a", "never-there"]})
    assert tasks == {"b": {"id": "b", "n": 2}}
    assert stream_document(b'{"alive": true}\n') is None


@pytest.mark.parametrize(
    "line",
    [
        b"not json\n",
        b"[1, 2]\n",
        b"[" * 100_000 + b"]" * 100_000 + b"\n",
        b'{"tasks": 5}\n',
        b'{"gone": 7}\n',
        b'{"tasks": [{"name": "no id"}]}\n',
        b'{"tasks": [{"id": 3}]}\n',
        b'{"tasks": ["a"]}\n',
        b'{"gone": [{"id": "a"}]}\n',
    ],
)
def test_a_stream_line_that_is_not_laneboards_breaks_the_stream_and_changes_nothing(
    line: bytes,
) -> None:
    """What a host sends is its to choose: anything but a task list or a change is refused
    whole (the stream is ended and the host shown unreachable), never half applied."""
    tasks: dict[str, dict[str, object]] = {"a": {"id": "a"}}
    with pytest.raises(StreamBroken):
        document = stream_document(line)
        assert document is not None
        apply_stream(tasks, document)
    assert tasks == {"a": {"id": "a"}}
