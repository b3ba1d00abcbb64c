"""Agents in real tmux panes (a private server per test, libtmux's pytest plugin), driven from
the command line as an operator would, with a fake Claude Code (`tests/fakes/claude.py`) that
takes Claude's flags, runs the hooks of its `--settings` file and prints Claude's screens."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FAKE, REPO_ROOT, git
from tests.procs import Spawned

pytestmark = pytest.mark.tmux

DEADLINE = 20.0


def eventually(check: Callable[[], Any], what: str, deadline: float = DEADLINE) -> Any:
    """`check()`'s first truthy answer; fails naming `what` when none comes in time. Agent
    states are read from tmux and hook files: there is no event to wait on but the answer."""
    end = time.monotonic() + deadline
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > end:
            raise AssertionError(f"{what}: not within {deadline}s (last answer {found!r})")
        time.sleep(0.05)


def show(cli, name: str) -> dict[str, Any]:
    result = cli("show", name, "--json")
    assert result.code == 0, result.err
    document: dict[str, Any] = json.loads(result.out)
    return document


def agent_state(cli, name: str) -> str | None:
    agent = show(cli, name)["agent"]
    if agent is None:
        return None
    return str(agent["state"]) if agent["exit_code"] is None else f"exited({agent['exit_code']})"


def screen(server, cli, name: str) -> str:
    pane = show(cli, name)["pane"]["pane_id"]
    return "\n".join(server.cmd("capture-pane", "-p", "-J", "-t", pane, "-S", "-200").stdout)


def test_new_starts_the_agent_in_its_verified_worktree_on_a_pinned_conversation(
    repo: Path, cli, agents, server
) -> None:
    result = cli("new", "t", "--prompt", "fix the login")
    assert result.code == 0, result.err
    assert "running in pane %" in result.out
    task = show(cli, "t")
    worktree = repo / ".worktrees" / "t"
    conversation = task["conversation_id"]
    assert uuid.UUID(conversation)  # laneboard chose it: Claude takes --session-id <uuid>
    eventually(lambda: "done: fix the login" in screen(server, cli, "t"), "the first prompt")
    text = screen(server, cli, "t")
    assert f"session {conversation}" in text
    assert f"cwd: {worktree}" in text
    listed = server.cmd(
        "list-panes", "-a", "-F", "#{session_name} #{window_name} #{pane_id} #{remain-on-exit}"
    ).stdout
    assert f"lb-repo t {task['pane']['pane_id']} on" in listed
    # The hooks' settings live in laneboard's state dir; nothing was written into the worktree.
    assert git(worktree, "status", "--porcelain", "--ignored") == ""
    events = Path(os.environ["LANEBOARD_HOME"]) / "events" / f"{task['id']}.log"
    assert events.read_text().splitlines()[0].split("\t")[:2] == ["SessionStart", conversation]


def test_the_panes_environment_names_the_task_and_turns_off_repository_maintenance(
    repo: Path, cli, agents, server, tmp_path: Path
) -> None:
    dump = tmp_path / "env.json"
    command = (
        f'{sys.executable} -c \'import json,os; json.dump(dict(os.environ), open("{dump}", "w"))\''
    )
    assert cli("new", "t", "--cmd", command).code == 0
    env = eventually(lambda: dump.exists() and json.loads(dump.read_text() or "{}"), "env dump")
    assert env["LANEBOARD_TASK"] == show(cli, "t")["id"]
    assert env["LANEBOARD_REPO"] == str(repo)
    task_id = show(cli, "t")["id"]
    first = env["PATH"].split(os.pathsep)
    # (Confined) the git guard first, then the task's lane shims: tmux itself ignores a
    # pane's PATH, so this fails unless laneboard sets it on the command.
    assert first[0].endswith("/confine/bin")
    assert first[1].endswith(f"/shims/{task_id}/bin")
    pairs = {
        env[f"GIT_CONFIG_KEY_{n}"]: env[f"GIT_CONFIG_VALUE_{n}"]
        for n in range(int(env["GIT_CONFIG_COUNT"]))
    }
    assert pairs == {"gc.auto": "0", "maintenance.auto": "false"}
    result = subprocess.run(
        ["git", "config", "gc.auto"], cwd=repo, env=env, capture_output=True, text=True
    )
    assert result.stdout.strip() == "0"


def test_states_follow_the_hooks_working_waiting_idle(repo: Path, cli, agents, server) -> None:
    assert cli("new", "t").code == 0
    eventually(lambda: agent_state(cli, "t") == "idle", "idle after SessionStart")
    _a_turn_and_a_question(cli, "t")


def _a_turn_and_a_question(cli, name: str) -> None:  # type: ignore[no-untyped-def]
    """Working through a 3-second turn, idle after it, waiting on a question, idle once it is
    answered: each as its hooks (or event stream) say."""
    assert cli("send", name, "work 3").code == 0
    eventually(lambda: agent_state(cli, name) == "working", "working")
    eventually(lambda: agent_state(cli, name) == "idle", "idle after the turn")
    assert cli("send", name, "ask").code == 0
    eventually(lambda: agent_state(cli, name) == "waiting", "waiting on a permission")
    assert cli("send", name, "y").code == 0
    eventually(lambda: agent_state(cli, name) == "idle", "idle once answered")


def test_without_hooks_the_screen_says_working_and_idle_after_the_debounce(
    repo: Path, cli, agents, server
) -> None:
    agents(profile_lines='hooks = "none"')
    assert cli("new", "t").code == 0
    eventually(lambda: "\u276f" in screen(server, cli, "t"), "the prompt")
    eventually(lambda: agent_state(cli, "t") == "idle", "idle once the screen is still")
    assert cli("send", "t", "quiet 3").code == 0
    eventually(lambda: agent_state(cli, "t") == "working", "working from `esc to interrupt`")
    began = time.monotonic()
    eventually(lambda: agent_state(cli, "t") == "idle", "idle after the debounce")
    assert time.monotonic() - began >= 1.0  # not idle the moment the busy line scrolled off


def test_send_when_idle_waits_for_the_turn_to_end(repo: Path, cli, agents, server) -> None:
    assert cli("new", "t").code == 0
    eventually(lambda: agent_state(cli, "t") == "idle", "idle")
    assert cli("send", "t", "work 2").code == 0
    eventually(lambda: agent_state(cli, "t") == "working", "working")
    assert cli("send", "t", "--when-idle", "next please").code == 0
    text = screen(server, cli, "t")
    assert text.index("done: work 2") < text.index("next please")
    timed_out = cli("send", "t", "work 5")
    assert timed_out.code == 0
    eventually(lambda: agent_state(cli, "t") == "working", "working again")
    late = cli("send", "t", "--when-idle", "--timeout", "0.3", "never typed")
    assert late.code == 75
    assert "never typed" not in screen(server, cli, "t")


def test_an_exited_agent_makes_its_task_ready_for_review_with_its_code(
    repo: Path, cli, agents, server
) -> None:
    assert cli("new", "t").code == 0
    eventually(lambda: agent_state(cli, "t") == "idle", "idle")
    assert cli("send", "t", "exit 3").code == 0
    eventually(lambda: agent_state(cli, "t") == "exited(3)", "exited(3) before anyone writes")
    assert show(cli, "t")["state"] == "running"  # reads never write
    assert cli("supervise", "--once").code == 0
    task = show(cli, "t")
    assert task["state"] == "ready_for_review"
    log = cli("log", "t", "--json")
    exited = [e for e in json.loads(log.out)["events"] if e["kind"] == "agent.exited"]
    assert exited and exited[0]["data"]["code"] == 3
    assert "Fake Claude Code" in exited[0]["data"]["screen"]


def test_signal_done_finishes_a_task_whose_agent_still_runs(repo: Path, cli, agents) -> None:
    assert cli("new", "t").code == 0
    eventually(lambda: agent_state(cli, "t") == "idle", "idle")
    assert cli("signal", "--task", show(cli, "t")["id"], "--state", "done").code == 0
    assert cli("supervise", "--once").code == 0
    assert show(cli, "t")["state"] == "ready_for_review"
    bad = cli("signal", "--task", show(cli, "t")["id"], "--state", "sleeping")
    assert bad.code == 1 and "unknown state" in bad.err


def test_tasks_beyond_max_running_queue_and_start_when_a_session_ends(
    repo: Path, cli, agents, server
) -> None:
    agents("max_running = 1")
    assert cli("new", "a").code == 0
    queued = cli("new", "b", "--prompt", "later")
    assert queued.code == 0 and "queued" in queued.out
    assert show(cli, "b")["state"] == "queued" and show(cli, "b")["pane"] is None
    assert cli("pause", "a").code == 0  # frees the slot: b starts
    assert show(cli, "b")["state"] == "running"
    eventually(lambda: "done: later" in screen(server, cli, "b"), "b's first prompt")
    resumed = cli("resume", "a")
    assert resumed.code == 0 and show(cli, "a")["state"] == "queued"


def test_pause_keeps_every_file_and_resume_continues_the_same_conversation(
    repo: Path, cli, agents, server
) -> None:
    assert cli("new", "t", "--prompt", "first").code == 0
    worktree = repo / ".worktrees" / "t"
    eventually(lambda: "done: first" in screen(server, cli, "t"), "the first turn")
    (worktree / "tracked.txt").write_bytes(b"dirty\r\n\x00bytes")
    git(worktree, "add", "tracked.txt")
    (worktree / "tracked.txt").write_bytes(b"dirtier\r\n\x00bytes")
    (worktree / "untracked.md").write_bytes(b"draft \xff\n")
    before = show(cli, "t")
    assert cli("pause", "t").code == 0
    paused = show(cli, "t")
    assert paused["state"] == "paused"
    assert (worktree / "tracked.txt").read_bytes() == b"dirtier\r\n\x00bytes"
    assert (worktree / "untracked.md").read_bytes() == b"draft \xff\n"
    assert git(worktree, "diff", "--cached", "--name-only") == "tracked.txt"
    log = json.loads(cli("log", "t", "--json").out)["events"]
    assert "done: first" in next(e for e in log if e["kind"] == "agent.paused")["data"]["screen"]
    assert cli("resume", "t").code == 0
    after = show(cli, "t")
    assert after["conversation_id"] == before["conversation_id"]
    assert after["pane"]["pane_id"] == before["pane"]["pane_id"]  # the same pane, respawned
    eventually(lambda: "resumed conversation with 1 turns" in screen(server, cli, "t"), "resume")
    assert f"cwd: {worktree}" in screen(server, cli, "t")


def test_a_stubborn_agent_is_stopped_after_the_grace(
    repo: Path, cli, agents, server, monkeypatch: pytest.MonkeyPatch
) -> None:
    agents("stop_grace = 0.5", 'env = { FAKE_CLAUDE_IGNORE_TERM = "1" }')
    assert cli("new", "t").code == 0
    eventually(lambda: agent_state(cli, "t") == "idle", "idle")
    pane = show(cli, "t")["pane"]["pane_id"]
    session = int(server.cmd("display-message", "-p", "-t", pane, "#{pane_pid}").stdout[0])
    assert cli("send", "t", "spawn").code == 0
    eventually(
        lambda: len(_session_members(session)) == 4, "wrapper, bwrap, the agent and its helper"
    )
    began = time.monotonic()
    assert cli("pause", "t").code == 0
    assert time.monotonic() - began < 5
    assert _session_members(session) == []


def _session_members(sid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[3] == str(sid) and fields[0] != "Z":
                found.append(int(entry.name))
    return found


def test_after_the_tmux_server_dies_resume_brings_each_agent_back(
    repo: Path, cli, agents, server
) -> None:
    assert cli("new", "a").code == 0
    assert cli("new", "b").code == 0
    conversations = {name: show(cli, name)["conversation_id"] for name in "ab"}
    eventually(lambda: agent_state(cli, "a") == "idle", "idle")
    server.cmd("kill-server")
    assert agent_state(cli, "a") == "lost"
    listing = cli("ls")
    assert listing.out.count("runtime lost") == 2
    assert cli("resume", "--all").code == 0
    for name in "ab":
        assert show(cli, name)["conversation_id"] == conversations[name]
        eventually(lambda n=name: "resumed conversation" in screen(server, cli, n), "resumed")


def test_a_pane_killed_by_hand_is_noticed(repo: Path, cli, agents, server) -> None:
    assert cli("new", "t").code == 0
    server.cmd("kill-pane", "-t", show(cli, "t")["pane"]["pane_id"])
    assert agent_state(cli, "t") == "lost"
    assert cli("send", "t", "hello").code == 1


def test_a_pane_id_reused_by_a_new_server_is_not_the_tasks(repo: Path, cli, agents, server) -> None:
    assert cli("new", "t").code == 0
    pane = show(cli, "t")["pane"]["pane_id"]
    server.cmd("kill-server")

    def someone_elses_pane() -> bool:  # the old server may still be on its way out
        server.cmd("new-session", "-d", "-s", "someone-else", "sleep", "300")
        return pane in server.cmd("list-panes", "-a", "-F", "#{pane_id}").stdout

    eventually(someone_elses_pane, "a new server giving out the same pane id")
    assert agent_state(cli, "t") == "lost"
    refused = cli("send", "t", "rm -rf /")
    assert refused.code == 1
    captured = server.cmd("capture-pane", "-p", "-t", pane).stdout
    assert not any("rm -rf" in line for line in captured)


def test_nothing_starts_in_or_is_sent_to_a_worktree_that_fails_verification(
    repo: Path, cli, agents, server, tmp_path: Path
) -> None:
    assert cli("new", "t").code == 0
    assert cli("new", "idle-one", "--no-start").code == 0
    eventually(lambda: agent_state(cli, "t") == "idle", "idle")
    for name in ("t", "idle-one"):
        worktree = repo / ".worktrees" / name
        os.rename(worktree, tmp_path / f"moved-{name}")
        shutil.copytree(tmp_path / f"moved-{name}", worktree, symlinks=True)
    panes_before = server.cmd("list-panes", "-a", "-F", "#{pane_id}").stdout
    sent = cli("send", "t", "hello")
    assert sent.code == 1 and "fails verification" in sent.err
    assert "hello" not in screen(server, cli, "t")
    started = cli("start", "idle-one")
    assert started.code == 1 and "fails verification" in started.err
    assert cli("pause", "t").code == 0
    resumed = cli("resume", "t")
    assert resumed.code == 1 and "fails verification" in resumed.err
    assert server.cmd("list-panes", "-a", "-F", "#{pane_id}").stdout == panes_before


def test_an_agent_that_is_not_installed_is_refused_before_anything_is_made(
    repo: Path, cli, agents
) -> None:
    refused = cli("new", "t", "--agent", "codex")
    assert refused.code == 1
    assert "codex is not installed" in refused.err
    assert cli("ls", "--json").out.count('"name"') == 0
    assert git(repo, "branch", "--list", "lb/*") == ""


def test_one_controller_at_a_time_and_a_dead_ones_place_is_taken(repo: Path, cli, agents) -> None:
    first = Spawned(["supervise", "--interval", "0.2"], repo)
    try:
        eventually(lambda: _controller() == first.pid, "the first controller")
        second = cli("supervise", "--once")
        assert second.code == 1 and f"pid {first.pid}" in second.err
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait()
        assert cli("supervise", "--once").code == 0
    finally:
        first.close()


def _controller() -> int | None:
    from laneboard.core.adapters.ledger import Ledger

    ledger = Ledger.open_default()
    try:
        return ledger.controller()
    finally:
        ledger.close()


def test_retain_stops_the_agent_and_keeps_the_worktree(repo: Path, cli, agents, server) -> None:
    assert cli("new", "t").code == 0
    eventually(lambda: agent_state(cli, "t") == "idle", "idle")
    (repo / ".worktrees" / "t" / "notes.md").write_text("keep me\n")
    assert cli("retain", "t").code == 0
    pane = show(cli, "t")["pane"]["pane_id"]
    dead = server.cmd("display-message", "-p", "-t", pane, "#{pane_dead}").stdout
    assert dead == ["1"]
    assert (repo / ".worktrees" / "t" / "notes.md").read_text() == "keep me\n"


def test_shell_opens_beside_the_agent_once(repo: Path, cli, agents, server) -> None:
    assert cli("new", "t").code == 0
    first = cli("shell", "t")
    again = cli("shell", "t")
    assert first.code == 0 and again.code == 0
    assert first.out.split()[-1] == again.out.split()[-1]
    shell_pane = first.out.split()[-1]
    where = server.cmd("display-message", "-p", "-t", shell_pane, "#{pane_current_path}").stdout
    assert where == [str(repo / ".worktrees" / "t")]


def test_doctor_reconciles_panes_with_the_ledger(repo: Path, cli, agents, server) -> None:
    assert cli("new", "orphan").code == 0
    assert cli("new", "lost").code == 0
    eventually(lambda: agent_state(cli, "orphan") == "idle", "idle")
    orphan = show(cli, "orphan")
    # A retired task whose agent still runs: the ledger says discarded, the pane lives on.
    from laneboard.core.adapters.ledger import Ledger
    from laneboard.core.domain.models import Actor, TaskState

    ledger = Ledger.open_default()
    try:
        ledger.update_task(orphan["id"], actor=Actor.CLI, kind="test", state=TaskState.RETAINED)
        ledger.update_task(orphan["id"], actor=Actor.CLI, kind="test", state=TaskState.DISCARDING)
        ledger.update_task(
            orphan["id"], actor=Actor.CLI, kind="test", state=TaskState.DISCARDED, settled=True
        )
    finally:
        ledger.close()
    server.cmd("kill-pane", "-t", show(cli, "lost")["pane"]["pane_id"])
    report = json.loads(cli("doctor", "--json").out)
    kinds = {(f["kind"], f["task"]) for f in report["findings"]}
    assert ("orphan-pane", "orphan") in kinds
    assert ("runtime-lost", "lost") in kinds
    fixed = json.loads(cli("doctor", "--fix", "--json").out)
    assert any(f["kind"] == "orphan-pane" and f["fixed"] for f in fixed["findings"])
    dead = server.cmd("display-message", "-p", "-t", orphan["pane"]["pane_id"], "#{pane_dead}")
    assert dead.stdout == ["1"]


def test_discard_refuses_while_the_agent_runs(repo: Path, cli, agents, server) -> None:
    assert cli("new", "t").code == 0
    refused = cli("discard", "t", "--force")
    assert refused.code == 1 and "agent" in refused.err
    assert (repo / ".worktrees" / "t").is_dir()
    assert cli("retain", "t").code == 0
    assert cli("discard", "t").code == 0


def test_pause_all_and_resume_all(repo: Path, cli, agents, server) -> None:
    for name in ("a", "b"):
        assert cli("new", name).code == 0
    paused = cli("pause", "--all")
    assert paused.code == 0 and sorted(paused.out.split()) == ["a:", "b:", "paused", "paused"]
    assert {show(cli, n)["state"] for n in "ab"} == {"paused"}
    assert cli("pause", "a", "--all").code == 2  # a name or --all, not both
    assert cli("resume", "--all").code == 0
    assert {show(cli, n)["state"] for n in "ab"} == {"running"}


def test_a_task_sent_back_from_review_runs_its_conversation_again(
    repo: Path, cli, agents, server
) -> None:
    assert cli("new", "t", "--prompt", "one").code == 0
    eventually(lambda: agent_state(cli, "t") == "idle", "idle")
    assert cli("send", "t", "exit 0").code == 0
    eventually(lambda: agent_state(cli, "t") == "exited(0)", "exited")
    assert cli("supervise", "--once").code == 0
    assert show(cli, "t")["state"] == "ready_for_review"
    assert cli("resume", "t").code == 0
    assert show(cli, "t")["state"] == "running"
    eventually(lambda: "resumed conversation with 1 turns" in screen(server, cli, "t"), "resumed")
    kinds = [e["kind"] for e in json.loads(cli("log", "t", "--json").out)["events"]]
    assert kinds.index("task.revising") < kinds.index("agent.resumed")


def test_a_conversation_id_reported_by_a_hook_is_kept(repo: Path, cli, agents, server) -> None:
    """Codex cannot take an id at launch: its `notify` hook reports `thread-id` (as the last
    argument, as Codex passes it) and that is the id `resume` will use."""
    hook_line = json.dumps({"type": "agent-turn-complete", "thread-id": "th-42"})
    assert cli("new", "t", "--cmd", "sleep 300").code == 0
    task = show(cli, "t")
    assert task["conversation_id"] is None
    home = Path(os.environ["LANEBOARD_HOME"])
    events = home / "events" / f"{task['id']}.log"
    subprocess.run(
        ["sh", str(home / "hooks" / "event.sh"), "agent-turn-complete", "arg", hook_line],
        env={**os.environ, "LANEBOARD_EVENTS": str(events)},
        check=True,
    )
    assert cli("supervise", "--once").code == 0
    assert show(cli, "t")["conversation_id"] == "th-42"


def test_codex_gets_its_notify_hook_per_launch(tmp_path: Path) -> None:
    from laneboard.core.adapters.agentfiles import injection
    from laneboard.core.domain.agents import BUILTIN

    args, env = injection(BUILTIN["codex"], tmp_path, "task1")
    assert args[0] == "-c" and args[1].startswith("notify=")
    notify = json.loads(args[1].removeprefix("notify="))
    assert notify[:2] == ["sh", str(tmp_path / "hooks" / "event.sh")]
    assert env["LANEBOARD_EVENTS"] == str(tmp_path / "events" / "task1.log")
    args, env = injection(BUILTIN["gemini"], tmp_path, "task1")
    settings = json.loads(Path(env["GEMINI_CLI_SYSTEM_SETTINGS_PATH"]).read_text())
    assert set(settings["hooks"]) == {"BeforeAgent", "AfterAgent", "Notification", "SessionEnd"}
    args, _ = injection(BUILTIN["aider"], tmp_path, "task1")
    assert args[0] == "--notifications-command"


def test_without_tmux_new_says_so_and_leaves_the_task_to_start_later(
    repo: Path, cli, agents, tmp_path: Path
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("git", "sh", "sleep", "env"):
        found = shutil.which(tool)
        assert found is not None
        (bin_dir / tool).symlink_to(found)
    result = cli("new", "t", "--cmd", "sleep 300", env={"PATH": str(bin_dir)})
    assert result.code == 1
    assert "tmux is not installed" in result.err
    assert "laneboard start t" in result.err
    assert show(cli, "t")["state"] == "provisioned"


def test_tmux_older_than_3_2a_is_refused() -> None:
    from laneboard.sessions.tmux import TmuxError, check_version

    check_version((3, 2, "a"))
    check_version((3, 3, "a"))
    with pytest.raises(TmuxError, match=r"tmux 3\.2 is too old; laneboard needs tmux 3\.2a"):
        check_version((3, 2, ""))
    with pytest.raises(TmuxError, match=r"2\.9a is too old"):
        check_version((2, 9, "a"))


def _clients(server) -> list[str]:
    return server.cmd("list-clients", "-F", "#{client_session} #{window_name}").stdout


def test_attach_from_outside_tmux_attaches_this_terminal_to_the_tasks_window(
    repo: Path, cli, agents, server
) -> None:
    assert cli("new", "a").code == 0
    assert cli("new", "t").code == 0
    line = shlex.join([sys.executable, "-P", "-m", "laneboard", "attach", "t"])
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "TERM": "xterm"}
    terminal = subprocess.Popen(
        ["script", "-qfc", line, "/dev/null"], cwd=repo, env=env,
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        eventually(lambda: _clients(server) == ["lb-repo t"], "a client on the task's window")
    finally:
        terminal.kill()
        terminal.wait()


def test_attach_inside_tmux_switches_the_client(repo: Path, cli, agents, server) -> None:
    assert cli("new", "t").code == 0
    server.cmd("new-session", "-d", "-s", "mine", "-n", "mine", "sleep", "300")
    line = shlex.join(["tmux", "-L", server.socket_name, "attach", "-t", "mine"])
    terminal = subprocess.Popen(
        ["script", "-qfc", line, "/dev/null"], stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "TERM": "xterm"},
    )  # fmt: skip
    try:
        eventually(lambda: _clients(server) == ["mine mine"], "the operator's client")
        socket = server.cmd("display-message", "-p", "#{socket_path}").stdout[0]
        inside = {"TMUX": f"{socket},1,0"}
        result = cli("attach", "t", env=inside)
        assert result.code == 0, result.err
        eventually(lambda: _clients(server) == ["lb-repo t"], "switched to the task's window")
    finally:
        terminal.kill()
        terminal.wait()


def test_a_first_prompt_is_typed_once_an_agent_without_a_prompt_flag_has_settled(
    repo: Path, cli, agents, server
) -> None:
    """`--cmd` agents (and aider) take no prompt argument: it is typed once the screen
    settles, with any characters it holds."""
    prompt = 'it\'s "quoted" $(not run) -- and ü'
    assert cli("new", "t", "--cmd", shlex.join(FAKE), "--prompt", prompt).code == 0
    eventually(lambda: f"done: {prompt}" in screen(server, cli, "t"), "the typed prompt")
    assert show(cli, "t")["agent_profile"] == "custom"


def test_an_agent_that_quits_leaves_no_helper_behind(repo: Path, cli, agents, server) -> None:
    assert cli("new", "t").code == 0
    eventually(lambda: agent_state(cli, "t") == "idle", "idle")
    pane = show(cli, "t")["pane"]["pane_id"]
    session = int(server.cmd("display-message", "-p", "-t", pane, "#{pane_pid}").stdout[0])
    assert cli("send", "t", "spawn").code == 0
    eventually(
        lambda: len(_session_members(session)) == 4, "wrapper, bwrap, the agent and its helper"
    )
    assert cli("pause", "t").code == 0  # the agent obeys SIGTERM; its helper does not
    assert _session_members(session) == []


def _pane_paths(server) -> dict[str, str]:
    lines = server.cmd("list-panes", "-a", "-F", "#{window_name}\t#{pane_current_path}").stdout
    return dict(line.split("\t", 1) for line in lines)


def test_after_a_server_restart_each_task_gets_a_pane_of_its_own(
    repo: Path, cli, agents, server
) -> None:
    for name in ("t1", "t2"):
        assert cli("new", name).code == 0
    server.cmd("kill-server")
    assert cli("resume", "t2").code == 0
    assert cli("resume", "t1").code == 0  # t1's old id is t2's new pane: never reused
    paths = _pane_paths(server)
    assert paths == {n: str(repo / ".worktrees" / n) for n in ("t1", "t2")}
    assert show(cli, "t1")["pane"]["pane_id"] != show(cli, "t2")["pane"]["pane_id"]


def test_after_a_server_restart_someone_elses_pane_is_never_touched(
    repo: Path, cli, agents, server
) -> None:
    assert cli("new", "t").code == 0
    pane = show(cli, "t")["pane"]["pane_id"]
    server.cmd("kill-server")

    def theirs() -> bool:
        server.cmd("new-session", "-d", "-s", "mine", "-n", "mine", "sleep", "300")
        return pane in server.cmd("list-panes", "-a", "-F", "#{pane_id}").stdout

    eventually(theirs, "a new server giving out the same pane id")
    for command in (("pause", "t"), ("retain", "t")):
        cli(*command)
        alive = server.cmd("display-message", "-p", "-t", pane, "#{pane_dead} #{session_name}")
        assert alive.stdout == ["0 mine"], command
    assert cli("resume", "t").code == 0
    assert server.cmd(
        "display-message", "-p", "-t", pane, "#{pane_dead} #{session_name}"
    ).stdout == ["0 mine"]
    assert _pane_paths(server)["t"] == str(repo / ".worktrees" / "t")


def test_a_moved_window_is_still_the_tasks_pane(repo: Path, cli, agents, server) -> None:
    assert cli("new", "t").code == 0
    eventually(lambda: agent_state(cli, "t") == "idle", "idle")
    server.cmd("new-session", "-d", "-s", "mine", "-n", "mine", "sleep", "300")
    server.cmd("move-window", "-s", "lb-repo:t", "-t", "mine:")
    assert agent_state(cli, "t") == "idle"
    assert cli("send", "t", "hello").code == 0


def test_semicolons_and_dashes_reach_the_agent_and_never_tmux(
    repo: Path, cli, agents, server, tmp_path: Path
) -> None:
    server.cmd("new-session", "-d", "-s", "mine", "-n", "mine", "sleep", "300")
    out = tmp_path / "argv.json"
    code = f"import json, sys; json.dump(sys.argv[1:], open({str(out)!r}, 'w'))"
    line = shlex.join([sys.executable, "-c", code, "echo hi;", "kill-server", ";", "a \\;"])
    assert cli("new", "k", "--cmd", line).code == 0
    argv = eventually(lambda: out.exists() and json.loads(out.read_text() or "null"), "argv")
    assert argv == ["echo hi;", "kill-server", ";", "a \\;"]
    assert "mine" in server.cmd("list-sessions", "-F", "#{session_name}").stdout
    assert cli("new", "p", "--prompt", "-- fix the bug; then test;").code == 0
    eventually(lambda: "done: -- fix the bug; then test;" in screen(server, cli, "p"), "prompt")
    for text in ("echo hi;", ";", "a \\;"):
        assert cli("send", "p", text).code == 0
        eventually(lambda t=text: f"done: {t}" in screen(server, cli, "p"), f"sent {text!r}")


def test_pause_gives_a_graceful_agent_its_whole_grace(
    repo: Path, cli, agents, server, tmp_path: Path
) -> None:
    agents("stop_grace = 10")
    saved = tmp_path / "saved"
    code = (
        "import signal, sys, time\n"
        "def quit(*_):\n"
        f"    time.sleep(1.5); open({str(saved)!r}, 'w').write('saved'); sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, quit)\n"
        "print('ready', flush=True)\n"
        "time.sleep(300)\n"
    )
    assert cli("new", "g", "--cmd", shlex.join([sys.executable, "-c", code])).code == 0
    eventually(lambda: "ready" in screen(server, cli, "g"), "ready")
    assert cli("pause", "g").code == 0
    assert saved.read_text() == "saved"


def test_two_resumes_at_once_start_one_agent(repo: Path, cli, agents, server) -> None:
    assert cli("new", "t").code == 0
    assert cli("pause", "t").code == 0
    racers = [Spawned(["resume", "t"], repo) for _ in range(2)]
    codes = [racer.proc.wait(timeout=DEADLINE) for racer in racers]
    for racer in racers:
        racer.close()
    assert 0 in codes
    eventually(lambda: agent_state(cli, "t") == "idle", "one live agent")
    assert cli("supervise", "--once").code == 0
    assert show(cli, "t")["state"] == "running"
    assert server.cmd("list-panes", "-a", "-F", "#{pane_dead}").stdout == ["0"]


def test_concurrent_starts_never_exceed_max_running(repo: Path, cli, agents, server) -> None:
    agents("max_running = 1")
    for name in ("a", "b"):
        assert cli("new", name, "--no-start").code == 0
    racers = [Spawned(["start", name], repo) for name in ("a", "b")]
    for racer in racers:
        racer.proc.wait(timeout=DEADLINE)
        racer.close()
    assert sorted(show(cli, n)["state"] for n in "ab") == ["queued", "running"]


def test_a_task_whose_server_is_gone_holds_no_slot(repo: Path, cli, agents, server) -> None:
    agents("max_running = 1")
    assert cli("new", "a").code == 0
    server.cmd("kill-server")
    assert cli("new", "b").code == 0
    assert show(cli, "b")["state"] == "running"


def test_resume_continues_the_conversation_a_hook_reported_last(
    repo: Path, cli, agents, server
) -> None:
    assert cli("new", "t").code == 0
    eventually(lambda: agent_state(cli, "t") == "idle", "started (its own SessionStart sent)")
    task = show(cli, "t")
    home = Path(os.environ["LANEBOARD_HOME"])
    events = home / "events" / f"{task['id']}.log"
    cleared = str(uuid.uuid4())  # Claude's /clear starts a new conversation
    payload = json.dumps({"session_id": cleared, "hook_event_name": "SessionStart"})
    subprocess.run(
        ["sh", str(home / "hooks" / "event.sh"), "SessionStart", "stdin"], input=payload,
        text=True, env={**os.environ, "LANEBOARD_EVENTS": str(events)}, check=True,
    )  # fmt: skip
    assert cli("pause", "t").code == 0
    assert cli("resume", "t").code == 0
    assert show(cli, "t")["conversation_id"] == cleared
    eventually(lambda: f"session {cleared}" in screen(server, cli, "t"), "resumed on it")


def test_send_to_a_stopped_agent_is_refused(repo: Path, cli, agents, server) -> None:
    assert cli("new", "t").code == 0
    assert cli("pause", "t").code == 0
    refused = cli("send", "t", "hello")
    assert refused.code == 1 and "not running" in refused.err


def test_shell_output_does_not_make_an_idle_agent_look_busy(
    repo: Path, cli, agents, server
) -> None:
    assert cli("new", "t").code == 0
    eventually(lambda: agent_state(cli, "t") == "idle", "idle")
    shell = cli("shell", "t").out.split()[-1]
    server.cmd("send-keys", "-t", shell, "while :; do date; sleep 0.2; done", "Enter")
    time.sleep(2.0)  # the shell prints all along; the agent's screen does not change
    assert agent_state(cli, "t") == "idle"


def test_an_unusable_socket_is_a_one_line_error(repo: Path, cli, agents, tmp_path: Path) -> None:
    result = cli("new", "t", env={"LANEBOARD_TMUX_SOCKET": str(tmp_path / "no" / "dir" / "s")})
    assert result.code == 1
    assert "internal error" not in result.err
    assert len(result.err.strip().splitlines()) == 1


def test_two_new_at_once_on_a_fresh_server_both_start(repo: Path, cli, agents, server) -> None:
    assert cli("init").code == 0
    racers = [Spawned(["new", name], repo) for name in ("c1", "c2")]
    for racer in racers:
        assert racer.proc.wait(timeout=DEADLINE) == 0, racer.proc.stderr.read()  # type: ignore[union-attr]
        racer.close()
    assert {show(cli, n)["state"] for n in ("c1", "c2")} == {"running"}


OPENCODE = [sys.executable, str(REPO_ROOT / "tests" / "fakes" / "opencode.py")]


def test_opencode_states_and_its_session_come_from_its_event_stream(
    repo: Path, cli, agents, server
) -> None:
    home = Path(os.environ["LANEBOARD_HOME"])
    with (home / "config.toml").open("a") as config:
        config.write(f"[agents.profiles.opencode]\ncommand = {json.dumps(OPENCODE)}\n")
    assert cli("new", "o", "--agent", "opencode", "--prompt", "first").code == 0
    eventually(lambda: "done: first" in screen(server, cli, "o"), "the typed first prompt")
    session = eventually(
        lambda: cli("supervise", "--once").code == 0 and show(cli, "o")["conversation_id"],
        "the session id from the stream, kept by a refresh",
    )
    assert session.startswith("ses_")
    _a_turn_and_a_question(cli, "o")  # session.status busy/idle, permission.asked
    assert cli("pause", "o").code == 0
    assert cli("resume", "o").code == 0
    eventually(lambda: "resumed session with 3 turns" in screen(server, cli, "o"), "-s <id>")
    assert show(cli, "o")["conversation_id"] == session


def test_every_panes_screen_is_read_whatever_its_id(repo: Path, cli, agents, server) -> None:
    """Was broken: the chained capture's marker went through tmux's strftime, so from `%3` on
    every screen was filed under a wrong id and read as empty."""
    agents("max_running = 8", 'hooks = "none"')
    names = [f"s{n}" for n in range(5)]
    for name in names:
        assert cli("new", name).code == 0
    for name in names:
        assert cli("send", name, "ask").code == 0
    for name in names:
        eventually(lambda n=name: agent_state(cli, n) == "waiting", f"{name} waiting (screen)")


def test_long_text_reaches_the_agent_as_one_paste(repo: Path, cli, agents, server) -> None:
    """Was broken: text went on tmux's command line, which takes 16 KB at most."""
    assert cli("new", "t").code == 0
    assert cli("send", "t", "y" * 40000).code == 0  # far past tmux's command line limit
    eventually(lambda: agent_state(cli, "t") == "idle", "idle")
    text = "x" * 4000  # a terminal in canonical mode (the fake's) takes 4095 bytes a line
    assert cli("send", "t", text).code == 0
    eventually(lambda: "done: xxxxxxxx" in screen(server, cli, "t"), "the long prompt answered")
    log = Path(os.environ["HOME"]) / ".fake-claude" / f"{show(cli, 't')['conversation_id']}.log"
    assert text in log.read_text().splitlines()


def test_a_fresh_start_after_retain_is_a_new_conversation(repo: Path, cli, agents) -> None:
    assert cli("new", "t").code == 0
    eventually(lambda: agent_state(cli, "t") == "idle", "idle")
    first = show(cli, "t")["conversation_id"]
    assert cli("retain", "t").code == 0
    assert agent_text_of(cli, "t") == "stopped"
    assert cli("start", "t", "--prompt", "again").code == 0
    second = show(cli, "t")["conversation_id"]
    assert second != first and uuid.UUID(second)


def agent_text_of(cli, name: str) -> str:  # type: ignore[no-untyped-def]
    row = next(line for line in cli("ls").out.splitlines() if line.startswith(name + " "))
    return row.split()[-2]


def test_another_tmux_server_leaves_the_tasks_agent_alone(
    repo: Path, cli, agents, server, tmp_path: Path
) -> None:
    assert cli("new", "t").code == 0
    other = {"LANEBOARD_TMUX_SOCKET": f"{server.socket_name}-other"}
    subprocess.run(["tmux", "-L", other["LANEBOARD_TMUX_SOCKET"], "new-session", "-d",
                    "sleep", "30"], check=True)  # fmt: skip
    try:
        fixed = json.loads(cli("doctor", "--fix", "--json", env=other).out)
        assert not [f for f in fixed["findings"] if f["task"] == "t"]
        refused = cli("resume", "t", env=other)
        assert refused.code == 1 and "LANEBOARD_TMUX_SOCKET=" in refused.err
        assert show(cli, "t")["pane"] is not None
        assert agent_state(cli, "t") in ("idle", "working", "starting")
    finally:
        subprocess.run(["tmux", "-L", other["LANEBOARD_TMUX_SOCKET"], "kill-server"])


def test_an_agent_a_killed_launch_left_behind_is_found_and_never_doubled(
    repo: Path, cli, agents, server
) -> None:
    assert cli("new", "t", "--no-start").code == 0
    task = show(cli, "t")
    # What a launch leaves when its command is killed before it writes the ledger: a pane
    # tagged for the task, running, that the ledger knows nothing of.
    stray = server.cmd("new-session", "-d", "-P", "-F", "#{pane_id}", "-s", "lb-repo",
                       "sleep", "300").stdout[0]  # fmt: skip
    server.cmd("set-option", "-p", "-t", stray, "@lb_task", task["id"])
    stray_pid = int(server.cmd("display-message", "-p", "-t", stray, "#{pane_pid}").stdout[0])
    report = json.loads(cli("doctor", "--json").out)
    assert any(f["kind"] == "unrecorded-pane" and f["task"] == "t" for f in report["findings"])
    started = cli("start", "t")  # stops the stray first: one agent per worktree
    assert started.code == 0, started.err
    assert _session_members(stray_pid) == []  # the stray agent is gone (or a zombie)
    alive = [line for line in server.cmd("list-panes", "-a", "-F", "#{pane_dead} #{@lb_task}")
             .stdout if line == f"0 {task['id']}"]  # fmt: skip
    assert len(alive) == 1


def test_bad_env_names_and_a_negative_grace_are_refused(repo: Path, cli, agents) -> None:
    home = Path(os.environ["LANEBOARD_HOME"])
    for text, field in [
        ('env = { "X=Y" = "z" }\n', "env: 'X=Y' is not an environment variable name"),
        ("[agents]\nstop_grace = -5\n", "agents.stop_grace: must not be negative"),
    ]:
        (home / "config.toml").write_text(text)
        result = cli("new", "t", "--no-start")
        assert result.code == 1 and field in result.err, result.err


@pytest.mark.parametrize("how", ["kill-pane", "kill-server"])
def test_a_killed_pane_or_server_leaves_no_agent_running(
    repo: Path, cli, agents, server, how: str
) -> None:
    assert cli("new", "t", "--cmd", "sleep 300").code == 0
    pane = show(cli, "t")["pane"]["pane_id"]
    session = int(server.cmd("display-message", "-p", "-t", pane, "#{pane_pid}").stdout[0])
    eventually(lambda: len(_session_members(session)) == 3, "the wrapper, bwrap and the agent")
    server.cmd(*(["kill-pane", "-t", pane] if how == "kill-pane" else ["kill-server"]))
    eventually(lambda: _session_members(session) == [], "the hang-up reaching the agent")


def test_finalize_refuses_a_running_agent_and_rebase_waits_for_an_idle_one(
    repo: Path, cli, agents, server
) -> None:
    assert cli("new", "t").code == 0
    eventually(lambda: agent_state(cli, "t") == "idle", "idle after SessionStart")
    worktree = repo / ".worktrees" / "t"
    (worktree / "f.txt").write_text("work\n")
    git(worktree, "add", "f.txt")
    git(worktree, "commit", "-q", "-m", "work")
    assert cli("review", "t", "--mark").code == 0
    refused = cli("finalize", "t", "--merge")
    assert refused.code == 1 and "its agent still runs" in refused.err
    (repo / "main.txt").write_text("main\n")
    git(repo, "add", "main.txt")
    git(repo, "commit", "-q", "-m", "main moves")
    assert cli("send", "t", "work 3").code == 0
    eventually(lambda: agent_state(cli, "t") == "working", "working")
    busy = cli("rebase", "t")
    assert busy.code == 1 and "its agent is working" in busy.err
    eventually(lambda: agent_state(cli, "t") == "idle", "idle after the turn")
    done = cli("rebase", "t")
    assert done.code == 0, done.err
    assert (worktree / "main.txt").exists()
    assert cli("pause", "t").code == 0
    assert cli("review", "t", "--mark").code == 0
    assert cli("finalize", "t", "--merge").code == 0


@pytest.mark.parametrize(("command", "after", "state"), [
    ("pause", "pause.after_stop", "paused"),
    ("retain", "retain.after_stop", "retained"),
])  # fmt: skip
def test_the_controller_never_takes_a_pause_or_retain_for_the_agents_own_exit(
    repo: Path, cli, agents, server, pause, command: str, after: str, state: str
) -> None:
    """Regression: the board (the controller) saw the pane of an agent that `pause` had just
    stopped as dead, made the task ready for review, and the pause then failed ("another
    process changed it"). The stop and its record now hold the agents lock."""
    assert cli("new", "t").code == 0
    eventually(lambda: agent_state(cli, "t") == "idle", "idle")
    held = pause(after)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), **held.env}
    stopping = subprocess.Popen(
        [sys.executable, "-P", "-m", "laneboard", command, "t"], cwd=repo, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    held.reached()  # the agent is stopped, nothing recorded yet
    controller = subprocess.Popen(
        [sys.executable, "-P", "-m", "laneboard", "supervise", "--once"], cwd=repo,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    time.sleep(0.5)  # the controller reconciles now, or waits for the lock
    held.go()
    _out, err = stopping.communicate(timeout=DEADLINE)
    assert stopping.returncode == 0, err
    controller.communicate(timeout=DEADLINE)
    assert show(cli, "t")["state"] == state
    kinds = [line.split()[2] for line in cli("log", "t").out.splitlines()[1:] if line.strip()]
    assert "agent.exited" not in kinds
