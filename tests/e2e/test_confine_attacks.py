"""Confinement against an agent that tries (DESIGN.md section 5a), with real bwrap, real git and
a real tmux server on a private socket: every attack of issue 19's list, and each of its class,
from a confined lane command, from a confined agent's pane, and from a process that agent
starts with `setsid`; the legitimate work a task does passes in the same runs.

Each run executes one shell script of attempts and prints one line per attempt; the verdict is
the world outside (files, refs, objects, the ledger, the tmux server), compared before and
after, never the script's own word.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO_ROOT, doc, git, make_repo
from tests.e2e.test_runtime import eventually

pytestmark = pytest.mark.tmux

LANEBOARD = (
    f"PYTHONPATH={shlex.quote(str(REPO_ROOT))} {shlex.quote(sys.executable)} -P -m laneboard"
)


def attacks(facts: dict[str, str]) -> str:
    """The attempts, as one POSIX shell script: `try NAME CMD` runs CMD and prints whether the
    command itself reported success (for diagnostics only)."""
    f = {k: shlex.quote(v) for k, v in facts.items()}
    lb = LANEBOARD
    return f"""
try() {{ name=$1; shift; if ( eval "$@" ) >/dev/null 2>&1; then echo "$name: succeeded";
        else echo "$name: refused"; fi; }}
# 1. /proc of an outside process: the tmux server's root and cwd, any pid's root
try proc-server-root "echo x >> /proc/{f["tmux_pid"]}/root{f["root"]}/README.md"
try proc-server-cwd "ls /proc/{f["tmux_pid"]}/cwd"
try proc-any-root "for p in /proc/[0-9]*; do echo x >> \\$p/root{f["root"]}/README.md \\
    && exit 0; done; exit 1"
try proc-visible "test -e /proc/{f["tmux_pid"]}"
# 2. tmux: the server by its socket path, by name, by default
try tmux-path "tmux -S {f["tmux_socket"]} run-shell 'touch {f["root"]}/pwned-tmux'"
try tmux-name "tmux -L {f["tmux_name"]} run-shell 'touch {f["root"]}/pwned-tmux'"
try tmux-default "tmux set-option -g status off"
# 3. laneboard commands on what is not its own
try discard-sibling "{lb} discard b --force"
try finalize-sibling "{lb} finalize b --merge"
try review-mark-sibling "{lb} review b --mark"
try cancel-sibling "{lb} cancel b"
try restore "{lb} restore b"
try pause-sibling "{lb} pause b"
try exec-root "{lb} exec --root -- touch {f["root"]}/pwned-exec"
try exec-sibling "{lb} exec --lane b -- touch pwned-lane"
try child-of-sibling "{lb} new evil --parent b --no-start"
try other-repo "{lb} --repo {f["other"]} ls"
try other-repo-new "{lb} new evil2 --repo {f["other"]} --no-start"
# 4. refs that are not its own, by git and by plain files
try move-main "git update-ref refs/heads/main HEAD"
try move-main-file "git rev-parse HEAD > {f["common"]}/refs/heads/main"
try delete-sibling-branch "git branch -D lb/b/work"
try delete-sibling-file "rm {f["common"]}/refs/heads/lb/b/work"
try tag "git tag evil"
try delete-anchor "git update-ref -d refs/laneboard/finalized/kept"
try delete-anchor-file "rm {f["common"]}/refs/laneboard/finalized/kept"
try packed-refs "echo x >> {f["common"]}/packed-refs"
try remote-tracking "git update-ref refs/remotes/origin/main HEAD"
try new-top-branch "git branch evil-branch"
# 5. laneboard's state
try ledger "echo x >> {f["state"]}/ledger.sqlite3"
try sibling-events "echo done >> {f["state"]}/events/{f["sibling_id"]}.log"
try config "echo x >> {f["state"]}/config.toml"
try vault "ls {f["state"]}/vault"
# 6. objects and packs
try delete-objects "find {f["common"]}/objects -type f -delete"
try git-prune "{f["git"]} prune --expire=now"
try rewrite-pack "for p in {f["common"]}/objects/pack/*.pack; do echo x >> \\$p && exit 0; \\
    done; exit 1"
# and the rest of what every worktree shares
try sibling-worktree "echo x >> {f["sibling"]}/README.md"
try root-checkout "echo x >> {f["root"]}/README.md"
try hooks "echo 'touch {f["root"]}/pwned-hook' > {f["common"]}/hooks/post-commit"
try config-file "git config core.fsmonitor 'touch {f["root"]}/pwned-fsmonitor'"
try other-repo-file "echo x >> {f["other"]}/README.md"
try own-ref-marker "rm -f {f["common"]}/refs/heads/lb/a/.laneboard-keep"
try tiocsti "python3 -c 'import fcntl, termios; fcntl.ioctl(0, termios.TIOCSTI, b\"x\")'"
"""


def legit(facts: dict[str, str]) -> str:
    """What a task's own work needs, all of which must work inside (`set -e`)."""
    f = {k: shlex.quote(v) for k, v in facts.items()}
    return f"""
set -e
echo one > own.txt && git add own.txt && git commit -q -m one
git commit -q --amend -m one-amended
echo two > own.txt && git commit -q -am two
git reset -q --hard HEAD~1
git checkout -q -b lb/a/side && echo side > side.txt && git add side.txt && git commit -q -m side
git checkout -q lb/a/work && git rebase -q lb/a/side
git fetch -q {f["remote"]} main:lb/a/upstream
mkdir -p "$HOME/.cache/tool" && echo cached > "$HOME/.cache/tool/entry"
{LANEBOARD} signal --state working
echo legit-done
"""


def world(repo: Path, other: Path, state: Path, sibling_id: str) -> dict[str, Any]:
    """What the attacks must leave as it was."""
    refs = git(repo, "for-each-ref", "--format=%(refname) %(objectname)")
    store = repo / ".git" / "objects"
    objects = {
        str(p.relative_to(store)): hashlib.sha1(p.read_bytes()).hexdigest()
        for p in store.rglob("*")
        if p.is_file() and p.parent.name != "info"
    }
    events = state / "events" / f"{sibling_id}.log"
    return {
        "root": (repo / "README.md").read_bytes(),
        "sibling": (repo / ".worktrees" / "b" / "README.md").read_bytes(),
        "other": (other / "README.md").read_bytes(),
        "config": (repo / ".git" / "config").read_bytes(),
        "hooks": sorted(p.name for p in (repo / ".git" / "hooks").iterdir()),
        "packed": (repo / ".git" / "packed-refs").read_bytes(),
        "refs": [r for r in refs.splitlines() if "/lb/a/" not in r],
        "objects": objects,
        "events": events.read_bytes() if events.exists() else b"",
        "pwned": sorted(p.name for p in repo.iterdir() if p.name.startswith("pwned")),
        "marker": (repo / ".git" / "refs" / "heads" / "lb" / "a" / ".laneboard-keep").exists(),
    }


@pytest.fixture
def arena(repo: Path, cli, agents, server, tmp_path: Path, shared: Path) -> dict[str, Any]:
    """Tasks `a` (the attacker) and `b` (its sibling) in `repo`, another registered repository,
    a finalize anchor and packed refs to attack, a remote to fetch from."""
    other = make_repo(tmp_path / "other")
    assert cli("init", cwd=other).code == 0
    b = doc(cli("new", "b", "--no-start", "--json"))
    doc(cli("new", "a", "--no-start", "--json"))
    assert cli("exec", "--lane", "a", "--", "true").code == 0  # its ref directory is made
    git(repo, "update-ref", "refs/laneboard/finalized/kept", "HEAD")
    git(repo, "pack-refs", "--all")
    git(repo, "repack", "-q", "-d")  # a pack to rewrite
    remote = shared / "remote.git"  # where the task sees it (the rest of /tmp is private)
    git(shared, "init", "-q", "--bare", str(remote))
    git(repo, "push", "-q", str(remote), "main")
    (repo / ".git" / "hooks").mkdir(exist_ok=True)
    state = Path(os.environ["LANEBOARD_HOME"])
    server.cmd("new-session", "-d", "-s", "bystander")  # the user's own session on it
    socket = str(Path("/tmp") / f"tmux-{os.getuid()}" / server.socket_name)
    assert Path(socket).exists()
    facts = {
        "root": str(repo),
        "common": str(repo / ".git"),
        "sibling": str(repo / ".worktrees" / "b"),
        "sibling_id": b["id"],
        "other": str(other),
        "state": str(state),
        "tmux_pid": server.cmd("display-message", "-p", "#{pid}").stdout[0],
        "tmux_socket": socket,
        "tmux_name": server.socket_name,
        "git": subprocess.run(
            ["sh", "-c", "command -v git"], capture_output=True, text=True
        ).stdout.strip(),
        "remote": str(remote),
    }
    return {"facts": facts, "other": other, "state": state, "sibling_id": b["id"]}


def _script(home: Path, name: str, body: str) -> Path:
    path = home / f"{name}.sh"  # the home is the task's too: the sandbox sees it
    path.write_text(body)
    return path


def _check(repo: Path, arena: dict[str, Any], before: dict[str, Any], report: str) -> None:
    after = world(repo, arena["other"], arena["state"], arena["sibling_id"])
    # New objects (the task's own work, moved into the store) may come; none may go or change.
    lost = {k: v for k, v in before["objects"].items() if after["objects"].get(k) != v}
    assert not lost, f"objects deleted or rewritten: {sorted(lost)}"
    before, after = dict(before, objects=None), dict(after, objects=None)
    changed = {k: (before[k], after[k]) for k in before if before[k] != after[k]}
    assert not changed, f"the attacks changed {sorted(changed)}:\n{report}"
    assert git(repo, "fsck", "--no-progress", "--no-dangling") == ""
    assert "legit-done" in report, report
    # The legitimate work landed, in the common store, on its own branches.
    assert git(repo, "log", "-1", "--format=%s", "lb/a/work") == "side"
    assert git(repo, "rev-parse", "lb/a/upstream") == git(repo, "rev-parse", "main")


def test_attacks_from_a_confined_lane_command_all_fail(repo: Path, cli, arena, tmp_path) -> None:  # type: ignore[no-untyped-def]
    home = Path(os.environ["HOME"])
    before = world(repo, arena["other"], arena["state"], arena["sibling_id"])
    script = _script(home, "attack", attacks(arena["facts"]) + legit(arena["facts"]))
    done = cli("exec", "--lane", "a", "--", "sh", str(script))
    assert done.code == 0, done.out + done.err
    _check(repo, arena, before, done.out + done.err)


@pytest.mark.parametrize("how", ["agent", "setsid"])
def test_attacks_from_a_confined_agent_and_what_it_starts_all_fail(
    repo: Path, cli, arena, server, how: str
) -> None:  # type: ignore[no-untyped-def]
    home = Path(os.environ["HOME"])
    report = home / "report.txt"
    before = world(repo, arena["other"], arena["state"], arena["sibling_id"])
    script = _script(home, "attack", attacks(arena["facts"]) + legit(arena["facts"]))
    run = f"sh {shlex.quote(str(script))} > {report} 2>&1; touch {home}/finished"
    if how == "setsid":  # a daemon of the agent's: its own session, outliving nothing
        run = f"setsid -f sh -c {shlex.quote(run)}"
    started = cli("start", "a", "--cmd", f"sh -c {shlex.quote(run + '; sleep 300')}")
    assert started.code == 0, started.err
    assert doc(cli("show", "a", "--json"))["confined"] is True
    eventually(lambda: (home / "finished").exists(), "the attacks ran", 120)
    _check(repo, arena, before, report.read_text())
    # Stopping the task stops every process of its sandbox, its setsid daemon included.
    assert cli("retain", "a").code == 0
    eventually(lambda: not _sandboxed(home), "no process of the sandbox left", 30)


def _sandboxed(home: Path) -> list[int]:
    """Processes still running the attack script (found by its path in their command line)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                line = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if str(home / "attack.sh").encode() in line:
                found.append(int(entry.name))
    return found


def test_attacks_through_mcp_are_refused_with_the_command_lines_words(
    repo: Path, cli, arena, workers
) -> None:  # type: ignore[no-untyped-def]
    """The MCP server an agent starts inside its sandbox reaches laneboard only through its
    channel: a sibling, a parent, itself where only children count, another repository."""
    home = Path(os.environ["HOME"])
    out = home / "mcp.json"
    calls = [
        ("status", {"name": "b"}),
        ("cancel", {"name": "b"}),
        ("review", {"name": "b"}),
        ("send", {"name": "b", "text": "rm -rf /", "when_idle": False}),
        ("wait", {"names": ["b"], "timeout": 1}),
        ("cancel", {"name": "a"}),
    ]
    steps = f"mcpcalls {out} {json.dumps(calls)}"
    started = cli("start", "a", "--agent", "worker", "--prompt", steps)
    assert started.code == 0, started.err
    eventually(lambda: out.exists(), "the MCP calls ran", 120)
    results = json.loads(out.read_text())
    assert [r.get("error") is not None for r in results] == [True] * len(calls), results
    for result in results[:5]:
        assert "refused from a's sandbox" in result["error"], results
    assert "is not a task below a" in results[5]["error"]
    assert doc(cli("show", "b", "--json"))["state"] == "provisioned"
    # the same words from the command line inside
    code = home / "cli.code"
    assert cli("retain", "a").code == 0
    assert cli("start", "a", "--agent", "worker", "--prompt", f"run {code} cancel b").code == 0
    eventually(lambda: code.exists(), "the command ran", 60)
    assert code.read_text() == "1"


def test_the_channel_refuses_bad_input_with_one_line_and_stays_up(
    repo: Path, cli, arena, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    """Garbage, a frame too long, a request cut short, a request that is not JSON, an unknown
    request, a lease for another lane, `exec` asked to run outside: each gets one refusal and
    the connection closes; the next good request is still served."""
    home = Path(os.environ["HOME"])
    probe = home / "probe.py"
    probe.write_text(PROBE)
    done = cli("exec", "--lane", "a", "--", sys.executable, str(probe))
    assert done.code == 0, done.out + done.err
    lines = dict(line.split(": ", 1) for line in done.out.splitlines())
    assert lines["garbage"].startswith("refused: not a laneboard channel frame"), lines
    assert "the limit is" in lines["huge"], lines
    assert lines["cut"] == "closed", lines
    assert "not JSON" in lines["not-json"], lines
    assert "unknown request" in lines["unknown"], lines
    assert "not a's" in lines["other-lane"], lines
    assert lines["whoami"].startswith('{"task"'), lines
    assert lines["exec-root"].startswith('{"exit": 1}'), lines  # exec runs inside, never outside
    assert "it is not run outside" in lines["exec-root"], lines


PROBE = r"""
import json, os, socket, struct
path = os.environ["LANEBOARD_CHANNEL"]
def talk(name, data):
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    s.sendall(data)
    if name == "cut":
        s.close()
        print(f"{name}: closed")
        return
    got = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        got += chunk
    s.close()
    if len(got) < 5:
        print(f"{name}: nothing")
        return
    err = b""
    while got:  # a command's output (O, E frames), then one JSON frame
        size = struct.unpack(">I", got[1:5])[0]
        kind, payload, got = got[:1], got[5:5 + size], got[5 + size:]
        if kind == b"E":
            err += payload
    body = json.loads(payload)
    said = f"refused: {body['refused']}" if "refused" in body else json.dumps(body)
    print(f"{name}: {said} {err.decode().strip()}".rstrip())
def frame(kind, payload):
    return kind + struct.pack(">I", len(payload)) + payload
talk("garbage", b"GET / HTTP/1.0\r\n\r\n")
talk("huge", b"J" + struct.pack(">I", 1 << 30) + b"{")
talk("cut", b"J" + struct.pack(">I", 100) + b"{")
talk("not-json", frame(b"J", b"{not json"))
talk("unknown", frame(b"J", json.dumps({"op": "shell", "argv": ["sh"]}).encode()))
talk("other-lane", frame(b"J", json.dumps({"op": "lease", "lane": "b", "argv": ["true"]}).encode()))
talk("whoami", frame(b"J", json.dumps({"op": "whoami"}).encode()))
root = {"op": "run", "argv": ["exec", "--root", "--", "true"]}
talk("exec-root", frame(b"J", json.dumps(root).encode()))
"""


def test_a_confined_command_cannot_type_into_the_terminal_it_returns_to(
    repo: Path, cli, arena, server, shared: Path
) -> None:  # type: ignore[no-untyped-def]
    """TIOCSTI pushes bytes into a terminal's input as if typed: a lane command run from your
    shell could queue a command that your shell reads after it returns (CVE-2017-5226). The
    seccomp filter refuses it (and TIOCLINUX)."""
    planted = shared / "pwned-tiocsti"
    typed = f"touch {planted}\n"
    inject = (
        "import fcntl, termios, sys\n"
        f"for c in {typed.encode()!r}:\n"
        "    try:\n"
        "        fcntl.ioctl(0, termios.TIOCSTI, bytes([c]))\n"
        "    except OSError as err:\n"
        "        print('refused', err); sys.exit(0)\n"
    )
    script = shared / "inject.py"
    script.write_text(inject)
    operator = shared / "operator.sh"
    operator.write_text(
        f"cd {shlex.quote(str(repo))} && {LANEBOARD} exec --lane a -- "
        f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}; echo returned\n"
    )
    pane = server.cmd("new-window", "-P", "-F", "#{pane_id}", "sh").stdout[0]
    server.cmd("send-keys", "-t", pane, f"sh {operator}", "Enter")

    def screen() -> str:
        return "\n".join(server.cmd("capture-pane", "-p", "-t", pane).stdout)

    eventually(lambda: "returned" in screen(), "the lane command returned", 60, screen)
    server.cmd("send-keys", "-t", pane, "echo settled", "Enter")
    eventually(lambda: screen().count("settled") >= 2, "the shell read on", 30, screen)
    assert "refused" in screen(), screen()
    assert not planted.exists(), screen()


def _accepting(listener: Any, heard: list[bool]) -> None:
    """Notes a connection to `listener`; ends quietly when the test closes it."""
    with contextlib.suppress(OSError):
        heard.append(bool(listener.accept()))


def test_no_command_runner_is_reachable_wherever_it_listens(
    repo: Path, cli, arena, shared: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """The session bus and service manager in `$XDG_RUNTIME_DIR`, a tmux server in
    `$TMUX_TMPDIR`, one whose socket is named by path (here in the home, which the sandbox
    otherwise keeps), and any server with a socket somewhere in /tmp (an X server, an editor's
    server): none is reachable from inside."""
    import socket
    import threading

    home = Path(os.environ["HOME"])
    runtime, tmux_dir, socket_dir = home / "run", home / "tmuxtmp", home / "sockets"
    for directory in (runtime, tmux_dir, socket_dir):
        directory.mkdir(mode=0o700)
    heard: list[bool] = []
    listeners = []
    for path in (runtime / "bus", tmp_path / "X0"):
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(str(path))
        listener.listen(4)
        listeners.append(listener)
        threading.Thread(target=_accepting, args=(listener, heard), daemon=True).start()
    named = socket_dir / "named.sock"
    env = {**os.environ, "TMUX_TMPDIR": str(tmux_dir)}
    for where in (["-L", "byname"], ["-S", str(named)]):
        subprocess.run(["tmux", *where, "new-session", "-d", "sleep", "300"], env=env, check=True)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    monkeypatch.setenv("TMUX_TMPDIR", str(tmux_dir))
    monkeypatch.setenv("LANEBOARD_TMUX_SOCKET", str(named))
    planted = shared / "pwned-runner"
    script = shared / "runners.sh"
    script.write_text(
        f"""
python3 -c 'import socket; socket.socket(socket.AF_UNIX).connect("{runtime}/bus")' \
    && echo bus-reached
python3 -c 'import socket; socket.socket(socket.AF_UNIX).connect("{tmp_path}/X0")' \
    && echo x-reached
tmux -L byname run-shell 'touch {planted}' && echo tmux-by-name-reached
tmux -S {named} run-shell 'touch {planted}' && echo tmux-by-path-reached
ls {runtime} {tmux_dir} {socket_dir}
true
"""
    )
    try:
        done = cli("exec", "--lane", "a", "--", "sh", str(script))
        assert done.code == 0, done.err
        assert "reached" not in done.out, done.out
        assert not planted.exists() and not heard, done.out
    finally:
        for where in (["-L", "byname"], ["-S", str(named)]):
            subprocess.run(["tmux", *where, "kill-server"], env=env, check=False)
        for listener in listeners:
            listener.close()


def plants(facts: dict[str, str]) -> str:
    """What a task can leave in what it owns for laneboard's own work outside to trip on (found
    by a hostile review): a symbolic ref in its namespace naming `main`, its HEAD on a sibling's
    branch, a FIFO where a pack goes, its objects' `info` a link into the root checkout, a
    rewritten `.git` file or admin dir, a fsmonitor in git's global config, escapes in what
    laneboard prints."""
    f = {k: shlex.quote(v) for k, v in facts.items()}
    esc = "\\033]0;pwned\\007\\033[2J"
    return f"""
try() {{ name=$1; shift; if ( eval "$@" ) >/dev/null 2>&1; then echo "$name: succeeded";
        else echo "$name: refused"; fi; }}
try symref "git symbolic-ref refs/heads/lb/a/evil refs/heads/main"
try message "{LANEBOARD} signal --message \\"$(printf '{esc}message')\\""
try fifo-pack "mkfifo \\"$GIT_OBJECT_DIRECTORY/pack/pack-0.pack\\""
try marker-link "n=0; until rm -rf \\"$GIT_OBJECT_DIRECTORY/info\\" && \\
    ln -s {f["root"]} \\"$GIT_OBJECT_DIRECTORY/info\\"; do n=\\$((n+1)); \\
    [ \\$n -ge 20 ] && exit 1; sleep 0.1; done"
try after-link "echo more > more.txt && git add more.txt && git commit -q -m more"
try marker-file-link "ln -sf {f["root"]}/README.md \\"$GIT_OBJECT_DIRECTORY/info/laneboard-moved\\""
try escapes "git commit -q --allow-empty -m \\"$(printf '{esc}subject')\\""
try global-config "printf '[core]\\\\n\\\\tfsmonitor = touch {f["root"]}/pwned-global\\\\n' \\
    >> \\"$GIT_CONFIG_GLOBAL\\""
try dot-git "echo 'gitdir: {f["sibling_admin"]}' > .git"
try commondir "echo {f["other"]}/.git > {f["admin"]}/commondir"
try gitdir "echo {f["other"]}/.git > {f["admin"]}/gitdir"
"""


def _pointers(repo: Path) -> dict[str, bytes]:
    """What points git at a task's repository: its worktree's `.git` file, its admin dir's
    `commondir` and `gitdir`."""
    admin = repo / ".git" / "worktrees" / "a"
    return {
        ".git": (repo / ".worktrees" / "a" / ".git").read_bytes(),
        **{name: (admin / name).read_bytes() for name in ("commondir", "gitdir")},
    }


def test_what_a_task_plants_does_not_turn_laneboards_own_work_against_others(
    repo: Path, cli, arena
) -> None:  # type: ignore[no-untyped-def]
    """The task plants, then the operator lists, shows, rebases and discards it: `main`, the
    sibling's branch and checkout, the root checkout and git's global config stay as they
    were; no command hangs; nothing laneboard prints carries the task's escapes."""
    home = Path(os.environ["HOME"])
    report = home / "report.txt"
    facts = dict(
        arena["facts"],
        admin=str(repo / ".git" / "worktrees" / "a"),
        sibling_admin=str(repo / ".git" / "worktrees" / "b"),
    )
    script = _script(home, "plant", plants(facts))
    global_config = Path(os.environ["GIT_CONFIG_GLOBAL"])
    kept = {
        "refs": [r for r in git(repo, "for-each-ref").splitlines() if "/lb/a/" not in r],
        "sibling": git(repo / ".worktrees" / "b", "status", "--porcelain", "--branch"),
        "root": sorted(p.name for p in repo.iterdir()),
        "readme": (repo / "README.md").read_bytes(),
        "global": global_config.read_bytes(),
        "admin": _pointers(repo),
    }
    run = f"sh {shlex.quote(str(script))} > {report} 2>&1; touch {home}/finished"
    assert cli("start", "a", "--cmd", f"sh -c {shlex.quote(run)}").code == 0
    eventually(lambda: (home / "finished").exists(), "the task planted", 120)
    said = report.read_text()
    assert _pointers(repo) == kept["admin"], said  # git outside still finds this repository
    git(repo, "commit", "-q", "--allow-empty", "-m", "main moves on")  # something to rebase on
    kept["refs"] = [r for r in git(repo, "for-each-ref").splitlines() if "/lb/a/" not in r]
    printed = [cli("ls"), cli("show", "a"), cli("log", "a")]
    shown = "".join(r.out + r.err for r in printed)
    assert "\x1b" not in shown and "\x07" not in shown
    assert "?]0;pwned??[2Jsubject" in shown, said + shown  # shown, and harmless
    # Its branch a symbolic ref to the sibling's: the rebase that follows is git in the task's
    # sandbox, so the sibling's branch cannot move whatever its own refs name.
    linked = cli("exec", "--lane", "a", "--", "sh", "-c", "git symbolic-ref refs/heads/lb/a/work "
                 "refs/heads/lb/b/work && git read-tree -u --reset HEAD")  # fmt: skip
    assert linked.code == 0, linked.err
    rebased = cli("rebase", "a")
    assert rebased.code == 1 and "the rebase stopped" in rebased.err, rebased.err
    assert cli("exec", "--lane", "a", "--", "git", "rebase", "--abort").code == 0
    discarded = cli("discard", "a", "--force")
    assert discarded.code == 0, discarded.err
    refs = git(repo, "for-each-ref").splitlines()
    assert set(kept["refs"]) <= set(refs), said  # laneboard adds its keeping refs; none go
    heads = [r for r in refs if "refs/heads/" in r and "/lb/a/" not in r]
    assert heads == [r for r in kept["refs"] if "refs/heads/" in r]
    assert git(repo / ".worktrees" / "b", "status", "--porcelain", "--branch") == kept["sibling"]
    assert sorted(p.name for p in repo.iterdir()) == kept["root"], said
    assert (repo / "README.md").read_bytes() == kept["readme"], said
    assert global_config.read_bytes() == kept["global"], said
    assert git(repo, "fsck", "--no-progress", "--no-dangling") == ""
    # last, so that a failure above names what the plants did
    for planted in ("escapes", "symref", "marker-link", "marker-file-link", "fifo-pack"):
        assert f"{planted}: succeeded" in said, said


def test_a_parent_whose_branch_names_main_cannot_have_a_child_finalized_into_main(
    repo: Path, cli, arena
) -> None:  # type: ignore[no-untyped-def]
    """A child task lands on its parent's branch. The parent makes its branch a symbolic ref
    to `main` (its namespace is its own to write): finalizing the child moves the parent's
    ref itself, never what it names."""
    child = doc(cli("new", "c", "--parent", "a", "--no-start", "--json"))
    assert child["target"] == "lb/a/work", child
    main = git(repo, "rev-parse", "main")
    work = "echo c > c.txt && git add c.txt && git commit -qm c"
    assert cli("exec", "--lane", "c", "--", "sh", "-c", work).code == 0
    linked = cli("exec", "--lane", "a", "--", "git", "symbolic-ref", "refs/heads/lb/a/work",
                 "refs/heads/main")  # fmt: skip
    assert linked.code == 0, linked.err
    assert cli("review", "c", "--mark").code == 0
    refused = cli("finalize", "c", "--merge")
    assert refused.code == 1 and "symbolic ref to refs/heads/main" in refused.err, refused.err
    assert git(repo, "rev-parse", "main") == main


def test_what_runs_code_outside_cannot_be_planted_in_the_home(
    repo: Path, cli, arena, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """The home is the task's to write (tools keep caches there), but not what laneboard, git,
    tmux, ssh or your next shell run from it: a directory on PATH (`~/.local/bin/git` would run
    for laneboard outside), git's global config (`core.fsmonitor`), `~/.ssh/config`
    (`ProxyCommand`), tmux's config (`run-shell`), the shell startup files that exist."""
    monkeypatch.delenv("GIT_CONFIG_GLOBAL")  # git reads the home's own files
    home = Path(os.environ["HOME"])
    bin_dir, never_made = home / ".local" / "bin", home / "bin"
    bin_dir.mkdir(parents=True)
    path = os.pathsep.join([str(bin_dir), str(never_made), os.environ["PATH"]])
    monkeypatch.setenv("PATH", path)
    (home / ".bashrc").write_text("# yours\n")
    targets = [
        bin_dir / "git", never_made / "git", home / ".gitconfig",
        home / ".config" / "git" / "config", home / ".ssh" / "config", home / ".tmux.conf",
        home / ".config" / "tmux" / "tmux.conf", home / ".bashrc",
    ]  # fmt: skip
    plant = " ".join(
        f"mkdir -p {shlex.quote(str(t.parent))}; echo planted >> {shlex.quote(str(t))};"
        for t in targets
    )
    done = cli("exec", "--lane", "a", "--", "sh", "-c", plant + " echo cache > ~/.cache-entry")
    assert done.code == 0, done.err
    assert (home / ".cache-entry").read_text() == "cache\n"  # the home is writable
    for target in targets:
        assert not target.exists() or "planted" not in target.read_text(), target
