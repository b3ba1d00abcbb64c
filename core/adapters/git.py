"""The git adapter: pygit2 for reads of refs and history, the git CLI for worktrees and status.

`git worktree add/remove/lock/list` and `git status` run as argv lists (never a shell) in a
controlled environment: no pager, no prompt, C locale, none of the caller's `GIT_DIR`-style
variables (an agent hook may run laneboard with them set), and `GIT_OPTIONAL_LOCKS=0` for reads so
a status never takes the index lock from under an agent. pygit2's own status is not used: it holds
the GIL for its whole run (DESIGN.md section 12).
"""

from __future__ import annotations

import os
import stat
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from laneboard.core.adapters.filestamp import Stamp, settled, stamp
from laneboard.core.domain.errors import GitError
from laneboard.core.domain.values import field, value

if TYPE_CHECKING:
    import pygit2

_SCRUBBED = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_COMMON_DIR",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_NAMESPACE",
    "GIT_PREFIX",
    "GIT_QUARANTINE_PATH",
    "GIT_ATTR_SOURCE",
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG_COUNT",
)


def git_env(*, read: bool, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment every git process runs with."""
    env = {k: v for k, v in os.environ.items() if k not in _SCRUBBED}
    env.update(
        GIT_PAGER="cat",
        PAGER="cat",
        GIT_TERMINAL_PROMPT="0",
        GIT_ASKPASS="",
        SSH_ASKPASS="",
        LC_ALL="C",
        LANGUAGE="C",
        GIT_EDITOR=":",
        # The objects laneboard names are the objects it reads: a `refs/replace/` entry (which
        # anyone who can write a ref can make) never stands in for a snapshot, a tip or a tree.
        GIT_NO_REPLACE_OBJECTS="1",
    )
    if read:
        env["GIT_OPTIONAL_LOCKS"] = "0"
    # laneboard's own git never runs a program a repository's settings name to watch files.
    env.update(_settings(env, (("core.fsmonitor", "false"),)))
    if extra:
        env.update(extra)
    return env


def _settings(env: dict[str, str], wanted: tuple[tuple[str, str], ...]) -> dict[str, str]:
    """`GIT_CONFIG_*` variables adding `wanted` after the entries `env` has."""
    raw = env.get("GIT_CONFIG_COUNT", "")
    count = int(raw) if raw.isdigit() else 0
    added = {}
    for n, (key, setting) in enumerate(wanted, start=count):
        added[f"GIT_CONFIG_KEY_{n}"] = key
        added[f"GIT_CONFIG_VALUE_{n}"] = setting
    added["GIT_CONFIG_COUNT"] = str(count + len(wanted))
    return added


def run_git(
    args: Sequence[str],
    *,
    cwd: Path | str,
    read: bool = True,
    check: bool = True,
    env: dict[str, str] | None = None,
    input: bytes | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """Run `git <args>` in `cwd`. With `check`, a non-zero exit raises `GitError` carrying git's
    first line of stderr."""
    try:
        result = subprocess.run(
            ["git", *args],
            cwd=cwd,
            env=git_env(read=read, extra=env),
            input=input,
            capture_output=True,
            check=False,
        )
    except FileNotFoundError:
        raise GitError("git is not installed or not on PATH") from None
    if check and result.returncode != 0:
        words = list(args)
        while words[:1] == ["-c"]:  # `-c key=value` options come before the command
            words = words[2:]
        raise GitError(f"git {words[0] if words else ''} failed: {first_line(result.stderr)}")
    return result


def first_line(raw: bytes) -> str:
    """The line of git's stderr that says what went wrong: the first `fatal:` or `error:` line
    (git prints progress such as "Preparing worktree" before it), else the last line."""
    lines = [line.strip() for line in raw.decode(errors="replace").splitlines() if line.strip()]
    for line in lines:
        if line.startswith(("fatal:", "error:")):
            return line
    return lines[-1] if lines else "(no message)"


# --- repository discovery ---------------------------------------------------------------


@value
class RepoPaths:
    """Where a repository lives: its common git dir and its root (primary checkout)."""

    common_dir: Path
    root: Path

    @property
    def name(self) -> str:
        return self.root.name


class NotARepository(GitError):
    """The path is inside no git repository."""


class BareRepository(GitError):
    """The repository has no main checkout (documented in the README: laneboard keeps the
    root checkout as the user's own and fast-forwards it on integration; a bare repository
    with only linked worktrees has no such checkout)."""


def discover(
    path: Path, *, registered_root: Callable[[Path], Path | None] | None = None
) -> RepoPaths:
    """The repository containing `path` (its root or any of its worktrees), found by one
    `git rev-parse` run there (no pygit2: this is on the path of every command).

    The root is where the main checkout's files are, whatever its `.git` is: a directory, a
    symlink to one, or a gitfile (`git init --separate-git-dir`), never the git dir's parent.
    From a linked worktree the main checkout is the one `registered_root` recorded, else the one
    git records (the parent of a git dir named `.git`, or `core.worktree`); otherwise refused.
    Refuses a bare repository.
    """
    if not os.path.isdir(path):
        raise NotARepository(f"{path} is not a directory")
    known = _known(path)
    if known is not None:
        return known
    if _outside_every_repository(path):
        raise NotARepository(f"{path} is not inside a git repository")
    started = time.time()
    found = run_git(
        [
            "rev-parse",
            "--absolute-git-dir",
            "--git-common-dir",
            "--is-bare-repository",
            "--show-toplevel",
        ],
        cwd=path,
        check=False,
    )
    lines = found.stdout.decode(errors="surrogateescape").splitlines()
    if len(lines) < 3:
        message = first_line(found.stderr)
        if "not a git repository" in message:
            raise NotARepository(f"{path} is not inside a git repository")
        raise GitError(f"{path}: cannot read a git repository here: {message}")
    gitdir = Path(os.path.realpath(lines[0]))
    common = Path(os.path.realpath(Path(path) / lines[1]))
    if lines[2] == "true":
        raise BareRepository(
            f"{common} is a bare repository: laneboard needs its main checkout, which it leaves "
            "to you and integrates into; clone it without --bare to use laneboard"
        )
    top = Path(os.path.realpath(lines[3])) if len(lines) > 3 else None
    root = None
    if gitdir == common and top is not None and _leads_to(top / ".git", common):
        root = top  # the main checkout itself
        if top == Path(os.path.realpath(path)):
            _remember(path, RepoPaths(common_dir=common, root=root), started)
    if root is None and registered_root is not None:
        root = registered_root(common)
    if root is None:
        root, bare = _main_checkout(common)
        if bare:
            raise BareRepository(
                f"{common} is a bare repository: laneboard needs its main checkout, which it "
                "leaves to you and integrates into; clone it without --bare to use laneboard"
            )
    if root is None:
        raise GitError(
            f"cannot tell where the main checkout of {common} is; run `laneboard init` in it"
        )
    return RepoPaths(common_dir=common, root=root)


_FOUND: dict[str, tuple[tuple[Stamp, ...], RepoPaths]] = {}
"""What `discover` found at a main checkout's root, with the stamps that prove it still holds
(a long-running board opens the same repositories on every refresh: no git process then)."""

_DISCOVERY_ENV = (
    "HOME",
    "XDG_CONFIG_HOME",
    "GIT_CONFIG_GLOBAL",
    "GIT_CONFIG_SYSTEM",
    "GIT_CONFIG_NOSYSTEM",
    "GIT_CEILING_DIRECTORIES",
    "GIT_DISCOVERY_ACROSS_FILESYSTEM",
)
"""The environment `git rev-parse` reads besides the repository's files (which config files
apply, where discovery stops): part of the key of what another process found."""


def _known(path: Path) -> RepoPaths | None:
    """What `discover` found at `path` before, in this process or (by the state dir's
    `discovered` cache, `core.adapters.stampcache`) in another, when its stamps still hold."""
    known = _FOUND.get(str(path))
    if known is not None and known[0] == _found_stamps(path, known[1].common_dir):
        return known[1]
    from laneboard.core.adapters.stampcache import shared

    stamps: list[tuple[Stamp, ...]] = []

    def stamps_of(found: list[str]) -> tuple[Stamp, ...]:
        stamps.append(_found_stamps(path, Path(found[0])))
        return stamps[-1]

    kept = shared("discovered").get(_shared_key(path), stamps_of)
    if kept is None:
        return None
    found = RepoPaths(common_dir=Path(kept[0]), root=Path(kept[1]))
    _FOUND[str(path)] = (stamps[-1], found)
    return found


def _shared_key(path: Path) -> str:
    env = os.environ
    return "\0".join([str(path), *(f"{n}={env[n]}" for n in _DISCOVERY_ENV if n in env)])


def _outside_every_repository(path: Path) -> bool:
    """Whether git run at `path` certainly finds no repository: no directory from `path` up
    (as given and with symlinks resolved) has a `.git` or a `HEAD`, which is what git's
    discovery looks for (a checkout's `.git`; a git dir itself, bare or a worktree's admin
    dir). Any doubt is False: git is asked."""
    for start in {os.path.abspath(path), os.path.realpath(path)}:
        current = start
        while True:
            for name in (".git", "HEAD"):
                if os.path.lexists(os.path.join(current, name)):
                    return False
            parent = os.path.dirname(current)
            if parent == current:
                break
            current = parent
    return True


def _found_stamps(path: Path, common: Path | None) -> tuple[Stamp, ...]:
    """Stamps of what `git rev-parse` at the main checkout `path` reads: which directory the
    checkout and its git dir are, its `.git`, and the git dir's `config` and `commondir`."""
    git = Path(path) / ".git"
    inner = common if common is not None else git
    return (
        _which(stamp(path, follow=True)),
        _which(stamp(git)),
        _which(stamp(inner, follow=True)),
        stamp(inner / "config", follow=True),
        stamp(inner / "commondir", follow=True),
    )


def _which(found: Stamp) -> Stamp:
    """Of a directory's stamp, which directory it is (not what it holds, which changes all
    the time); any other stamp as it is."""
    return (*found[:3], 0, 0, 0) if found and stat.S_ISDIR(found[2]) else found


def _remember(path: Path, found: RepoPaths, started: float) -> None:
    """Keep `found` for `path` when none of its files changed in the second before git was
    `started` (else the next call runs git again)."""
    stamps = _found_stamps(path, found.common_dir)
    if settled(stamps[1:], started):
        _FOUND[str(path)] = (stamps, found)
        from laneboard.core.adapters.stampcache import shared

        plain = [str(found.common_dir), str(found.root)]
        shared("discovered").put(_shared_key(path), stamps, plain)
    else:
        _FOUND.pop(str(path), None)


def _checkout_of(path: Path, gitdir: Path) -> Path | None:
    """The checkout containing `path` whose `.git` leads to `gitdir`, or None."""
    for directory in (path, *path.parents):
        dotgit = directory / ".git"
        if os.path.lexists(dotgit):
            return Path(os.path.realpath(directory)) if _leads_to(dotgit, gitdir) else None
    return None


def _main_checkout(common: Path) -> tuple[Path | None, bool]:
    """(the main checkout of `common` as git records it (the parent of a git dir named `.git`,
    or `core.worktree`) when its `.git` leads back to `common`; whether `common` is a bare
    repository, as linked worktrees of a bare repository do not say themselves)."""
    candidates = [common.parent] if common.name == ".git" else []
    configured = run_git(
        ["--git-dir", str(common), "config", "-z", "--get-regexp", r"^core\.(bare|worktree)$"],
        cwd=common,
        check=False,
    )
    settings = dict(
        item.partition("\n")[::2]
        for item in configured.stdout.decode(errors="surrogateescape").split("\0")
        if item
    )
    if settings.get("core.worktree"):
        candidates.append(Path(os.path.realpath(common / settings["core.worktree"])))
    bare = settings.get("core.bare", "").strip().lower() in ("true", "yes", "on", "1")
    root = next((c for c in candidates if _leads_to(c / ".git", common)), None)
    return root, bare and root is None


def _leads_to(dotgit: Path, gitdir: Path) -> bool:
    """`dotgit` (a directory, a symlink to one, or a `gitdir:` file) is the git dir `gitdir`."""
    if dotgit.is_dir():
        return Path(os.path.realpath(dotgit)) == gitdir
    try:
        content = dotgit.read_bytes()[: 1 << 20].rstrip(b"\r\n")
    except OSError:
        return False
    if not content.startswith(b"gitdir: "):
        return False
    target = Path(os.fsdecode(content[len(b"gitdir: ") :]))
    return Path(os.path.realpath(dotgit.parent / target)) == gitdir


def symbolic_target(root: Path, ref: str) -> str | None:
    """What `ref` points to when it is a symbolic ref (`refs/heads/alias` -> `refs/heads/main`),
    else None."""
    found = run_git(["symbolic-ref", "-q", ref], cwd=root, check=False)
    named = found.stdout.decode(errors="surrogateescape").strip()
    return named if found.returncode == 0 and named else None


def ref_sha(root: Path, refname: str) -> str | None:
    """The commit the full ref name `refname` points at (through symbolic refs), or None when
    it is absent or names no commit."""
    found = run_git(
        ["rev-parse", "--verify", "--quiet", "--end-of-options", f"{refname}^{{commit}}"],
        cwd=root,
        check=False,
    )
    sha = found.stdout.decode().strip()
    return sha if found.returncode == 0 and sha else None


def resolve_at(path: Path, ref: str) -> str:
    """The commit `ref` names in the checkout containing `path`, as git run there means it:
    `HEAD` is that worktree's HEAD, not the root's."""
    found = run_git(
        ["rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}"],
        cwd=path,
        check=False,
    )
    sha = found.stdout.decode().strip()
    if found.returncode != 0 or not sha:
        raise GitError(f"{ref!r} does not name a commit in {path}")
    return sha


# --- reads with pygit2 ------------------------------------------------------------------


class GitRepo:
    """Reads of one repository's refs and history through pygit2 (object database and refs are
    shared by all worktrees, so one handle on the common dir serves every task)."""

    def __init__(self, paths: RepoPaths) -> None:
        self.paths = paths

    @cached_property
    def _repo(self) -> pygit2.Repository:
        import pygit2  # only commands that read history pay for it (~80 ms)

        return pygit2.Repository(str(self.paths.common_dir))

    @property
    def handle(self) -> pygit2.Repository:
        """The pygit2 repository on the common dir (objects and refs every worktree shares)."""
        return self._repo

    def refresh(self) -> None:
        """Forget cached state so the next read sees refs written by other processes."""
        self.__dict__.pop("_repo", None)

    def ref_target(self, refname: str) -> str | None:
        """The SHA a ref points at (peeled through symbolic refs), or None when it is absent."""
        import pygit2

        try:
            ref = self._repo.references.get(refname)
        except (pygit2.GitError, ValueError):
            return None
        if ref is None:
            return None
        return str(ref.resolve().target)

    def branch_tip(self, branch: str) -> str | None:
        """The commit `refs/heads/<branch>` points at now (None when absent), read by git
        itself: `new` asks this, and must not pay for pygit2's import (~80 ms) to ask it."""
        return ref_sha(self.paths.root, f"refs/heads/{branch}")

    def refs(self) -> dict[str, str]:
        """Every ref (name → SHA) that points, directly or symbolically, at an object."""
        result: dict[str, str] = {}
        for name in self._repo.references:
            target = self.ref_target(name)
            if target is not None:
                result[name] = target
        return result

    def is_ancestor(self, ancestor: str, descendant: str) -> bool:
        return ancestor == descendant or bool(self._repo.descendant_of(descendant, ancestor))

    def unique_commits(
        self, tips: Iterable[str | None], *, exclude: str | None
    ) -> list[tuple[str, str]]:
        """Commits reachable from `tips` but from no other ref (every branch but `exclude`,
        remote-tracking refs, tags, laneboard anchors and snapshots), as (sha, subject), newest
        first. Empty means removing `exclude` and the worktree loses no commit."""
        import pygit2

        self.refresh()
        starts = [tip for tip in tips if tip]
        if not starts:
            return []
        walker = self._repo.walk(starts[0], pygit2.enums.SortMode.TOPOLOGICAL)
        for tip in starts[1:]:
            walker.push(tip)
        for name, target in self.refs().items():
            if name == f"refs/heads/{exclude}" or not name.startswith(KEEPING_REFS):
                continue
            try:
                obj = self._repo.get(target)
                if obj is not None:
                    walker.hide(obj.peel(pygit2.Commit).id)
            except (ValueError, pygit2.GitError):
                continue
        return [(str(c.id), _subject(c)) for c in walker]

    def created_by(self, branch: str, message: str) -> bool:
        """True when the oldest reflog entry of `branch` carries `message` (laneboard writes one
        naming the task when it creates a branch)."""
        import pygit2

        self.refresh()
        ref = self._repo.references.get(f"refs/heads/{branch}")
        if ref is None:
            return False
        try:
            entries = list(ref.log())
        except (pygit2.GitError, KeyError, ValueError):
            return False
        return bool(entries) and (entries[-1].message or "").strip() == message

    def integration_branch(self, configured: str | None) -> str | None:
        """The branch tasks are integrated into: `configured` (config `target`), else the
        branch `origin/HEAD` names (when it exists locally), else the branch the root has
        checked out; None when there is none (a detached root, no remote). Read with git
        itself, not pygit2 (`new` asks it)."""
        if configured:
            return configured
        root = self.paths.root
        origin = symbolic_target(root, "refs/remotes/origin/HEAD")
        if origin is not None:
            name = origin.removeprefix("refs/remotes/origin/")
            if self.branch_tip(name) is not None:
                return name
        head = symbolic_target(root, "HEAD")
        return head.removeprefix("refs/heads/") if head is not None else None

    def root_commit(self) -> str | None:
        """A commit without parents that HEAD's history starts from (None when HEAD is unborn):
        part of what identifies the repository after it moves."""
        result = run_git(["rev-list", "--max-parents=0", "HEAD"], cwd=self.paths.root, check=False)
        roots = result.stdout.decode().split()
        return roots[-1] if result.returncode == 0 and roots else None

    def has_commit(self, sha: str) -> bool:
        import pygit2

        try:
            return isinstance(self._repo.get(sha), pygit2.Commit)
        except (ValueError, pygit2.GitError):
            return False


KEEPING_REFS = ("refs/heads/", "refs/remotes/", "refs/tags/", "refs/laneboard/")
"""Refs whose commits count as kept: removal never makes anything they reach unreachable."""


def _subject(commit: pygit2.Commit) -> str:
    lines = (commit.message or "").splitlines()
    return lines[0] if lines else ""


# --- worktrees with the git CLI ----------------------------------------------------------


@value
class WorktreeEntry:
    """One record of `git worktree list --porcelain -z`."""

    path: str
    head: str | None
    branch: str | None
    detached: bool = False
    bare: bool = False
    locked: str | None = None
    prunable: str | None = None


LIST_ATTEMPTS = 5


def worktree_list(root: Path) -> list[WorktreeEntry]:
    """Every worktree git has registered for the repo, the primary checkout first.

    Laneboard's own writers hold the root lane, but a reader may still meet an admin dir that a
    `git worktree add` outside laneboard is half-way through writing (git then fails with
    "failed to read …"); such a read is retried a few times before the error is reported.
    """
    for attempt in range(LIST_ATTEMPTS):
        result = run_git(["worktree", "list", "--porcelain", "-z"], cwd=root, check=False)
        if result.returncode == 0:
            break
        if attempt == LIST_ATTEMPTS - 1 or b"failed to read" not in result.stderr:
            raise GitError(f"git worktree failed: {first_line(result.stderr)}")
        time.sleep(0.02 * (attempt + 1))
    out = result.stdout.decode(errors="surrogateescape")
    entries: list[WorktreeEntry] = []
    current: dict[str, str | None] = {}

    def flush() -> None:
        if "worktree" in current:
            branch = current.get("branch")
            entries.append(
                WorktreeEntry(
                    path=str(current["worktree"]),
                    head=current.get("HEAD"),
                    branch=branch.removeprefix("refs/heads/") if branch else None,
                    detached="detached" in current,
                    bare="bare" in current,
                    locked=current.get("locked"),
                    prunable=current.get("prunable"),
                )
            )
        current.clear()

    for item in out.split("\0"):
        if not item:
            flush()
            continue
        key, _, value = item.partition(" ")
        current[key] = value
    flush()
    return entries


def create_branch(root: Path, branch: str, sha: str, message: str) -> None:
    """Create `branch` at `sha` only if it does not exist (compare-and-swap against the zero
    id), with a reflog entry carrying `message`. Never moves an existing branch."""
    ref = f"refs/heads/{branch}"
    args = ["update-ref", "--no-deref", "--create-reflog", "-m", message, ref, sha, "0" * 40]
    run_git(args, cwd=root, read=False)


def worktree_add(root: Path, path: Path, branch: str, lock_reason: str) -> None:
    """Add a worktree at `path` checking out `branch` (which the caller has just created),
    locked with `lock_reason` until provisioning has finished."""
    run_git(
        ["worktree", "add", "--lock", "--reason", lock_reason, str(path), branch],
        cwd=root,
        read=False,
    )


def worktree_unlock(root: Path, path: Path) -> None:
    run_git(["worktree", "unlock", str(path)], cwd=root, read=False)


def worktree_move(root: Path, source: Path, destination: Path) -> None:
    """Move one worktree (a rename: the directory keeps its inode) and update git's links."""
    run_git(["worktree", "move", str(source), str(destination)], cwd=root, read=False)


def worktree_remove(root: Path, path: Path, *, force: bool, unlock: bool = False) -> None:
    """Remove one worktree by path. Callers must have checked every blocker first (the cleanup
    policy): `force` only lets git delete files the policy judged saved or rebuildable, and
    `unlock` (a second `--force`) is only for a worktree locked by laneboard's own provisioning."""
    args = ["worktree", "remove"]
    if force:
        args.append("--force")
    if unlock:
        args.append("--force")
    run_git([*args, str(path)], cwd=root, read=False)


def delete_ref_if(root: Path, refname: str, expected_sha: str) -> bool:
    """Delete `refname` itself, never what it may point to (a task can make its branch a
    symbolic ref to `main`), only if it still points at `expected_sha` (compare-and-swap).

    Returns False, deleting nothing, when the ref moved or is gone.
    """
    result = run_git(
        ["update-ref", "--no-deref", "-d", refname, expected_sha],
        cwd=root,
        read=False,
        check=False,
    )
    return result.returncode == 0


# --- status with the git CLI -------------------------------------------------------------


@value
class IndexListing:
    """What removal needs from a worktree's index, from one `git ls-files -s -v -z`."""

    files: tuple[str, ...] = ()
    """Regular files (stage 0): the ones a filter or eol attribute could apply to."""
    hidden: tuple[str, ...] = ()
    """Entries flagged so that git would not report changes to them on disk: assume-unchanged
    (a lower-case tag) or skip-worktree (`S`)."""
    gitlinks: tuple[str, ...] = ()
    """Submodule entries (mode 160000)."""


def index_listing(worktree: Path) -> IndexListing:
    """The worktree's index as `IndexListing` (parsed in one pass: tens of thousands of entries
    are read on every discard)."""
    raw = run_git(["ls-files", "-s", "-v", "-z"], cwd=worktree).stdout
    files: list[str] = []
    hidden: list[str] = []
    gitlinks: list[str] = []
    for item in raw.decode(errors="surrogateescape").split("\0"):
        tab = item.find("\t")
        if tab < 0:
            continue
        # "<tag> <mode> <object id> <stage>\t<path>"
        tag, mode, path = item[0], item[2:8], item[tab + 1 :]
        if tag.islower() or tag == "S":
            hidden.append(path)
        if mode == "160000":
            gitlinks.append(path)
        elif mode != "120000" and item[tab - 1] == "0":
            files.append(path)
    return IndexListing(tuple(files), tuple(hidden), tuple(gitlinks))


@value(frozen=False)
class StatusFacts:
    """One worktree's `git status --porcelain=v2`, ignoring nothing the user's config might hide."""

    head: str | None = None
    branch: str | None = None
    staged: list[str] = field(default_factory=list)
    unstaged: list[str] = field(default_factory=list)
    conflicted: list[str] = field(default_factory=list)
    untracked: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    submodules: list[str] = field(default_factory=list)
    ahead: int | None = None
    """Commits ahead of the upstream (`# branch.ab`), when the status was asked for one."""
    behind: int | None = None

    @property
    def clean(self) -> bool:
        return not (self.staged or self.unstaged or self.conflicted or self.untracked)


def status(worktree: Path, *, ignored: bool = False) -> StatusFacts:
    """Status of `worktree`. Untracked files are listed one by one whatever
    `status.showUntrackedFiles` says; with `ignored`, ignored paths are listed as git matches them
    (a whole ignored directory as one `dir/` entry)."""
    args = [
        "status",
        "--porcelain=v2",
        "-z",
        "--branch",
        "--untracked-files=all",
        f"--ignored={'matching' if ignored else 'no'}",
        "--ignore-submodules=none",
    ]
    raw = run_git(args, cwd=worktree).stdout.decode(errors="surrogateescape")
    return parse_status(raw)


def parse_status(raw: str) -> StatusFacts:
    """Parse `git status --porcelain=v2 -z --branch` output."""
    facts = StatusFacts()
    items = iter(raw.split("\0"))
    for item in items:
        if not item:
            continue
        kind = item[0]
        if kind == "#":
            _, key, *rest = item.split(" ")
            value = " ".join(rest)
            if key == "branch.oid" and value != "(initial)":
                facts.head = value
            elif key == "branch.head" and value != "(detached)":
                facts.branch = value
            elif key == "branch.ab":
                ahead, _, behind = value.partition(" ")
                facts.ahead, facts.behind = int(ahead.lstrip("+")), -int(behind)
        elif kind in "12":
            parts = item.split(" ", 9 if kind == "2" else 8)
            xy, sub, path = parts[1], parts[2], parts[-1]
            if kind == "2":
                next(items, None)  # the rename's original path
            if xy[0] != ".":
                facts.staged.append(path)
            if xy[1] != ".":
                facts.unstaged.append(path)
            if sub.startswith("S"):
                facts.submodules.append(path)
        elif kind == "u":
            facts.conflicted.append(item.split(" ", 10)[-1])
        elif kind == "?":
            facts.untracked.append(item[2:])
        elif kind == "!":
            facts.ignored.append(item[2:])
    return facts
