"""One scenario for each safety check that had no test failing when the check is deleted: each
test here was run with its check deleted (or neutralised) and failed, and passes with it.

Real git in temporary directories, the laneboard CLI (in this process, or as a real process
when it must be killed or held), real bwrap. A moment that needs exact interleaving is held at
a `LANEBOARD_PAUSE` checkpoint or made by a `LANEBOARD_FAULT` crash; where no checkpoint lies
inside the step (a file changing while it is hashed, a ref taken while a snapshot is written),
the command runs in this process with the one function that step calls wrapped to act at that
moment. Nothing sleeps: every wait is on an event, with a deadline that only turns a hang into
a failure.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from laneboard.core.adapters import safefs, snapshot
from laneboard.core.adapters.db import Database, default_path
from laneboard.core.adapters.leases import LeaseStore
from laneboard.core.domain.lanes import LeaseState
from laneboard.core.operations.steps import snapshots
from tests.conftest import DEADLINE, git
from tests.procs import LANEBOARD, laneboard_env, started


def _show(cli, name: str) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    found = cli("show", name, "--json")
    assert found.code == 0, found.err
    document: dict[str, Any] = json.loads(found.out)
    return document


def _events(cli, name: str, kind: str) -> list[dict[str, Any]]:  # type: ignore[no-untyped-def]
    logged = json.loads(cli("log", name, "--json").out)["events"]
    return [e["data"] for e in logged if e["kind"] == kind]


def _worktrees(repo: Path) -> str:
    return git(repo, "worktree", "list", "--porcelain")


def _snapshots(repo: Path) -> list[str]:
    """The snapshot refs, oldest first (by their number)."""
    found = git(repo, "for-each-ref", "--format=%(refname)", "refs/laneboard/snapshots/")
    return sorted(found.splitlines(), key=lambda ref: int(ref.rsplit("/", 1)[1]))


def _saved(repo: Path, ref: str, name: str) -> bytes:
    """The bytes of `name` in the snapshot `ref`."""
    return subprocess.run(
        ["git", "cat-file", "blob", f"{ref}:{name}"], cwd=repo, capture_output=True, check=True
    ).stdout


@pytest.fixture
def task(repo: Path, cli) -> Path:  # type: ignore[no-untyped-def]
    """Task `t`, provisioned, with an untracked `notes.md` (so discarding it takes --force)."""
    assert cli("new", "t", "--no-start").code == 0
    worktree = repo / ".worktrees" / "t"
    (worktree / "notes.md").write_text("first draft\n")
    return worktree


# --- provisioning and its rollback ------------------------------------------------------------


def test_doctor_keeps_the_branch_under_a_worktree_it_keeps(repo: Path, cli) -> None:  # type: ignore[no-untyped-def]
    """Check (rollback `_undo`): a branch checked out in some worktree is kept. Here git was
    killed half-way through the checkout of an interrupted provisioning: `doctor --fix` keeps
    the incomplete worktree (not pristine, so not laneboard's to remove) and must keep the
    branch it has checked out, not delete it from under it."""
    crashed = cli("new", "w", "--no-start", env={"LANEBOARD_FAULT": "provision.after_branch"})
    assert crashed.code == -9
    task_id = _show(cli, "w")["id"]
    tip = git(repo, "rev-parse", "lb/w/work")
    worktree = repo / ".worktrees" / "w"
    reason = f"laneboard: initializing task {task_id}"
    git(repo, "worktree", "add", "-q", "--lock", "--reason", reason, str(worktree), "lb/w/work")
    (worktree / "README.md").unlink()  # the checkout never wrote it

    fixed = json.loads(cli("doctor", "--fix", "--json").out)["findings"]

    assert [(f["kind"], f["fixed"]) for f in fixed] == [
        ("interrupted-provisioning", "marked failed")
    ]
    assert worktree.is_dir()
    assert git(repo, "rev-parse", "--verify", "-q", "refs/heads/lb/w/work") == tip
    assert git(worktree, "symbolic-ref", "HEAD") == "refs/heads/lb/w/work"
    assert git(worktree, "rev-parse", "HEAD") == tip  # not an unborn branch
    (failed,) = _events(cli, "w", "task.failed")
    assert f"branch lb/w/work kept: checked out at {worktree}" in failed["kept"]


def test_new_refuses_an_existing_empty_directory_at_its_path(repo: Path, cli) -> None:  # type: ignore[no-untyped-def]
    """Check (provision `create`): an existing directory is refused, even an empty one (git
    itself adds a worktree into an empty directory: only the check stops `new` from taking
    over someone's directory)."""
    theirs = repo / ".worktrees" / "mine"
    theirs.mkdir(parents=True)
    made = theirs.stat()

    refused = cli("new", "mine", "--no-start")

    assert refused.code == 1
    assert f"{theirs} already exists; laneboard never reuses a directory" in refused.err
    assert list(theirs.iterdir()) == []
    assert (theirs.stat().st_ino, theirs.stat().st_mtime_ns) == (made.st_ino, made.st_mtime_ns)
    assert str(theirs) not in _worktrees(repo)
    assert git(repo, "branch", "--list", "lb/mine/work") == ""
    assert json.loads(cli("ls", "--all", "--json").out)["tasks"] == []


def test_a_worktree_someone_made_at_the_tasks_path_survives_its_rollback(
    repo: Path, cli, pause
) -> None:  # type: ignore[no-untyped-def]
    """Check (rollback `_undo`): the worktree is removed only if laneboard created it. Someone
    adds their own worktree at the task's path just after laneboard created the branch (clean,
    at the same commit, holding only an ignored file: nothing a snapshot would keep): `git
    worktree add` then fails, and the rollback must leave their worktree and file alone."""
    (repo / ".git" / "info" / "exclude").write_text("*.key\n")
    held = pause("provision.after_branch")
    running = started(["new", "boom", "--no-start"], repo, held.env)
    held.reached()
    theirs = repo / ".worktrees" / "boom"
    git(repo, "worktree", "add", "-q", "-b", "theirs", str(theirs))
    (theirs / "deploy.key").write_text("their secret\n")
    held.go()
    _, err = running.communicate(timeout=DEADLINE)

    assert running.returncode == 1, err
    assert f"provisioning boom failed: git worktree failed: fatal: '{theirs}' already exists" in err
    assert (theirs / "deploy.key").read_text() == "their secret\n"
    assert f"worktree {theirs}\n" in _worktrees(repo)
    assert git(theirs, "symbolic-ref", "HEAD") == "refs/heads/theirs"
    assert _show(cli, "boom")["state"] == "failed"
    assert git(repo, "branch", "--list", "lb/boom/work") == ""  # its own branch did go


# --- snapshots ------------------------------------------------------------------------------


def test_a_snapshot_never_overwrites_a_ref_taken_meanwhile(
    repo: Path, cli, task: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """Check (snapshot `_save`): the snapshot ref is created by compare-and-swap from
    "absent". Someone takes the ref between the moment discard picks its number and the moment
    it writes it: the discard stops there, their ref stays as it is, and nothing is removed."""
    theirs = git(repo, "commit-tree", "-m", "someone else's", "HEAD^{tree}")
    taken: list[str] = []
    real = snapshots.next_ref

    def next_ref_then_taken(*args: Any) -> tuple[int, str]:
        n, ref = real(*args)
        if not taken:
            git(repo, "update-ref", ref, theirs)
            taken.append(ref)
        return n, ref

    with monkeypatch.context() as patched:
        patched.setattr(snapshots, "next_ref", next_ref_then_taken)
        stopped = cli("discard", "t", "--force")

    assert stopped.code == 1
    assert f"cannot lock ref '{taken[0]}': reference already exists" in stopped.err
    assert git(repo, "rev-parse", taken[0]) == theirs
    # Nothing was removed: the worktree waits in its quarantine for `doctor --fix`.
    (quarantine,) = (repo / ".worktrees").glob(".discarding-*")
    assert (quarantine / "notes.md").read_text() == "first draft\n"
    assert _show(cli, "t")["state"] == "discarding"


def test_a_file_that_changes_while_it_is_hashed_is_read_again(
    repo: Path, cli, task: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """Check (snapshot `_hash_file`): a file whose inode, size or times differ after it was
    read is read again. Here the agent finishes writing `notes.md` just as discard reads it:
    the snapshot must hold what is on disk when the worktree goes, not the draft read first."""
    real = safefs.Below.chunks
    rewritten: list[str] = []

    def chunks_then_rewritten(self: safefs.Below, relative: str) -> Iterator[bytes]:
        yield from real(self, relative)
        if relative == "notes.md" and not rewritten:
            rewritten.append(relative)
            with open(os.path.join(self.top, relative), "w") as handle:
                handle.write("the final version, written while it was read\n")

    with monkeypatch.context() as patched:
        patched.setattr(safefs.Below, "chunks", chunks_then_rewritten)
        done = cli("discard", "t", "--force")

    assert done.code == 0, done.err
    assert rewritten == ["notes.md"]
    expected = b"the final version, written while it was read\n"
    assert _saved(repo, _snapshots(repo)[-1], "notes.md") == expected
    assert cli("restore", "t").code == 0
    assert (task / "notes.md").read_bytes() == expected


def test_a_leftover_that_changed_after_it_was_saved_is_saved_again_before_it_goes(
    repo: Path, cli, task: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """Check (snapshot `remove_saved`, discard `_remove_leftovers`): a file left after git's
    removal is deleted only if it is exactly as it was saved. A discard crashed with git's
    removal half done (the worktree's `.git` gone, its files still there); as `doctor --fix`
    saves what is left, something appends to a file: that file stays until a snapshot holds its
    new bytes."""
    crashed = cli("discard", "t", "--force", env={"LANEBOARD_FAULT": "discard.before_remove"})
    assert crashed.code == -9
    (quarantine,) = (repo / ".worktrees").glob(".discarding-*")
    (quarantine / ".git").unlink()  # as git's removal leaves it when stopped half-way
    real = snapshot.of_files
    appended: list[Path] = []

    def saved_then_appended(*args: Any, **kwargs: Any) -> Any:
        found = real(*args, **kwargs)
        if not appended:
            with open(quarantine / "notes.md", "a") as handle:
                handle.write("a line written after it was saved\n")
            appended.append(quarantine / "notes.md")
        return found

    with monkeypatch.context() as patched:
        patched.setattr(snapshot, "of_files", saved_then_appended)
        fixed = json.loads(cli("doctor", "--fix", "--json").out)["findings"]

    assert [(f["kind"], f["fixed"]) for f in fixed] == [("interrupted-discard", "finished")]
    assert appended and not quarantine.exists()
    expected = b"first draft\na line written after it was saved\n"
    assert _saved(repo, _snapshots(repo)[-1], "notes.md") == expected


def test_restore_refuses_a_snapshot_ref_moved_while_it_restores(
    repo: Path, cli, task: Path, pause
) -> None:  # type: ignore[no-untyped-def]
    """Check (snapshot `read`): a snapshot is read only while its ref is still at the commit
    the ledger recorded. The ref is moved after restore checked it and before the snapshot is
    applied: the restore stops, leaves the ref as it found it, and undoes its new task; `doctor
    --fix` puts the ref back from the vault, and the restore then works."""
    assert cli("discard", "t", "--force").code == 0
    (ref,) = _snapshots(repo)
    recorded = git(repo, "rev-parse", ref)
    held = pause("provision.after_worktree_add")
    running = started(["restore", "t"], repo, held.env)
    held.reached()
    other = git(repo, "commit-tree", "-m", "not the snapshot", "HEAD^{tree}")
    git(repo, "update-ref", ref, other)
    held.go()
    _, err = running.communicate(timeout=DEADLINE)

    assert running.returncode == 1
    assert f"snapshot {ref} is {other}, expected {recorded}" in err
    assert git(repo, "rev-parse", ref) == other
    assert not task.exists()
    assert git(repo, "branch", "--list", "lb/t/work") == ""
    fixed = json.loads(cli("doctor", "--fix", "--json").out)["findings"]
    assert [(f["kind"], f["fixed"]) for f in fixed] == [
        ("kept-ref-missing", "put back from the vault")
    ]
    assert git(repo, "rev-parse", ref) == recorded
    assert cli("restore", "t").code == 0
    assert (task / "notes.md").read_text() == "first draft\n"


def test_restore_never_reuses_a_branch_that_exists_again(repo: Path, cli, task: Path) -> None:  # type: ignore[no-untyped-def]
    """Check (restore `restore`): the branch is created anew, never reused. After the discard
    someone made `lb/t/work` again (at another commit): restore refuses before anything is
    written, naming `--as`, and `--as` restores under a new name and branch."""
    assert cli("discard", "t", "--force").code == 0
    theirs = git(repo, "commit-tree", "-p", "main", "-m", "someone's", "HEAD^{tree}")
    git(repo, "branch", "lb/t/work", theirs)

    refused = cli("restore", "t")

    assert refused.code == 1
    assert (
        "branch lb/t/work exists; restore creates it anew and never reuses a branch "
        "(restore t --as NEW_NAME uses a new branch)"
    ) in refused.err
    assert git(repo, "rev-parse", "lb/t/work") == theirs
    assert not task.exists()
    states = [t["state"] for t in json.loads(cli("ls", "--all", "--json").out)["tasks"]]
    assert states == ["discarded"]
    assert cli("restore", "t", "--as", "u").code == 0
    assert (repo / ".worktrees" / "u" / "notes.md").read_text() == "first draft\n"
    assert git(repo, "rev-parse", "lb/t/work") == theirs


def test_a_discard_in_progress_is_not_started_again(repo: Path, cli, task: Path, pause) -> None:  # type: ignore[no-untyped-def]
    """Check (discard `_refuse_unsettled`): a task being discarded is not discarded a second
    time: while its discard runs, a second one names the process at it; once that process died
    mid-way, it names `doctor --fix`, which finishes the first on its own terms."""
    held = pause("discard.after_intent")
    running = started(["discard", "t", "--force"], repo, held.env)
    try:
        held.reached()
        again = cli("discard", "t", "--force")
        assert again.code == 1
        assert f"t is being discarded by process {running.pid}" in again.err
    finally:
        held.go()
    assert running.wait(timeout=DEADLINE) == 0

    assert cli("new", "k", "--no-start").code == 0
    crashed = cli("discard", "k", env={"LANEBOARD_FAULT": "discard.after_intent"})
    assert crashed.code == -9
    again = cli("discard", "k")
    assert again.code == 1
    assert "discarding k was interrupted; `laneboard doctor --fix` finishes it" in again.err
    fixed = json.loads(cli("doctor", "--fix", "--json").out)["findings"]
    assert [(f["kind"], f["fixed"]) for f in fixed] == [("interrupted-discard", "finished")]


# --- finalize ---------------------------------------------------------------------------------


def _ready(cli, repo: Path, name: str) -> str:  # type: ignore[no-untyped-def]
    """Task `name` with one commit adding `<name>.txt`, marked reviewed; its reviewed SHA."""
    assert cli("new", name, "--no-start").code == 0
    worktree = repo / ".worktrees" / name
    (worktree / f"{name}.txt").write_text(f"{name}\n")
    git(worktree, "add", "-A")
    git(worktree, "commit", "-q", "-m", f"{name} work")
    marked = cli("review", name, "--mark")
    assert marked.code == 0, marked.err
    return git(worktree, "rev-parse", "HEAD")


def _commit(worktree: Path, name: str, content: str) -> str:
    (worktree / name).write_text(content)
    git(worktree, "add", name)
    git(worktree, "commit", "-q", "-m", f"{name}: {content.strip()}")
    return git(worktree, "rev-parse", "HEAD")


@pytest.mark.parametrize("operation", ["rebase", "bisect"])
def test_finalize_refuses_a_target_being_rebased_or_bisected_elsewhere(
    repo: Path, cli, tmp_path: Path, operation: str
) -> None:  # type: ignore[no-untyped-def]
    """Check (finalize `target_checkout`): a target that a rebase or a bisect works on in
    another worktree is refused. git lists that worktree as detached, so only its marker files
    say the branch is in use: moving the target under it would be undone, or mixed into the
    history, when the rebase or bisect ends."""
    git(repo, "branch", "release")
    _ready(cli, repo, "f")
    elsewhere = tmp_path / "elsewhere"
    git(repo, "worktree", "add", "-q", str(elsewhere), "release")
    if operation == "rebase":
        _commit(elsewhere, "a.txt", "release side\n")
        git(repo, "branch", "side", "main")
        git(repo, "worktree", "add", "-q", str(tmp_path / "side"), "side")
        _commit(tmp_path / "side", "a.txt", "side\n")
        stopped = subprocess.run(["git", "rebase", "side"], cwd=elsewhere, capture_output=True)
        assert stopped.returncode != 0  # a conflict: the rebase waits, release detached
        marker = "rebase-merge in"
    else:
        for n in range(3):
            _commit(elsewhere, "a.txt", f"release {n}\n")
        git(elsewhere, "bisect", "start", "HEAD", "HEAD~3")
        marker = "bisect_start in"
    assert "branch refs/heads/release" not in _worktrees(repo)
    release, state = git(repo, "rev-parse", "release"), _show(cli, "f")["state"]

    refused = cli("finalize", "f", "--merge", "--into", "release")

    assert refused.code == 1
    assert f"target branch release is in use: {marker}" in refused.err
    assert git(repo, "rev-parse", "release") == release
    assert _show(cli, "f")["state"] == state  # refused before anything changed


def test_finalize_leaves_a_worktree_someone_made_at_its_scratch_path(
    repo: Path, cli, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """Check (finalize `drop_scratch`): a scratch worktree laneboard has not pinned yet is
    removed only if git's lock carries this task's reason. Someone's own worktree sits at the
    path finalize wants for its gate: finalize stops, and must leave that worktree and what is
    in it alone."""
    (repo / ".laneboard.toml").write_text("gate = 'true'\n")
    _ready(cli, repo, "s")
    scratch = repo / ".worktrees" / f".integrating-{_show(cli, 's')['id']}"
    git(repo, "worktree", "add", "-q", "--detach", str(scratch))
    (scratch / "precious.txt").write_text("someone's file\n")
    main = git(repo, "rev-parse", "main")

    stopped = cli("finalize", "s", "--merge")

    assert stopped.code == 1
    assert f"{scratch} already exists; laneboard never reuses a directory" in stopped.err
    assert "is not the scratch worktree laneboard made" in stopped.err
    assert (scratch / "precious.txt").read_text() == "someone's file\n"
    assert f"worktree {scratch}\n" in _worktrees(repo)
    assert git(repo, "rev-parse", "main") == main
    assert _show(cli, "s")["state"] == "ready_for_review"


# --- lanes ------------------------------------------------------------------------------------


def _line(pipe: Any, what: str) -> str:
    """The next line of `pipe`, failing the test (not hanging it) after the deadline."""
    ready, _, _ = select.select([pipe], [], [], DEADLINE)
    assert ready, f"no {what} within {DEADLINE}s"
    line: str = pipe.readline()
    return line


def _exited(pid: int) -> None:
    """Wait (on a pidfd, not a sleep) until process `pid` has exited."""
    fd = os.pidfd_open(pid)
    try:
        ready, _, _ = select.select([fd], [], [], DEADLINE)
        assert ready, f"process {pid} still runs after {DEADLINE}s"
    finally:
        os.close(fd)


def test_a_command_that_left_its_group_keeps_its_lane_after_its_holder_died(
    repo: Path, cli
) -> None:  # type: ignore[no-untyped-def]
    """Check (leases `holder_alive`): a lease whose holder died is kept while the command it
    started still runs, even when nothing is left in the command's process group. Run from a
    terminal, `exec` gives the command a group of its own (not a session), and the command may
    move itself out of it (into its caller's group, here): only its own pid and start time then
    say it still runs. Unconfined: a confined command dies with its holder."""
    (repo / ".laneboard.toml").write_text('[confine]\nmode = "off"\n')
    assert cli("new", "t", "--no-start").code == 0
    lane = _show(cli, "t")["id"]
    script = (
        "import os, sys\n"
        "os.setpgid(0, os.getpgid(os.getppid()))\n"
        "print('moved', os.getpid(), flush=True)\n"
        "sys.stdin.readline()\n"
    )
    terminal, tty = os.openpty()
    holder = subprocess.Popen(
        [*LANEBOARD, "exec", "--lane", "t", "--", sys.executable, "-c", script],
        cwd=repo,
        env=laneboard_env(),
        stdin=tty,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    os.close(tty)
    command = 0
    try:
        said = _line(holder.stdout, "line from the command")
        assert said.startswith("moved "), said
        command = int(said.split()[1])
        store = LeaseStore(Database(default_path()), slots=2)
        (lease,) = [x for x in store.active() if x.lane == lane]
        assert (lease.state, lease.child_pid) == (LeaseState.RUNNING, command)
        assert os.getpgid(command) == holder.pid  # it left the group it was given

        os.kill(holder.pid, signal.SIGKILL)  # the holder alone: its command runs on
        assert holder.wait(timeout=DEADLINE) == -signal.SIGKILL
        store.run_pass()
        assert store.get(lease.seq).state is LeaseState.RUNNING

        os.write(terminal, b"go\n")  # the command reads its line and exits
        _exited(command)
        store.run_pass()
        released = store.get(lease.seq)
        assert (released.state, released.release_reason) == (LeaseState.RELEASED, "holder died")
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        if command:
            with contextlib.suppress(ProcessLookupError):
                os.kill(command, signal.SIGKILL)
        os.close(terminal)
        for pipe in (holder.stdout, holder.stderr):
            if pipe is not None:
                pipe.close()


# --- confinement --------------------------------------------------------------------------------

ATTEMPTS = ("create", "change", "delete")


def _attempts(targets: list[Path]) -> str:
    """A shell script that tries, for each existing file of `targets`, to create a file beside
    it, append to it and delete it, printing `<file> <how>: refused` when the kernel says the
    file system is read-only (and `written` or `failed otherwise` when not)."""
    script = ""
    for target in targets:
        tries = {
            "create": f"echo planted > '{target.parent / 'planted'}'",
            "change": f"echo changed >> '{target}'",
            "delete": f"rm -f '{target}'",
        }
        for how in ATTEMPTS:
            attempt = tries[how]
            script += (
                f"if ( {attempt} ) 2>/dev/null; then echo '{target} {how}: written'; "
                f"elif ( {attempt} ) 2>&1 | grep -q 'Read-only file system'; "
                f"then echo '{target} {how}: refused'; "
                f"else echo '{target} {how}: failed otherwise'; fi; "
            )
    return script


def _files(paths: list[Path]) -> dict[str, bytes]:
    """Every file below `paths`, with its bytes."""
    found = {}
    for top in paths:
        for directory, _, names in os.walk(top):
            for name in names:
                path = Path(directory) / name
                found[str(path)] = path.read_bytes()
    return found


def _refused_everywhere(cli, cwd: Path, task: str, targets: list[Path]) -> None:  # type: ignore[no-untyped-def]
    for target in targets:
        assert target.is_file(), target  # each attempt needs something there to change
    done = cli("exec", "--lane", task, "--", "sh", "-c", _attempts(targets), cwd=cwd)
    assert done.out.splitlines() == [f"{t} {how}: refused" for t in targets for how in ATTEMPTS], (
        done.out + done.err
    )


def test_a_common_dir_outside_the_root_is_read_only_inside(
    repo: Path, cli, isolated_env: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """Check (confine `repo_trees`): a registered repository's common dir is read-only inside a
    confined lane command even where the root does not hold it (`git init --separate-git-dir`,
    here in the home, which a sandbox keeps writable): its config, hooks and refs are what
    every git run outside reads."""
    root, data = tmp_path / "checkout", isolated_env / "data" / "repo.git"
    data.parent.mkdir()
    git(tmp_path, "init", "-q", "--separate-git-dir", str(data), str(root))
    (root / "README.md").write_text("hello\n")
    git(root, "add", "README.md")
    git(root, "commit", "-q", "-m", "initial")
    assert cli("new", "t", "--no-start", cwd=root).code == 0
    # A first confined run prepares what stays read-only (its ref directories' markers).
    assert cli("exec", "--lane", "t", "--", "true", cwd=root).code == 0
    (data / "hooks" / "pre-commit").write_text("#!/bin/sh\n")
    git(root, "pack-refs", "--all")
    before = _files([data])

    _refused_everywhere(
        cli, root, "t", [data / "config", data / "hooks" / "pre-commit", data / "packed-refs"]
    )

    after = _files([data])
    changed = [p for p in {*before, *after} if before.get(p) != after.get(p)]
    assert [p for p in changed if "/worktrees/t/" not in p] == []  # only its own admin dir
    done = cli("exec", "--lane", "t", "--", "sh", "-c", "echo mine >> README.md", cwd=root)
    assert done.code == 0, done.err  # and its own worktree is still its own


def test_laneboards_hooks_shims_and_agent_settings_are_read_only_inside(
    repo: Path, cli, agents
) -> None:  # type: ignore[no-untyped-def]
    """Check (confine `layout`): the pieces of laneboard's state lent back to a confined
    command are lent read-only: the hook scripts (every confined git and every agent's hooks
    run them, the next task's too), the task's own shims and its agent's settings (read again
    at its next launch)."""
    (repo / ".laneboard.toml").write_text('[lanes]\nwrap = ["make"]\n')
    assert cli("new", "t").code == 0  # the fake agent starts: its settings and shims are written
    task = _show(cli, "t")["id"]
    state = Path(os.environ["LANEBOARD_HOME"])
    assert cli("exec", "--lane", "t", "--", "true").code == 0  # writes git's hooks for inside
    targets = [
        state / "hooks" / "event.sh",
        state / "hooks" / "git" / "pre-commit",
        state / "shims" / task / "bin" / "make",
        state / "agents" / task / "claude-settings.json",
    ]
    pieces = [state / "hooks", state / "shims", state / "agents"]
    before = _files(pieces)

    _refused_everywhere(cli, repo, "t", targets)

    assert _files(pieces) == before
