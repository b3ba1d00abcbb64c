"""More of the agents in real tmux panes (the second half of test_runtime.py, apart so that
pytest-xdist can run the two halves on both workers): review round trips, conversations, the
agents laneboard knows, panes and their processes, driven from the command line as an operator
would, with the fakes of tests/fakes."""

from __future__ import annotations

import ctypes
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import FAKE, REPO_ROOT, git
from tests.e2e.test_runtime import (
    DEADLINE,
    _a_turn_and_a_question,
    _session_members,
    agent_state,
    agent_with_helper,
    eventually,
    screen,
    show,
)
from tests.procs import Spawned

pytestmark = pytest.mark.tmux


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
    # Gemini reads no per-launch settings a normal user can give it (a system settings file
    # must be root's): nothing is injected, its state comes from its screen.
    assert injection(BUILTIN["gemini"], tmp_path, "task1")[0] == []
    args, _ = injection(BUILTIN["aider"], tmp_path, "task1")
    # --notifications-command runs only with --notifications; the history is laneboard's
    assert args[:2] == ["--notifications", "--notifications-command"]
    own = tmp_path / "agentdata" / "task1"
    assert args[args.index("--chat-history-file") + 1] == str(own / "aider.chat.history.md")
    assert args[args.index("--input-history-file") + 1] == str(own / "aider.input.history")


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
    session = agent_with_helper(cli, server)
    assert cli("pause", "t").code == 0  # the agent obeys SIGTERM; its helper does not
    assert _session_members(session) == []


def _described(pids: list[int]) -> str:
    """Each process's id and command line, for a failure's message."""
    lines = []
    for pid in pids:
        try:
            line = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
            lines.append(f"{pid}: {line[:160].decode(errors='replace')}")
        except OSError:
            lines.append(f"{pid}: gone")
    return "; ".join(lines) or "none left"


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
    repo: Path, cli, agents, server, shared: Path
) -> None:
    tmp_path = shared  # the agent runs confined: it sees the test's home, not its /tmp
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


@pytest.mark.parametrize("mode", ["auto", "off"])
def test_an_agent_never_hears_that_no_one_is_at_its_terminal(
    repo: Path, cli, agents, server, shared: Path, mode: str
) -> None:
    """A laneboard run in a CI job (`CI=true`, in its own environment and the tmux server's)
    started Gemini CLI headless on a resume: it read a prompt from stdin and quit. Confined
    (the warden starts the agent) and not (the pane's `sh` does)."""
    (repo / ".laneboard.toml").write_text(f'[confine]\nmode = "{mode}"\n')
    server.cmd("set-environment", "-g", "CI", "true")
    out = shared / "env.json"
    code = f"import json, os; json.dump(dict(os.environ), open({str(out)!r}, 'w'))"
    line = shlex.join([sys.executable, "-c", code])
    env = {**os.environ, "CI": "true", "GITHUB_ACTIONS": "true"}
    assert cli("new", "k", "--cmd", line, env=env).code == 0
    seen = eventually(lambda: out.exists() and json.loads(out.read_text() or "null"), "env")
    assert "CI" not in seen and "GITHUB_ACTIONS" not in seen
    assert seen["LANEBOARD_EVENTS"]  # the rest of its environment is there


def test_pause_gives_a_graceful_agent_its_whole_grace(
    repo: Path, cli, agents, server, shared: Path
) -> None:
    tmp_path = shared  # the agent runs confined: it sees the test's home, not its /tmp
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
    eventually(
        lambda: len(_session_members(session)) == 4,
        "the warden, bwrap, bwrap's init (the sandbox's PID namespace) and the agent",
    )
    server.cmd(*(["kill-pane", "-t", pane] if how == "kill-pane" else ["kill-server"]))
    eventually(
        lambda: _session_members(session) == [],
        "the hang-up reaching the agent",
        on_fail=lambda: _described(_session_members(session)),
    )
    events = Path(os.environ["LANEBOARD_HOME"]) / "events" / f"{show(cli, 't')['id']}.log"
    last = eventually(lambda: events.read_text().splitlines()[-1:], "the warden's record")
    assert last == ["exited\t-\t129"]  # the warden saw the hang-up and ended its session


def test_a_hang_up_taken_by_any_thread_of_the_warden_ends_the_sandbox(
    repo: Path, cli, agents, server
) -> None:
    """Was left running under load: the kernel gives a process's signal to another thread when
    the main one already has one pending; the warden's main thread sat in `waitpid`, so its
    hang-up handler never ran. Here the hang-up goes to each other thread (`tgkill`) in turn."""
    libc = ctypes.CDLL(None, use_errno=True)
    for n in range(2):
        name = f"h{n}"
        assert cli("new", name, "--cmd", "sleep 300").code == 0
        pane = show(cli, name)["pane"]["pane_id"]
        warden = int(server.cmd("display-message", "-p", "-t", pane, "#{pane_pid}").stdout[0])
        eventually(lambda w=warden: len(_session_members(w)) == 4, "the sandbox and the agent")
        threads = eventually(
            lambda w=warden: sorted(int(t) for t in os.listdir(f"/proc/{w}/task") if int(t) != w),
            "the warden's other threads",
        )
        assert libc.tgkill(warden, threads[n % len(threads)], signal.SIGHUP) == 0
        eventually(
            lambda w=warden: _session_members(w) == [],
            "the hang-up reaching the agent",
            on_fail=lambda w=warden: _described(_session_members(w)),
        )


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
