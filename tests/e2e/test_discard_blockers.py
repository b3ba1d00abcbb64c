"""`laneboard discard` against a task's worktree in each situation the cleanup policy
(DESIGN.md section 8) must refuse, through the real CLI on a real repository.

A refusal changes nothing at all: every file under the repository (`.git`, `.worktrees` and the
task's admin dir included, content hashed), every ref, git's worktree list, the task as
`laneboard show` reports it and its journal are the same afterwards. `--force` lifts only what a
snapshot can hold (uncommitted, untracked, unique commits); every other blocker still refuses it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from laneboard.core.domain.cleanup import SAVED_MARK
from tests.conftest import CliResult, git, make_repo, run_cli
from tests.procs import AGENT, exec_agent

NAME = "t"
SOFT_PREFIXES = ("staged change: ", "unstaged change: ", "untracked file: ", "commit only here: ")
SOFT_HINT = "; --force saves them in a snapshot first, then removes"
HARD_HINT = "; --force cannot override these"

Cli = Callable[..., CliResult]


# --- observing the world ------------------------------------------------------------------


def listing(root: Path) -> dict[str, str]:
    """Every entry under `root` (not following symlinks): directories with their mode, regular
    files with their mode and sha256, symlinks with their target."""
    found: dict[str, str] = {}
    if not os.path.lexists(root):
        return found
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = path.relative_to(root).as_posix()
            info = path.lstat()
            mode = stat.S_IMODE(info.st_mode)
            if stat.S_ISLNK(info.st_mode):
                found[rel] = f"link -> {os.readlink(path)}"
            elif stat.S_ISDIR(info.st_mode):
                found[rel] = f"dir {mode:o}"
            elif stat.S_ISREG(info.st_mode):
                found[rel] = f"file {mode:o} {hashlib.sha256(path.read_bytes()).hexdigest()}"
            else:
                found[rel] = f"special {info.st_mode:o}"
    return found


@dataclass(frozen=True)
class State:
    """Everything a refused discard must leave as it was."""

    files: dict[str, dict[str, str]]
    refs: str
    worktrees: str
    task: dict[str, object]
    events: list[object]


def observe(cli: Cli, repo: Path, *extra: Path) -> State:
    shown = cli("show", NAME, "--json")
    assert shown.code == 0, shown.err
    logged = cli("log", NAME, "--json")
    assert logged.code == 0, logged.err
    return State(
        files={str(root): listing(root) for root in (repo, *extra)},
        refs=git(repo, "for-each-ref", "--format=%(refname) %(objectname)"),
        worktrees=git(repo, "worktree", "list", "--porcelain"),
        task=json.loads(shown.out),
        events=json.loads(logged.out)["events"],
    )


def assert_unchanged(before: State, after: State) -> None:
    for root, entries in before.files.items():
        now = after.files[root]
        changed = sorted(
            f"{path}: {entries.get(path)} -> {now.get(path)}"
            for path in entries.keys() | now.keys()
            if entries.get(path) != now.get(path)
        )
        assert not changed, f"files under {root} changed:\n" + "\n".join(changed)
    assert after.refs == before.refs
    assert after.worktrees == before.worktrees
    assert after.task == before.task
    assert after.events == before.events


def refused_lines(result: CliResult, hint: str) -> list[str]:
    """The blocker lines of a refusal (without the mark on those `--force` would save), after
    checking the exit code and the header: its count must match the lines listed, and a refusal
    that mixes both kinds says how many `--force` cannot override and marks the others."""
    assert result.code == 1, (result.out, result.err)
    header, *details = result.err.splitlines()
    fixes = [line for line in details if line.startswith("  fix: ")]
    details = details[: len(details) - len(fixes)]  # the fixes follow every blocker line
    assert not [line for line in details if line.startswith("  fix: ")], result.err
    count = len(details)
    marked = [line for line in details if line.endswith(SAVED_MARK)]
    if hint == HARD_HINT and marked:
        hard = count - len(marked)
        hint = f"; --force cannot override {hard} of these (it saves the ones marked)"
    assert header == (
        f"laneboard: refusing to discard {NAME}: {count} blocker{'s' if count != 1 else ''}{hint}"
    ), result.err
    assert details and all(line.startswith("  ") for line in details), result.err
    for line in details:  # exactly the blockers a snapshot lifts carry the mark
        assert line.endswith(SAVED_MARK) == (bool(marked) and line[2:].startswith(SOFT_PREFIXES)), (
            result.err
        )
    return [line[2:].removesuffix(SAVED_MARK) for line in details]


def discard(repo: Path, *args: str) -> CliResult:
    """`laneboard discard NAME ARGS` (the runner fails the test, rather than hanging it, should
    discard wait for a lane instead of refusing)."""
    return run_cli("discard", NAME, *args, cwd=repo)


def assert_refused(
    cli: Cli, repo: Path, blocker: str, *, hard: bool, extra: tuple[Path, ...] = ()
) -> None:
    """`discard` refuses naming `blocker` (and so does `discard --force`, listing only what it
    cannot lift, when `blocker` is `hard`), and neither changes anything."""
    before = observe(cli, repo, *extra)
    assert before.task["state"] == "provisioned"
    result = discard(repo)
    lines = refused_lines(result, HARD_HINT if hard else SOFT_HINT)
    assert blocker in lines, result.err
    assert_unchanged(before, observe(cli, repo, *extra))
    if hard:
        forced = discard(repo, "--force")
        lines = refused_lines(forced, HARD_HINT)
        assert blocker in lines, forced.err
        assert not [line for line in lines if line.startswith(SOFT_PREFIXES)], forced.err
        assert_unchanged(before, observe(cli, repo, *extra))


# --- building situations ------------------------------------------------------------------


def new_task(cli: Cli, repo: Path) -> Path:
    result = cli("new", NAME, "--no-start")
    assert result.code == 0, result.err
    return repo / ".worktrees" / NAME


@pytest.fixture
def wt(repo: Path, cli: Cli) -> Path:
    """The worktree of a freshly provisioned task `t`."""
    return new_task(cli, repo)


def commit(cwd: Path, path: str, text: str, message: str) -> str:
    target = cwd / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    git(cwd, "add", path)
    git(cwd, "commit", "-q", "-m", message)
    return git(cwd, "rev-parse", "HEAD")


def diverge(repo: Path, wt: Path) -> None:
    """README.md edited one way on the task's branch and another way on main."""
    commit(wt, "README.md", "the task's line\n", "task edit")
    commit(repo, "README.md", "main's line\n", "main edit")


def git_fails(cwd: Path, *args: str) -> None:
    """Run a git command that must stop (a conflict), leaving its operation in progress."""
    result = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    assert result.returncode != 0, f"git {' '.join(args)} did not stop: {result.stdout}"


def admin(repo: Path) -> Path:
    return repo / ".git" / "worktrees" / NAME


def hide_untracked(repo: Path) -> None:
    """`status.showUntrackedFiles no` in the repo and in the (isolated) global config."""
    git(repo, "config", "status.showUntrackedFiles", "no")
    with open(os.environ["GIT_CONFIG_GLOBAL"], "a") as handle:
        handle.write("[status]\n\tshowUntrackedFiles = no\n")
    assert git(repo, "config", "--global", "status.showUntrackedFiles") == "no"


def blob(repo: Path, spec: str) -> bytes:
    return subprocess.run(["git", "show", spec], cwd=repo, capture_output=True, check=True).stdout


@pytest.fixture
def started() -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """Start helper processes; each is killed and reaped at the end of the test."""
    procs: list[subprocess.Popen[str]] = []

    def start(argv: list[str], cwd: Path) -> subprocess.Popen[str]:
        proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, text=True)
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()
        if proc.stdout:
            proc.stdout.close()


def comm(pid: int) -> str:
    return Path(f"/proc/{pid}/comm").read_text().strip()


# --- blockers a snapshot can lift: refused without --force ---------------------------------


def test_discard_refuses_when_a_change_is_staged(repo: Path, cli: Cli, wt: Path) -> None:
    (wt / "a.txt").write_text("staged\n")
    git(wt, "add", "a.txt")
    assert_refused(cli, repo, "staged change: a.txt", hard=False)


def test_discard_refuses_when_a_change_is_unstaged(repo: Path, cli: Cli, wt: Path) -> None:
    (wt / "README.md").write_text("edited\n")
    assert_refused(cli, repo, "unstaged change: README.md", hard=False)


def test_discard_refuses_an_untracked_file_that_status_config_hides(
    repo: Path, cli: Cli, wt: Path
) -> None:
    hide_untracked(repo)
    (wt / "notes.md").write_text("my notes\n")
    assert git(wt, "status", "--porcelain") == ""  # git itself no longer mentions it
    assert_refused(cli, repo, "untracked file: notes.md", hard=False)


def test_discard_refuses_an_untracked_file_inside_a_new_directory(
    repo: Path, cli: Cli, wt: Path
) -> None:
    (wt / "newdir" / "deep").mkdir(parents=True)
    (wt / "newdir" / "deep" / "notes.md").write_text("my notes\n")
    assert_refused(cli, repo, "untracked file: newdir/deep/notes.md", hard=False)


def test_discard_refuses_when_a_commit_is_only_on_the_task_branch(
    repo: Path, cli: Cli, wt: Path
) -> None:
    sha = commit(wt, "work.txt", "work\n", "only here")
    assert_refused(cli, repo, f"commit only here: {sha[:10]} only here", hard=False)


def test_discard_refuses_a_detached_head_with_a_new_commit(repo: Path, cli: Cli, wt: Path) -> None:
    git(wt, "switch", "-q", "--detach")
    sha = commit(wt, "work.txt", "work\n", "detached work")
    assert git(repo, "rev-parse", f"lb/{NAME}/work") != sha
    assert_refused(cli, repo, f"commit only here: {sha[:10]} detached work", hard=False)


@pytest.mark.parametrize("detached", [False, True], ids=["on-branch", "detached"])
def test_force_saves_every_kind_of_work_in_one_snapshot_then_removes(
    repo: Path, cli: Cli, wt: Path, detached: bool
) -> None:
    hide_untracked(repo)
    main = git(repo, "rev-parse", "main")
    commits = [commit(wt, "work.txt", "work\n", "only here")]
    if detached:
        git(wt, "switch", "-q", "--detach")
        commits.append(commit(wt, "det.txt", "detached\n", "detached work"))
    (wt / "staged.txt").write_text("staged\n")
    git(wt, "add", "staged.txt")
    (wt / "README.md").write_text("edited, not staged\n")
    (wt / "notes.md").write_text("untracked\n")
    (wt / "newdir" / "deep").mkdir(parents=True)
    (wt / "newdir" / "deep" / "notes.md").write_text("untracked, deeper\n")
    on_disk = {
        p.relative_to(wt).as_posix(): p.read_bytes()
        for p in wt.rglob("*")
        if p.is_file() and p.name != ".git"
    }
    assert set(on_disk) == {
        "README.md",
        "work.txt",
        "staged.txt",
        "notes.md",
        "newdir/deep/notes.md",
        *(["det.txt"] if detached else []),
    }
    lines = refused_lines(discard(repo), SOFT_HINT)
    assert {"staged change: staged.txt", "unstaged change: README.md"} <= set(lines)
    assert {"untracked file: notes.md", "untracked file: newdir/deep/notes.md"} <= set(lines)

    result = discard(repo, "--force")
    assert result.code == 0, result.err

    refs = git(repo, "for-each-ref", "--format=%(refname)", "refs/laneboard/snapshots/")
    assert len(refs.splitlines()) == 1, refs
    ref = refs.strip()
    assert ref in result.out
    tree = git(repo, "ls-tree", "-r", "--name-only", ref).splitlines()
    assert sorted(tree) == sorted(on_disk)
    for path, content in on_disk.items():
        assert blob(repo, f"{ref}:{path}") == content, path
    # The second parent is the index as staged: the staged file, README.md as committed.
    assert blob(repo, f"{ref}^2:staged.txt") == b"staged\n"
    assert blob(repo, f"{ref}^2:README.md") == b"hello\n"
    for sha in commits:
        git(repo, "merge-base", "--is-ancestor", sha, ref)
    assert not wt.exists()
    assert not admin(repo).exists()
    assert git(repo, "branch", "--list", f"lb/{NAME}/work") == ""
    assert git(repo, "rev-parse", "main") == main
    assert json.loads(cli("show", NAME, "--json").out)["state"] == "discarded"


def test_refused_discard_does_not_refresh_a_stale_index(repo: Path, cli: Cli, wt: Path) -> None:
    """Reads run with `GIT_OPTIONAL_LOCKS=0`: otherwise the status behind the refusal would
    rewrite the task's index (refreshing README.md's stat data) under the agent's feet."""
    readme = wt / "README.md"
    mtime = readme.stat().st_mtime_ns + 5_000_000_000
    os.utime(readme, ns=(mtime, mtime))  # same content, stale stat data in the index
    (wt / "notes.md").write_text("my notes\n")
    index = admin(repo) / "index"
    original = index.read_bytes()
    assert_refused(cli, repo, "untracked file: notes.md", hard=False)
    assert index.read_bytes() == original
    git(wt, "status", "--porcelain")  # an ordinary status does refresh it
    assert index.read_bytes() != original


# --- blockers nothing lifts: refused with and without --force ------------------------------


def test_discard_refuses_an_ignored_file_that_is_not_a_cache(repo: Path, cli: Cli) -> None:
    commit(repo, ".gitignore", "secret.key\n", "ignore secret.key")
    wt = new_task(cli, repo)
    (wt / "secret.key").write_text("hunter2\n")
    assert_refused(cli, repo, "ignored file: secret.key", hard=True)


def test_discard_removes_a_worktree_holding_only_a_rebuildable_cache(repo: Path, cli: Cli) -> None:
    commit(repo, ".gitignore", "node_modules/\n", "ignore node_modules")
    wt = new_task(cli, repo)
    (wt / "node_modules").mkdir()
    (wt / "node_modules" / "x.js").write_text("module.exports = 1\n")
    main = git(repo, "rev-parse", "main")
    root_files = {k: v for k, v in listing(repo).items() if not k.startswith((".git", ".wor"))}

    result = discard(repo)
    assert result.code == 0, result.err
    assert not wt.exists()
    assert not admin(repo).exists()
    assert git(repo, "branch", "--list", f"lb/{NAME}/work") == ""
    assert git(repo, "rev-parse", "main") == main
    assert {
        k: v for k, v in listing(repo).items() if not k.startswith((".git", ".wor"))
    } == root_files
    assert json.loads(cli("show", NAME, "--json").out)["state"] == "discarded"


def test_discard_refuses_when_merge_in_progress(repo: Path, cli: Cli, wt: Path) -> None:
    diverge(repo, wt)
    git_fails(wt, "merge", "main")
    assert (admin(repo) / "MERGE_HEAD").exists()
    assert_refused(cli, repo, "in progress: merge", hard=True)


def test_discard_refuses_when_rebase_in_progress(repo: Path, cli: Cli, wt: Path) -> None:
    diverge(repo, wt)
    git_fails(wt, "rebase", "--merge", "main")
    assert (admin(repo) / "rebase-merge").is_dir()
    assert_refused(cli, repo, "in progress: rebase (merge backend)", hard=True)


def test_discard_refuses_when_rebase_apply_in_progress(repo: Path, cli: Cli, wt: Path) -> None:
    diverge(repo, wt)
    git_fails(wt, "rebase", "--apply", "main")
    assert (admin(repo) / "rebase-apply").is_dir()
    assert_refused(cli, repo, "in progress: rebase or am (apply backend)", hard=True)


def test_discard_refuses_when_cherry_pick_in_progress(repo: Path, cli: Cli, wt: Path) -> None:
    diverge(repo, wt)
    git_fails(wt, "cherry-pick", "main")
    assert (admin(repo) / "CHERRY_PICK_HEAD").exists()
    assert_refused(cli, repo, "in progress: cherry-pick", hard=True)


def test_discard_refuses_when_revert_in_progress(repo: Path, cli: Cli, wt: Path) -> None:
    commit(wt, "README.md", "first\n", "first edit")
    commit(wt, "README.md", "second\n", "second edit")
    git_fails(wt, "revert", "--no-edit", "HEAD~1")
    assert (admin(repo) / "REVERT_HEAD").exists()
    assert_refused(cli, repo, "in progress: revert", hard=True)


def test_discard_refuses_when_a_cherry_pick_series_is_paused(
    repo: Path, cli: Cli, wt: Path
) -> None:
    """The first pick of two conflicted and was committed by hand: no CHERRY_PICK_HEAD is left,
    only the sequencer's todo says the series is unfinished."""
    commit(wt, "README.md", "the task's line\n", "task edit")
    commit(repo, "README.md", "main's line\n", "main edit")
    commit(repo, "other.txt", "more\n", "main addition")
    git_fails(wt, "cherry-pick", "main~2..main")
    (wt / "README.md").write_text("resolved\n")
    git(wt, "add", "README.md")
    git(wt, "commit", "-q", "--no-edit")
    assert (admin(repo) / "sequencer").is_dir()
    assert not (admin(repo) / "CHERRY_PICK_HEAD").exists()
    assert_refused(cli, repo, "in progress: sequencer (a cherry-pick or revert series)", hard=True)


def test_discard_refuses_when_bisect_in_progress(repo: Path, cli: Cli, wt: Path) -> None:
    commit(wt, "work.txt", "work\n", "bisect me")
    git(wt, "bisect", "start")
    git(wt, "bisect", "bad")
    assert (admin(repo) / "BISECT_START").exists()
    assert_refused(cli, repo, "in progress: bisect", hard=True)


def test_discard_refuses_a_locked_worktree(repo: Path, cli: Cli, wt: Path) -> None:
    git(repo, "worktree", "lock", "--reason", "mine", str(wt))
    assert_refused(cli, repo, "locked: mine", hard=True)


def test_discard_refuses_an_initialized_submodule(repo: Path, cli: Cli, tmp_path: Path) -> None:
    library = make_repo(tmp_path / "library")
    git(repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(library), "sub")
    git(repo, "commit", "-q", "-m", "add submodule")
    wt = new_task(cli, repo)
    git(wt, "-c", "protocol.file.allow=always", "submodule", "update", "-q", "--init")
    assert (wt / "sub" / "README.md").read_text() == "hello\n"
    assert_refused(cli, repo, "initialized submodule: sub", hard=True, extra=(library,))


def test_discard_refuses_a_worktree_nested_inside(repo: Path, cli: Cli, wt: Path) -> None:
    inner = wt / "inner"
    git(repo, "worktree", "add", "-q", str(inner), "-b", "other")
    assert_refused(cli, repo, f"worktree nested inside: {inner.resolve()}", hard=True)


def test_discard_refuses_a_skip_worktree_file_changed_on_disk(
    repo: Path, cli: Cli, wt: Path
) -> None:
    git(wt, "update-index", "--skip-worktree", "README.md")
    (wt / "README.md").write_text("changed where git does not look\n")
    assert git(wt, "status", "--porcelain") == ""  # invisible to status
    assert_refused(cli, repo, "hidden change possible: README.md", hard=True)


def test_discard_refuses_while_a_process_has_its_cwd_inside(
    repo: Path, cli: Cli, wt: Path, started: Callable[..., subprocess.Popen[str]]
) -> None:
    proc = started(["sleep", "300"], wt)
    blocker = f"process inside: pid {proc.pid} (sleep): cwd {os.path.realpath(wt)}"
    assert_refused(cli, repo, blocker, hard=True)


def test_discard_refuses_while_a_process_holds_a_file_open_inside(
    repo: Path, cli: Cli, wt: Path, tmp_path: Path, started: Callable[..., subprocess.Popen[str]]
) -> None:
    held = wt / "README.md"
    code = "import sys, time; f = open(sys.argv[1]); print('ready', flush=True); time.sleep(300)"
    proc = started([sys.executable, "-c", code, str(held)], tmp_path)
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    blocker = f"process inside: pid {proc.pid} ({comm(proc.pid)}): open file {held.resolve()}"
    assert_refused(cli, repo, blocker, hard=True)


def test_discard_refuses_a_forged_worktree_and_touches_nothing(
    repo: Path, cli: Cli, wt: Path, tmp_path: Path
) -> None:
    forgery = tmp_path / "forgery"
    forgery.mkdir()
    shutil.copy2(wt / ".git", forgery / "gitfile")
    (wt / ".git").unlink()
    (wt / ".git").symlink_to(forgery / "gitfile")
    assert git(wt, "rev-parse", "--is-inside-work-tree") == "true"  # git itself follows it
    blocker = f"verification: symlinked: {wt}/.git is a symbolic link"
    assert_refused(cli, repo, blocker, hard=True, extra=(forgery,))


def test_discard_refuses_while_a_lease_is_held_on_the_lane(repo: Path, cli: Cli, wt: Path) -> None:
    agent = exec_agent(NAME, repo)
    try:
        ready = agent.expect(r"^ready ")
        assert f"cwd={wt}" in ready
        seq = ready.rsplit("lease=", 1)[1]
        assert seq.isdigit(), ready
        assert_refused(cli, repo, f"lease held: #{seq} `{sys.executable} {AGENT}`", hard=True)
        assert agent.proc.poll() is None  # the command in the lane was left running
    finally:
        agent.close()


def test_discard_and_doctor_never_touch_what_others_planted_in_the_area(
    repo: Path, cli: Cli, wt: Path, tmp_path: Path
) -> None:
    planted = repo / ".worktrees" / "planted"
    (planted / "sub").mkdir(parents=True)
    (planted / "keep.txt").write_text("not laneboard's\n")
    (planted / "sub" / "deep.bin").write_bytes(bytes(range(256)))
    (planted / "link").symlink_to("keep.txt")
    other = make_repo(tmp_path / "other")
    foreign = repo / ".worktrees" / "foreign"
    git(other, "worktree", "add", "-q", str(foreign), "-b", "theirs")
    (foreign / "work.txt").write_text("their untracked work\n")
    theirs = {str(p): listing(p) for p in (planted, foreign, other)}
    other_refs = git(other, "for-each-ref", "--format=%(refname) %(objectname)")
    other_worktrees = git(other, "worktree", "list", "--porcelain")

    result = discard(repo)
    assert result.code == 0, result.err
    assert not wt.exists()
    assert git(repo, "branch", "--list", f"lb/{NAME}/work") == ""
    assert {str(p): listing(p) for p in (planted, foreign, other)} == theirs

    report = cli("doctor", "--fix", "--json")
    found = sorted(
        (f["kind"], f["detail"].split()[0], f["fixed"]) for f in json.loads(report.out)["findings"]
    )
    assert found == [
        ("unregistered-dir", str(foreign), None),
        ("unregistered-dir", str(planted), None),
    ], report.out
    assert {str(p): listing(p) for p in (planted, foreign, other)} == theirs
    assert git(other, "for-each-ref", "--format=%(refname) %(objectname)") == other_refs
    assert git(other, "worktree", "list", "--porcelain") == other_worktrees
    assert (planted / "keep.txt").read_text() == "not laneboard's\n"


# --- regressions: work the policy let a discard delete --------------------------------------


def test_force_refuses_an_untracked_repository_inside_the_worktree(
    repo: Path, cli: Cli, wt: Path
) -> None:
    """Bug: a repository cloned or initialized inside the worktree (not a submodule) was an
    ordinary `untracked file: lib/` that `--force` lifted, but the snapshot cannot hold another
    repository: it saved nothing of it, and the removal deleted its files and its own commits."""
    lib = wt / "lib"
    lib.mkdir()
    git(lib, "init", "-q")
    sha = commit(lib, "precious.txt", "only copy\n", "a commit only this repository has")
    before = observe(cli, repo)
    forced = discard(repo, "--force")
    assert forced.code == 1, f"--force deleted lib/ and its commit {sha}, saved nowhere"
    assert any("lib" in line for line in refused_lines(forced, HARD_HINT)), forced.err
    assert_unchanged(before, observe(cli, repo))
    assert git(lib, "cat-file", "-t", sha) == "commit"


def test_discard_refuses_an_ignored_secret_in_a_directory_named_like_a_cache(
    repo: Path, cli: Cli
) -> None:
    """Bug: `target/prod.key`, ignored by `*.key` in a `target/` directory that is not ignored
    itself, counted as a rebuildable cache (the `target/` allowlist entry matched any ancestor
    directory), so a plain discard deleted the key without a word."""
    commit(repo, ".gitignore", "*.key\n", "ignore keys")
    wt = new_task(cli, repo)
    (wt / "target").mkdir()
    (wt / "target" / "prod.key").write_text("hunter2\n")
    assert_refused(cli, repo, "ignored file: target/prod.key", hard=True)


# --- scenarios the README promises -----------------------------------------------------------


def test_discard_refuses_an_unmerged_file_without_an_operation_in_progress(
    repo: Path, cli: Cli, wt: Path
) -> None:
    """The conflict is in the index even when no merge is recorded any more (MERGE_HEAD gone)."""
    diverge(repo, wt)
    git_fails(wt, "merge", "-q", "main")
    for leftover in ("MERGE_HEAD", "MERGE_MSG", "MERGE_MODE"):
        (admin(repo) / leftover).unlink(missing_ok=True)
    assert_refused(cli, repo, "conflicted file: README.md", hard=True)


@pytest.mark.parametrize("ref", ["refs/tags/keep", "refs/remotes/origin/keep"])
def test_commits_reachable_from_a_tag_or_remote_tracking_ref_are_not_unique(
    repo: Path, cli: Cli, wt: Path, ref: str
) -> None:
    sha = commit(wt, "work.txt", "kept elsewhere\n", "reachable from another ref")
    git(repo, "update-ref", ref, sha)
    result = discard(repo)
    assert result.code == 0, result.err
    assert git(repo, "branch", "--list", f"lb/{NAME}/work") == ""
    assert git(repo, "rev-parse", ref) == sha


def test_a_foreign_prunable_worktree_survives_discard_and_doctor(
    repo: Path, cli: Cli, wt: Path, tmp_path: Path
) -> None:
    """laneboard never prunes: a worktree of the user's whose directory is gone stays
    registered (git's `prunable`), through discard and `doctor --fix`."""
    mine = tmp_path / "mine"
    git(repo, "worktree", "add", "-q", str(mine), "-b", "mine")
    shutil.rmtree(mine)
    assert "prunable" in git(repo, "worktree", "list", "--porcelain")
    assert discard(repo).code == 0
    assert cli("doctor", "--fix").code == 0
    listed = git(repo, "worktree", "list", "--porcelain")
    assert f"worktree {mine}" in listed and "prunable" in listed
    assert (repo / ".git" / "worktrees" / "mine").is_dir()
    assert git(repo, "rev-parse", "--verify", "-q", "refs/heads/mine") != ""
