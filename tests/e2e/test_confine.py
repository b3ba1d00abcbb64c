"""Confinement with real bwrap, real git and a real tmux server on a private socket: a confined
command cannot write the root checkout, a sibling worktree or the shared git metadata, and can
do everything a task's own work needs; the policy says when a task runs unconfined, and
`required` refuses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, git
from tests.e2e.test_runtime import eventually
from tests.procs import started


def inside(cli, task: str, script: str) -> tuple[int, str]:  # type: ignore[no-untyped-def]
    done = cli("exec", "--lane", task, "--", "sh", "-c", script)
    return done.code, done.err


def snapshot(paths: list[Path]) -> dict[str, bytes | None]:
    found: dict[str, bytes | None] = {}
    for top in paths:
        for directory, _, names in os.walk(top):
            for name in names:
                path = Path(directory) / name
                found[str(path)] = path.read_bytes() if path.is_file() else None
    return found


@pytest.fixture
def tasks(repo: Path, cli) -> Path:  # type: ignore[no-untyped-def]
    for name in ("a", "b"):
        assert cli("new", name, "--no-start").code == 0
    # A first confined run prepares what stays read-only (the task's empty config.worktree).
    assert cli("exec", "--lane", "a", "--", "true").code == 0
    (repo / ".git" / "hooks").mkdir(exist_ok=True)
    (repo / ".git" / "hooks" / "existing").write_text("#!/bin/sh\n")
    return repo


TARGETS = {
    "root checkout": "README.md",
    "sibling worktree": ".worktrees/b/README.md",
    "shared config": ".git/config",
    "hooks": ".git/hooks/existing",
    "info": ".git/info/exclude",
    "another task's admin dir": ".git/worktrees/b/HEAD",
    "packed-refs": ".git/packed-refs",
}


@pytest.mark.parametrize("where", sorted(TARGETS))
def test_a_confined_command_cannot_write_outside_its_worktree(tasks: Path, cli, where: str) -> None:  # type: ignore[no-untyped-def]
    """Create a file beside it, change it, delete it: each attempt is refused by the kernel
    (read-only file system) and nothing there changes. One confined run makes the three."""
    repo = tasks
    git(repo, "pack-refs", "--all")
    target = repo / TARGETS[where]
    fresh = target.parent / "planted"
    attempts = {
        "create": f"echo planted > '{fresh}'",
        "change": f"echo changed >> '{target}'",
        "delete": f"rm -f '{target}'",
    }
    script = "".join(
        f"if ( {attempt} ) 2>/dev/null; then echo '{how}: written'; "
        f"elif ( {attempt} ) 2>&1 | grep -q 'Read-only file system'; then echo '{how}: refused'; "
        f"else echo '{how}: failed otherwise'; fi; "
        for how, attempt in attempts.items()
    )
    before = snapshot([repo])
    done = cli("exec", "--lane", "a", "--", "sh", "-c", script)
    assert done.out.splitlines() == [f"{how}: refused" for how in attempts], done.out + done.err
    assert snapshot([repo]) == before


def test_it_can_commit_branch_and_fetch_in_its_own_worktree(tasks: Path, cli, shared: Path) -> None:  # type: ignore[no-untyped-def]
    repo = tasks
    remote = shared / "remote.git"
    git(shared, "init", "-q", "--bare", str(remote))
    git(repo, "push", "-q", str(remote), "main:refs/heads/upstream")
    code, err = inside(
        cli,
        "a",
        "echo work > work.txt && git add work.txt && git commit -q -m work && "
        "git branch lb/a/side && "
        f"git fetch -q {remote} upstream:lb/a/upstream && git fetch -q {remote} upstream && "
        'git worktree list >/dev/null && echo outside > "$HOME/outside.txt"',
    )
    assert code == 0, err
    worktree = repo / ".worktrees" / "a"
    assert git(worktree, "log", "-1", "--format=%s") == "work"
    assert git(repo, "rev-parse", "lb/a/side") == git(repo, "rev-parse", "lb/a/work")
    assert git(repo, "rev-parse", "lb/a/upstream") == git(repo, "rev-parse", "main")
    assert git(worktree, "rev-parse", "FETCH_HEAD") == git(repo, "rev-parse", "main")
    assert (Path(os.environ["HOME"]) / "outside.txt").read_text() == "outside\n"


def test_two_confined_agents_commit_at_once_and_both_land(
    tasks: Path, cli, server, shared: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    repo = tasks
    tmp_path = shared
    monkeypatch.setenv("LANEBOARD_TMUX_SOCKET", server.socket_name)
    for name in ("a", "b"):
        go = tmp_path / f"go-{name}"
        os.mkfifo(go)
        loop = (
            f"cat {go} >/dev/null; for i in $(seq 1 15); do echo $i > n.txt; git add n.txt; "
            f"git commit -q -m c$i || exit 1; done; touch {tmp_path}/{name}.done; sleep 60"
        )
        assert cli("start", name, "--cmd", f"sh -c '{loop}'").code == 0
        assert json.loads(cli("show", name, "--json").out)["confined"] is True
    for name in ("a", "b"):  # each waits on its own FIFO: they start together
        with open(tmp_path / f"go-{name}", "w") as fifo:
            fifo.write("go\n")

    def screens() -> str:
        return "\n".join(
            "\n".join(server.cmd("capture-pane", "-p", "-t", f"lb-repo:{n}").stdout) for n in "ab"
        )

    eventually(
        lambda: all((tmp_path / f"{n}.done").exists() for n in "ab"), "both done", 60, screens
    )
    for name in ("a", "b"):
        assert git(repo, "rev-list", "--count", f"main..lb/{name}/work") == "15"
    assert git(repo, "fsck", "--no-progress") == ""
    for name in ("a", "b"):
        assert cli("retain", name).code == 0


def test_two_confined_lane_commands_commit_at_once_and_both_land(tasks: Path, cli) -> None:  # type: ignore[no-untyped-def]
    repo = tasks
    loop = (
        "for i in $(seq 1 15); do echo $i > n.txt; git add n.txt; "
        "git commit -q -m c$i || exit 1; git branch -f lb/$LANEBOARD_LANE/side; done"
    )
    procs = [
        started(["exec", "--lane", name, "--", "sh", "-c", loop], repo, {}) for name in ("a", "b")
    ]
    for proc in procs:
        _out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    for name in ("a", "b"):
        assert git(repo, "rev-list", "--count", f"main..lb/{name}/work") == "15"
        assert git(repo, "rev-parse", f"lb/{name}/side") == git(
            repo, "rev-parse", f"lb/{name}/work"
        )


def test_gc_prune_and_worktree_changes_fail_inside_and_change_nothing(
    tasks: Path, cli, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    repo = tasks
    # A worktree deleted by hand leaves an admin dir that `git worktree prune` would remove.
    stale = tmp_path / "stale"
    git(repo, "worktree", "add", "-q", "--detach", str(stale))
    subprocess.run(["rm", "-rf", str(stale)], check=True)
    loose = git(repo, "hash-object", "-w", "--stdin")  # an unreachable loose object
    before = snapshot([repo / ".git"])
    real_git = subprocess.run(["sh", "-c", "command -v git"], capture_output=True, text=True)
    for script in (
        "git gc --prune=now",
        "git prune",
        "git repack -a -d",
        "git worktree prune",
        f"git worktree add {tmp_path}/new",
        "git worktree remove ../b",
        f"{real_git.stdout.strip()} gc --prune=now",  # past the guard: the mounts stop it
        f"{real_git.stdout.strip()} worktree prune",
        "git config core.hooksPath /tmp",
    ):
        code, err = inside(cli, "a", script)
        # git's own error (`worktree prune` reports the failed removal and still exits 0),
        # or the guard's line; either way nothing changed (checked below).
        assert "Read-only file system" in err or "not run inside a confined task" in err, err
        assert code != 0 or "worktree prune" in script, script
    assert snapshot([repo / ".git"]) == before
    assert (repo / ".git" / "objects" / loose[:2] / loose[2:]).exists() or loose in git(
        repo, "cat-file", "--batch-all-objects", "--batch-check=%(objectname)"
    )


def test_a_worktree_created_after_the_agent_started_is_protected_too(
    tasks: Path, cli, server, shared: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    repo = tasks
    tmp_path = shared
    monkeypatch.setenv("LANEBOARD_TMUX_SOCKET", server.socket_name)
    go, report = tmp_path / "go", tmp_path / "report"
    os.mkfifo(go)
    later = repo / ".worktrees" / "later" / "README.md"
    script = (
        f"cat {go} >/dev/null; "
        f"if echo x >> {later}; then echo wrote > {report}; else echo refused > {report}; fi; "
        "sleep 60"
    )
    done = cli("start", "a", "--cmd", f"sh -c '{script}'")
    assert done.code == 0, done.err
    assert json.loads(cli("show", "a", "--json").out)["confined"] is True
    assert cli("new", "later", "--no-start").code == 0
    with open(go, "w") as fifo:
        fifo.write("go\n")
    _wait(lambda: report.exists() and report.read_text().strip())
    assert report.read_text().strip() == "refused"
    assert later.read_text() == "hello\n"
    assert "confined:     yes" in cli("show", "a").out
    assert cli("retain", "a").code == 0


def _wait(check: Callable[[], object], deadline: float = 30.0) -> None:
    import time

    end = time.monotonic() + deadline
    while not check():
        assert time.monotonic() < end, "not reached"
        time.sleep(0.05)


# --- the policy -------------------------------------------------------------------------------


@pytest.fixture
def broken_bwrap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A bwrap that fails the way an AppArmor-restricted Ubuntu does."""
    fake = tmp_path / "fake-bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("LANEBOARD_BWRAP", str(fake))
    return fake


def test_auto_without_a_working_bwrap_runs_unconfined_and_says_why_everywhere(
    tasks: Path, cli, server, broken_bwrap: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    repo = tasks
    monkeypatch.setenv("LANEBOARD_TMUX_SOCKET", server.socket_name)
    done = cli("exec", "--lane", "a", "--", "sh", "-c", "echo ran > ran.txt")
    assert done.code == 0
    assert "runs unconfined: bwrap does not work here: bwrap: setting up uid map" in done.err
    assert "apparmor_restrict_unprivileged_userns" in done.err
    assert (repo / ".worktrees" / "a" / "ran.txt").exists()
    assert cli("start", "a", "--cmd", "sleep 60").code == 0
    task = json.loads(cli("show", "a", "--json").out)
    assert task["confined"] is False and "uid map" in task["confine_note"]
    assert "confined:     no: bwrap does not work here" in cli("show", "a").out
    assert "(unconfined)" in cli("ls").out
    findings = json.loads(cli("doctor", "--json").out)["findings"]
    kinds = {(f["kind"], f["task"]) for f in findings}
    assert ("unconfined", "a") in kinds and ("confinement-unavailable", None) in kinds
    assert cli("retain", "a").code == 0


def test_required_without_a_working_bwrap_refuses_to_run_anything_unconfined(
    tasks: Path, cli, server, broken_bwrap: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    repo = tasks
    monkeypatch.setenv("LANEBOARD_TMUX_SOCKET", server.socket_name)
    (repo / ".laneboard.toml").write_text('[confine]\nmode = "required"\n')
    refused = cli("exec", "--lane", "a", "--", "sh", "-c", "echo ran > ran.txt")
    assert refused.code == 1 and "confine.mode is required, but bwrap does not work" in refused.err
    assert not (repo / ".worktrees" / "a" / "ran.txt").exists()
    start = cli("start", "a", "--cmd", "sleep 60")
    assert start.code == 1 and "no agent started: confine.mode is required" in start.err
    assert json.loads(cli("show", "a", "--json").out)["state"] == "provisioned"
    assert server.cmd("list-panes", "-a").stdout == []


def test_off_runs_unconfined_on_purpose(tasks: Path, cli) -> None:  # type: ignore[no-untyped-def]
    repo = tasks
    (repo / ".laneboard.toml").write_text('[confine]\nmode = "off"\n')
    done = cli("exec", "--lane", "a", "--", "sh", "-c", f"echo x >> {repo}/README.md")
    assert done.code == 0 and "confine.mode is off" in done.err
    assert (repo / "README.md").read_text() == "hello\nx\n"


def test_the_probe_runs_once_and_is_cached(
    tasks: Path, cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    calls = tmp_path / "calls"
    real = subprocess.run(["sh", "-c", "command -v bwrap"], capture_output=True, text=True)
    counting = tmp_path / "counting-bwrap"
    counting.write_text(f'#!/bin/sh\necho x >> {calls}\nexec {real.stdout.strip()} "$@"\n')
    counting.chmod(0o755)
    monkeypatch.setenv("LANEBOARD_BWRAP", str(counting))
    for _ in range(3):
        assert cli("exec", "--lane", "a", "--", "true").code == 0
    assert len(calls.read_text().splitlines()) == 1 + 3  # one probe, then one run each


def test_a_bad_confine_mode_is_refused_with_its_field(tasks: Path, cli) -> None:  # type: ignore[no-untyped-def]
    (tasks / ".laneboard.toml").write_text('[confine]\nmode = "sometimes"\n')
    refused = cli("exec", "--lane", "a", "--", "true")
    assert refused.code == 1 and "confine.mode" in refused.err
    assert "Traceback" not in refused.err


def test_worktrees_outside_the_root_are_read_only_too(repo: Path, cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (repo / ".laneboard.toml").write_text('[worktrees]\narea = "sibling"\n')
    git(repo, "add", ".laneboard.toml")
    git(repo, "commit", "-q", "-m", "sibling area")
    for name in ("a", "b"):
        assert cli("new", name, "--no-start").code == 0
    users = tmp_path / "users-own-checkout"
    git(repo, "worktree", "add", "-q", "-b", "mine", str(users))
    area = repo.parent / f"{repo.name}.worktrees"
    before = snapshot([area / "b", users])
    for path in (area / "b" / "README.md", users / "README.md", area / "planted"):
        code, err = inside(cli, "a", f"echo x >> '{path}'")
        assert code != 0 and "Read-only file system" in err, path
    assert snapshot([area / "b", users]) == before
    assert not (area / "planted").exists()
    code, err = inside(cli, "a", "echo mine >> README.md && git commit -qam mine")
    assert code == 0, err


def test_a_bwrap_that_does_not_confine_is_not_trusted(
    tasks: Path, cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    # It runs the command but ignores every mount: the probe's write into the read-only
    # directory succeeds, so laneboard says bwrap does not work rather than trusting it.
    fake = tmp_path / "lax-bwrap"
    fake.write_text('#!/bin/sh\nwhile [ "$1" != "--" ]; do shift; done; shift; exec "$@"\n')
    fake.chmod(0o755)
    monkeypatch.setenv("LANEBOARD_BWRAP", str(fake))
    (tasks / ".laneboard.toml").write_text('[confine]\nmode = "required"\n')
    refused = cli("exec", "--lane", "a", "--", "true")
    assert refused.code == 1 and "bwrap does not work here" in refused.err


def test_the_confined_variable_alone_does_not_skip_confinement(
    tasks: Path, cli, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    task_id = json.loads(cli("show", "a", "--json").out)["id"]
    monkeypatch.setenv("LANEBOARD_CONFINED", task_id)  # as a stray parent could set it
    code, err = inside(cli, "a", f"echo x >> {tasks}/README.md")
    assert code != 0 and "Read-only file system" in err


def test_a_lane_command_from_a_confined_command_is_not_confined_twice(tasks: Path, cli) -> None:  # type: ignore[no-untyped-def]
    nested = (
        f"{sys.executable} -P -m laneboard exec --lane a -- sh -c 'echo x >> {tasks}/README.md'"
    )
    code, err = inside(cli, "a", f"PYTHONPATH={REPO_ROOT} {nested}")
    assert code != 0 and "Read-only file system" in err
    assert err.count("runs unconfined") == 0


def test_laneboards_own_state_is_hidden_inside_but_what_the_task_uses(tasks: Path, cli) -> None:  # type: ignore[no-untyped-def]
    """The state dir is masked: the ledger, caches, the probe's verdict, the config, other
    tasks' files are not there; the guard and the task's own event file are lent back (the
    guard read-only, the event file writable)."""
    repo = tasks
    (repo / ".laneboard.toml").write_text('[confine]\nmode = "required"\n')
    assert cli("exec", "--lane", "a", "--", "true").code == 0  # caches config and probe
    state = Path(os.environ["LANEBOARD_HOME"])
    task = json.loads(cli("show", "a", "--json").out)["id"]
    before = {p: p.read_bytes() for p in state.rglob("*") if p.is_file() and "logs" not in p.parts}
    kept = ("cache/confine.json", "cache/discovered.json", "cache/settings.json")
    for target in (*kept, "ledger.sqlite3", "config.toml", "cache/config"):
        code, err = inside(cli, "a", f"echo tampered >> {state / target}")
        assert code != 0, target
        assert "Read-only file system" in err or "Directory nonexistent" in err, err
    code, err = inside(cli, "a", f"echo tampered >> {state / 'confine/bin/git'}")
    assert code != 0 and "Read-only file system" in err
    code, err = inside(cli, "a", f"echo own >> {state / 'events' / (task + '.log')}")
    assert code == 0, err
    after = {p: p.read_bytes() for p in before if p.exists()}
    # (The ledger and the caches of what laneboard found change as laneboard works outside,
    # and the watcher notes its passes in the task's own object directory; nothing else.)
    changed = [p for p in before if after.get(p) != before[p] and "events" not in p.parts]
    ours = ("ledger", "discovered.json", "settings.json", "laneboard-moved")
    assert all(p.name.startswith(ours) for p in changed), changed
    code, _ = inside(cli, "a", f"echo x >> {repo}/README.md")
    assert code != 0  # still confined, still required
    assert cli("exec", "--lane", "a", "--", "sh", "-c", "echo ok > own.txt").code == 0


def test_a_task_cannot_plant_fsmonitor_for_git_runs_outside_its_confinement(
    tasks: Path, cli
) -> None:  # type: ignore[no-untyped-def]
    repo = tasks
    git(repo, "config", "extensions.worktreeConfig", "true")
    planted = repo.parent / "PWNED"
    code, _ = inside(cli, "a", f"git config --worktree core.fsmonitor 'touch {planted}; false'")
    assert code != 0  # config.worktree is mounted read-only (git cannot rename over it)
    assert (repo / ".git" / "worktrees" / "a" / "config.worktree").read_text() == ""
    assert cli("ls").code == 0 and cli("review", "a").code == 0
    assert not planted.exists()


def test_a_damaged_probe_cache_is_probed_again(tasks: Path, cli) -> None:  # type: ignore[no-untyped-def]
    cache = Path(os.environ["LANEBOARD_HOME"]) / "cache" / "confine.json"
    key = json.loads(cache.read_text())["key"]
    damaged = [
        "[1]",
        "null",
        '{"key": 1, "works": "false"}',
        "{",
        json.dumps({"key": key, "works": 0}),
    ]
    for text in damaged:
        cache.write_text(text)
        done = cli("exec", "--lane", "a", "--", "true")
        assert done.code == 0, done.err
        assert "unconfined" not in done.err, text


def test_no_ref_outside_ever_names_an_object_not_in_the_store(tasks: Path, cli) -> None:  # type: ignore[no-untyped-def]
    """A confined commit's objects go to the task's own directory and are moved into the
    store by laneboard; its ref update waits for that move, so your own git, reading the
    branch at any moment, always finds the commit (watched here while 30 commits land)."""
    repo = tasks
    ref = repo / ".git" / "refs" / "heads" / "lb" / "a" / "work"
    loop = "for i in $(seq 30); do echo $i > n.txt; git add n.txt; git commit -q -m c$i; done"
    proc = started(["exec", "--lane", "a", "--", "sh", "-c", loop], repo, {})
    missing, seen = [], set()
    while proc.poll() is None:
        sha = ref.read_text().strip() if ref.exists() else ""
        if sha and sha not in seen:
            seen.add(sha)
            found = subprocess.run(["git", "cat-file", "-e", sha], cwd=repo, check=False)
            if found.returncode != 0:
                missing.append(sha)
    assert proc.returncode == 0, proc.communicate()[1]
    assert len(seen) > 3 and missing == [], (len(seen), missing)
    assert git(repo, "rev-list", "--count", "main..lb/a/work") == "30"


def test_the_repositorys_own_hooks_still_run_inside(tasks: Path, cli, shared: Path) -> None:  # type: ignore[no-untyped-def]
    """laneboard's hooks directory inside passes every hook on to the repository's own."""
    repo = tasks
    log = shared / "hooks.log"
    for name in ("pre-commit", "commit-msg", "post-commit", "reference-transaction"):
        hook = repo / ".git" / "hooks" / name
        hook.write_text(f'#!/bin/sh\necho "{name} $1" >> {log}\n')
        hook.chmod(0o755)
    done = cli(
        "exec", "--lane", "a", "--", "sh", "-c", "echo x > x && git add x && git commit -qm x"
    )
    assert done.code == 0, done.err
    ran = log.read_text().splitlines()
    assert {"pre-commit ", "post-commit ", "reference-transaction prepared"} <= set(ran), ran
    assert "reference-transaction committed" in ran and any(r.startswith("commit-msg") for r in ran)


def test_a_task_cannot_turn_its_agents_private_cache_into_a_bind_of_your_files(
    repo: Path, cli, agents, server
) -> None:
    """A profile's `private` directory is bound into the agent's sandbox, writable, at every
    launch. Its source must lie where no sandbox writes: a task that could leave a symbolic
    link there would have its next launch bind any directory of yours (here the repository's
    root, read-only to it) into its sandbox, writable."""
    from tests.e2e.test_runtime import agent_state, screen, show

    agents("", 'private = ["cachedir"]')
    assert cli("new", "t").code == 0
    eventually(lambda: agent_state(cli, "t") == "idle", "idle")
    task_id = show(cli, "t")["id"]
    assert cli("pause", "t").code == 0
    target = repo / "yours"
    target.mkdir()
    home = Path(os.environ["LANEBOARD_HOME"])
    places = [
        home / "agentdata" / task_id / "private" / "cachedir",
        home / "agentdata" / task_id / "private",
        home / "private" / task_id / "cachedir",
        home / "private" / task_id,
    ]
    plant = "; ".join(
        f"rm -rf '{p}' 2>/dev/null; ln -s '{target}' '{p}' 2>/dev/null" for p in places
    )
    code, _err = inside(cli, "t", plant + "; true")
    assert code == 0
    assert cli("resume", "t").code == 0
    eventually(lambda: agent_state(cli, "t") == "idle", "idle after resume")
    assert cli("send", "t", "write cachedir/planted x").code == 0
    eventually(lambda: "done: wrote cachedir/planted" in screen(server, cli, "t"), "the write")
    assert list(target.iterdir()) == []
    assert (home / "private" / task_id / "cachedir" / "planted").read_text() == "x\n"
