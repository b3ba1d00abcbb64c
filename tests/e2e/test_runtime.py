"""Agents in real tmux panes (a private server per test, libtmux's pytest plugin), driven from
the command line as an operator would, with a fake Claude Code (`tests/fakes/claude.py`) that
takes Claude's flags, runs the hooks of its `--settings` file and prints Claude's screens."""

from __future__ import annotations

import json
import os
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

from tests.conftest import git
from tests.procs import Spawned

pytestmark = pytest.mark.tmux

DEADLINE = 20.0


def eventually(
    check: Callable[[], Any],
    what: str,
    deadline: float = DEADLINE,
    on_fail: Callable[[], Any] | None = None,
) -> Any:
    """`check()`'s first truthy answer; fails naming `what` (and what `on_fail` reports, a
    pane's screen say) when none comes in time. Agent states are read from tmux and hook
    files: there is no event to wait on but the answer."""
    end = time.monotonic() + deadline
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > end:
            seen = on_fail() if on_fail is not None else f"last answer {found!r}"
            raise AssertionError(f"{what}: not within {deadline}s ({seen})")
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
    repo: Path, cli, agents, server, shared: Path
) -> None:
    dump = shared / "env.json"
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
    assert pairs == {
        "gc.auto": "0",
        "maintenance.auto": "false",
        # laneboard's hooks (each passing on to the repository's own; a ref update waits
        # until its objects are in the store)
        "core.hooksPath": str(Path(os.environ["LANEBOARD_HOME"]) / "hooks" / "git"),
    }
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


def _sent_right_after_a_resume(cli, agents, server, env: str) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """The fake Claude with `env`: a first turn, pause, resume, and "and again" sent at once;
    once its turn is done, the journal's last `agent.sent` data."""
    agents("", f"env = {{ {env} }}")
    assert cli("new", "t", "--prompt", "first").code == 0
    eventually(lambda: "done: first" in screen(server, cli, "t"), "the first turn")
    assert cli("pause", "t").code == 0
    assert cli("resume", "t").code == 0
    eventually(lambda: "resumed conversation" in screen(server, cli, "t"), "the resume")
    assert cli("send", "t", "and again").code == 0
    eventually(lambda: "done: and again" in screen(server, cli, "t"), "the turn sent")
    return _last_sent(cli)


def _last_sent(cli) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    events = json.loads(cli("log", "t", "--json").out)["events"]
    return dict([e for e in events if e["kind"] == "agent.sent"][-1]["data"])


def test_a_send_right_after_a_resume_is_taken_though_the_agent_drops_its_enter(
    repo: Path, cli, agents, server
) -> None:
    """Claude Code shows its idle prompt while a resumed conversation still loads, keeps what
    is pasted then and loses the Enter: `send` sees no sign of the agent taking it and presses
    Enter again."""
    sent = _sent_right_after_a_resume(cli, agents, server, 'FAKE_CLAUDE_LOADING = "2"')
    assert sent == {"text": "and again", "seen": True}


def test_a_send_dropped_whole_while_a_resumed_agent_loads_is_typed_again(
    repo: Path, cli, agents, server
) -> None:
    """opencode (and Gemini under load) drop what is typed while a resumed session loads,
    text and Enter: nothing on the screen, no sign of a turn. Within the first minute after the
    start, a short one-line text is typed once more; it is taken once."""
    dropping = 'FAKE_CLAUDE_LOADING = "2", FAKE_CLAUDE_LOADING_DROPS = "1"'
    sent = _sent_right_after_a_resume(cli, agents, server, dropping)
    assert sent == {"text": "and again", "seen": True}
    log = Path(os.environ["HOME"]) / ".fake-claude" / f"{show(cli, 't')['conversation_id']}.log"
    assert log.read_text().splitlines() == ["first", "and again"]


def test_a_send_the_agent_shows_no_sign_of_taking_says_so(repo: Path, cli, agents, server) -> None:
    """An agent that neither reports nor shows anything (here one that reads nothing and
    echoes nothing): `send` presses Enter again twice, then says it saw no sign."""
    assert cli("new", "t", "--cmd", "sh -c 'echo ready; stty -echo; sleep 300'").code == 0
    eventually(lambda: show(cli, "t")["state"] == "running", "running")
    text = "x" * 250  # too long to be typed a second time (see `operations.agents.type_text`)
    sent = cli("send", "t", text)
    assert sent.code == 0
    assert "its agent showed no sign of taking it" in sent.err, sent.err
    assert _last_sent(cli) == {"text": text, "seen": False}


def test_what_an_agent_keeps_private_is_kept_out_of_the_worktree(
    repo: Path, cli, agents, server
) -> None:
    """A profile's `private` name (aider's tags cache): inside the sandbox a directory of
    laneboard's state is bound there, so the agent's writes land outside the worktree; the
    empty directory it was bound over goes when the agent ends. Something else already at the
    name (a symbolic link the agent left) is never replaced or followed."""
    agents("", 'private = ["cachedir", "linked"]')
    worktree = repo / ".worktrees" / "t"
    assert cli("new", "t").code == 0
    eventually(lambda: agent_state(cli, "t") == "idle", "idle")
    assert cli("send", "t", "write cachedir/tags v4").code == 0
    eventually(lambda: "done: wrote cachedir/tags" in screen(server, cli, "t"), "the write")
    task_id = show(cli, "t")["id"]
    kept = Path(os.environ["LANEBOARD_HOME"]) / "private" / task_id
    assert (kept / "cachedir" / "tags").read_text() == "v4\n"
    assert list((worktree / "cachedir").iterdir()) == []  # the mount point, seen outside
    assert git(worktree, "status", "--porcelain", "--ignored") == ""
    assert cli("pause", "t").code == 0
    assert not (worktree / "cachedir").exists() and not (worktree / "linked").exists()
    (worktree / "sub").mkdir()
    (worktree / "linked").symlink_to("sub")
    assert cli("resume", "t").code == 0
    eventually(lambda: agent_state(cli, "t") == "idle", "idle after resume")
    assert cli("send", "t", "write linked/note through the link").code == 0
    eventually(lambda: "done: wrote linked/note" in screen(server, cli, "t"), "the second write")
    assert (worktree / "linked").is_symlink()
    assert (worktree / "sub" / "note").read_text() == "through the link\n"
    assert not (kept / "linked" / "note").exists()
    assert cli("send", "t", "write cachedir/more kept").code == 0
    eventually(lambda: "done: wrote cachedir/more" in screen(server, cli, "t"), "the third")
    assert sorted(p.name for p in (kept / "cachedir").iterdir()) == ["more", "tags"]


def test_a_private_name_over_your_tracked_directory_is_not_bound(
    repo: Path, cli, agents, server
) -> None:
    """(From a hostile review.) Bound over a tracked directory, the agent saw it empty, and
    its ordinary `git commit -a` deleted the directory from the branch."""
    from tests.conftest import FAKE

    (repo / "cachedir").mkdir()
    (repo / "cachedir" / "source.py").write_text("print('mine')\n")
    git(repo, "add", "cachedir")
    git(repo, "commit", "-qm", "tracked dir")
    agents()
    home = Path(os.environ["LANEBOARD_HOME"])
    wrapper = ["sh", "-c", 'git status --porcelain > seen.txt; git commit -qam turn; exec "$@"']
    (home / "config.toml").write_text(
        f"[agents]\n[agents.profiles.claude]\ncommand = {json.dumps([*wrapper, 'sh', *FAKE])}\n"
        'private = ["cachedir"]\n'
    )
    worktree = repo / ".worktrees" / "t"
    assert cli("new", "t").code == 0
    eventually(lambda: agent_state(cli, "t") == "idle", "idle")
    assert cli("pause", "t").code == 0
    assert " D cachedir/source.py" not in (worktree / "seen.txt").read_text()
    assert "cachedir/source.py" in git(worktree, "ls-tree", "-r", "--name-only", "HEAD")
    assert (worktree / "cachedir" / "source.py").read_text() == "print('mine')\n"


def test_an_empty_directory_of_yours_at_a_private_name_is_kept(
    repo: Path, cli, agents, server
) -> None:
    """(From a hostile review.) The warden removed any empty directory at the name, yours
    too; it removes only the one laneboard made."""
    agents("", 'private = ["cachedir"]')
    assert cli("new", "t", "--no-start").code == 0
    worktree = repo / ".worktrees" / "t"
    (worktree / "cachedir").mkdir()  # yours, before the agent ever ran
    assert cli("start", "t").code == 0
    eventually(lambda: agent_state(cli, "t") == "idle", "idle")
    assert cli("pause", "t").code == 0
    assert (worktree / "cachedir").is_dir()


def test_a_stubborn_agent_is_stopped_after_the_grace(
    repo: Path, cli, agents, server, monkeypatch: pytest.MonkeyPatch
) -> None:
    agents("stop_grace = 0.5", 'env = { FAKE_CLAUDE_IGNORE_TERM = "1" }')
    session = agent_with_helper(cli, server)
    began = time.monotonic()
    assert cli("pause", "t").code == 0
    assert time.monotonic() - began < 5
    assert _session_members(session) == []


def agent_with_helper(cli, server) -> int:  # type: ignore[no-untyped-def]
    """Task `t`'s agent, idle, with a helper of its own that ignores SIGTERM; its session."""
    assert cli("new", "t").code == 0
    eventually(lambda: agent_state(cli, "t") == "idle", "idle")
    pane = show(cli, "t")["pane"]["pane_id"]
    session = int(server.cmd("display-message", "-p", "-t", pane, "#{pane_pid}").stdout[0])
    assert cli("send", "t", "spawn").code == 0
    eventually(
        lambda: len(_session_members(session)) == 5,
        "the warden, bwrap, bwrap's init (the sandbox's PID namespace), the agent and its helper",
    )
    return session


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


def test_retain_and_pause_say_what_they_wait_for_while_an_agent_takes_its_grace(
    repo: Path, cli, agents, server
) -> None:
    agents("stop_grace = 3", 'env = { FAKE_CLAUDE_IGNORE_TERM = "1" }')
    for name, verb in (("r", "retain"), ("p", "pause")):
        assert cli("new", name).code == 0
        eventually(lambda n=name: agent_state(cli, n) == "idle", "idle")  # type: ignore[misc]
        done = cli(verb, name)
        assert done.code == 0, done.err
        assert f"{name}: waiting for its agent to quit (SIGTERM sent" in done.err, done.err
