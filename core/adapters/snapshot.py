"""Snapshots: everything a task's worktree holds, saved as one commit before removal, and put
back by `laneboard restore`.

A snapshot is a commit under `refs/laneboard/snapshots/<task-id>/<n>` whose tree is the worktree
byte for byte as it is on disk (tracked files and untracked files that are not ignored, hashed
without any filter: no CRLF conversion, no clean filter), and whose parents are HEAD, a commit of
the index as staged, the branch tip, and any other commit only the worktree's reflogs or
per-worktree refs still reach. So the snapshot keeps every commit of the task reachable, and
restoring it gives back HEAD, staged, unstaged and untracked files exactly.

Only what can differ from the index is read and hashed: files `git status` reports as changed or
untracked, and, when an attribute or `core.autocrlf` could make the bytes on disk differ from the
staged blob (eol, filter, ident, working-tree-encoding), those files too. Everything else is the
staged blob, byte for byte. File names never pass through a line-oriented interface: contents are
read in-process through `core.safefs` (never following a link below the worktree) and written as
raw blobs with pygit2; the worktree's tree is the index's tree with those files set or removed,
edited in this process (`core.adapters.trees`), and the index's tree is HEAD's when nothing is
staged, else `git write-tree` on a temporary copy of the index. So the user's index, stash and
refs are never touched (only the new snapshot ref is
written, with a compare-and-swap that refuses to overwrite). Empty directories are not content
to git and are not kept.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from laneboard.core.adapters.git import StatusFacts, git_env, run_git
from laneboard.core.adapters.safefs import Below
from laneboard.core.domain.errors import LaneboardError
from laneboard.core.domain.values import field, value

if TYPE_CHECKING:  # pygit2 is loaded by whoever hands in a repository: restore needs none
    import pygit2

IDENTITY = {
    "GIT_AUTHOR_NAME": "laneboard",
    "GIT_AUTHOR_EMAIL": "laneboard@localhost",
    "GIT_COMMITTER_NAME": "laneboard",
    "GIT_COMMITTER_EMAIL": "laneboard@localhost",
}
"""Snapshot commits are laneboard's own; they do not depend on the user having an identity."""

GITLINK = "160000"
SYMLINK = "120000"
ZERO = "0" * 40
IN_MEMORY = 32 << 20
"""Files up to this size are hashed from memory; larger ones are streamed into the object store."""
STABLE_READS = 3
"""A file that changes while it is read is read again, at most this many times."""
CONVERSION_ATTRIBUTES = ("text", "eol", "crlf", "filter", "ident", "working-tree-encoding")
"""Attributes under which git's staged blob can differ from the bytes on disk."""
NO_HOOKS = ("-c", "core.hooksPath=/dev/null")
"""laneboard's own git plumbing runs no repository hooks."""


def snapshot_ref(task_id: str, n: int) -> str:
    return f"refs/laneboard/snapshots/{task_id}/{n}"


@value
class Snapshot:
    """A saved worktree state: the snapshot commit and the commits it was made from."""

    ref: str
    sha: str
    head: str
    index_commit: str
    tip: str | None
    tree: str
    index_tree: str
    extras: tuple[str, ...] = field(default=())
    """Commits kept only because a reflog or per-worktree ref of the worktree reached them."""


StatKey = tuple[int, int, int, int, int]
"""(inode, mode, size, mtime ns, ctime ns) of a file when it was hashed."""


def _key(info: os.stat_result) -> StatKey:
    return (info.st_ino, info.st_mode, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


@value
class Capture:
    """The trees of a worktree at one moment, and what was read from disk to make them."""

    index_tree: str
    tree: str
    read: tuple[tuple[str, StatKey | None], ...]
    """Every path hashed from disk, with its stat key (None: it was absent)."""
    status: StatusFacts
    """The `git status` the capture was based on."""


class Changing(LaneboardError):
    """A file kept changing while it was read; no snapshot was made."""


# --- git plumbing -----------------------------------------------------------------------


def _git(
    cwd: Path,
    *args: str,
    index: Path | None = None,
    extra: dict[str, str] | None = None,
    input: bytes | None = None,
) -> str:
    env = dict(extra or {})
    if index is not None:
        env["GIT_INDEX_FILE"] = str(index)
    result = run_git([*NO_HOOKS, *args], cwd=cwd, read=False, env=env, input=input)
    return result.stdout.decode(errors="surrogateescape").strip()


@contextmanager
def _scratch() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="laneboard-index-") as tmp:
        yield Path(tmp)


def _z(raw: bytes) -> list[str]:
    return [item for item in raw.decode(errors="surrogateescape").split("\0") if item]


def tree_entries(cwd: Path, tree: str) -> dict[str, tuple[str, str]]:
    """path -> (mode, sha) of every blob and gitlink in `tree`."""
    raw = run_git(["ls-tree", "-r", "-z", "--full-tree", tree], cwd=cwd).stdout
    found = {}
    for line in _z(raw):
        meta, _, path = line.partition("\t")
        mode, _kind, sha = meta.split(" ")
        found[path] = (mode, sha)
    return found


# --- which files git's staged blob may not describe -----------------------------------------


def converted(
    worktree: Path, common_dir: Path, candidates: Iterable[str], *, everything: Iterable[str] = ()
) -> set[str]:
    """The `candidates` (tracked regular files git calls unchanged) whose bytes on disk may
    differ from their staged blob: files under a conversion attribute, or all of them when
    `core.autocrlf` (or `attr.tree`) is set. Without any attribute source, none. `everything`
    are the worktree's other paths, searched for `.gitattributes` files."""
    paths = list(candidates)
    if not paths:
        return set()
    settings = _conversion_settings(worktree)
    if _converts_everything(settings):
        return set(paths)
    names = [*paths, *everything]
    if not _attribute_sources(common_dir, names, settings.get("core.attributesfile")):
        return set()
    request = b"".join(os.fsencode(path) + b"\0" for path in paths)
    raw = run_git(
        ["check-attr", "-z", "--stdin", *CONVERSION_ATTRIBUTES], cwd=worktree, input=request
    ).stdout
    items = raw.decode(errors="surrogateescape").split("\0")
    found = set()
    for index in range(0, len(items) - 2, 3):
        path, _attribute, value = items[index : index + 3]
        if value != "unspecified":
            found.add(path)
    return found


_SOURCES: dict[str, tuple[tuple[object, ...], bool]] = {}
"""`may_convert`'s answer for each worktree, with the files it was read from (their stat)."""


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        info = path.stat()
    except OSError:
        return None
    return (info.st_ino, info.st_size, info.st_mtime_ns)


def may_convert(
    worktree: Path,
    common_dir: Path,
    others: Iterable[str],
    *,
    admin: Path | None = None,
    head: str | None = None,
) -> bool:
    """Whether any tracked file's bytes on disk could differ from its staged blob by a
    conversion (`core.autocrlf`, `attr.tree`, or any gitattributes file: a tracked one, one of
    `others`, the repo's or the user's): when not, `converted` finds nothing, and a capture
    needs no listing of the whole index. `others` are the paths `git status` lists (staged,
    unstaged, untracked): a `.gitattributes` added, changed or removed shows there. With
    `admin` (the worktree's admin dir) and `head`, the answer from git is remembered until a
    file it depends on changes (the configs, the attributes files) or HEAD moves (a commit,
    merge or checkout that brought one in), so a checkpoint at every agent turn asks git only
    when one did."""
    if any(n == ".gitattributes" or n.endswith("/.gitattributes") for n in others):
        return True
    xdg = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    watched = (
        common_dir / "config",
        common_dir / "info" / "attributes",
        Path(xdg) / "git" / "attributes",
        Path(xdg) / "git" / "config",
        Path(os.path.expanduser("~")) / ".gitconfig",
        *((admin / "config.worktree",) if admin is not None else ()),
    )
    stamps = (head, *(_stamp(p) for p in watched))
    key = str(worktree)
    remembered = _SOURCES.get(key) if admin is not None and head else None
    if remembered is not None and remembered[0] == stamps:
        return remembered[1]
    answer = _may_convert(worktree, common_dir)
    if admin is not None and head:
        _SOURCES[key] = (stamps, answer)
    return answer


def _conversion_settings(worktree: Path) -> dict[str, str]:
    """The worktree's `core.autocrlf`, `core.attributesFile` and `attr.tree`, as git reads them
    there (lower-cased keys and values)."""
    config = run_git(
        ["config", "-z", "--get-regexp", r"^(core\.autocrlf|core\.attributesfile|attr\.tree)$"],
        cwd=worktree,
        check=False,
    ).stdout
    settings: dict[str, str] = {}
    for item in _z(config):
        key, _, value = item.partition("\n")
        settings[key.lower()] = value.strip().lower()
    return settings


def _converts_everything(settings: dict[str, str]) -> bool:
    """`core.autocrlf` or `attr.tree` may convert any file."""
    autocrlf = settings.get("core.autocrlf", "false") not in ("false", "0", "no", "off", "")
    return autocrlf or "attr.tree" in settings


def _may_convert(worktree: Path, common_dir: Path) -> bool:
    settings = _conversion_settings(worktree)
    if _converts_everything(settings):
        return True
    tracked = run_git(
        ["ls-files", "-z", "--", ".gitattributes", ":(glob)**/.gitattributes"], cwd=worktree
    ).stdout
    return _attribute_sources(common_dir, _z(tracked), settings.get("core.attributesfile"))


def _attribute_sources(common_dir: Path, names: list[str], user: str | None) -> bool:
    """Whether any gitattributes file could apply: one among `names`, the repo's
    `info/attributes`, or the user's (`core.attributesFile`, else the XDG default)."""
    if any(n == ".gitattributes" or n.endswith("/.gitattributes") for n in names):
        return True
    if user:
        user_file = Path(os.path.expanduser(user))
    else:
        xdg = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
        user_file = Path(xdg) / "git" / "attributes"
    for source in (common_dir / "info" / "attributes", user_file):
        try:
            if source.stat().st_size > 0:
                return True
        except OSError:
            continue
    return False


# --- hashing raw bytes ------------------------------------------------------------------


def _hash_file(repo: pygit2.Repository, below: Below, path: str) -> tuple[str, str, StatKey] | None:
    """Write the raw bytes (or link target) at `path` as a blob: (mode, sha, stat key), or None
    when nothing hashable is there (absent, a directory, a socket…). Read again when the file
    changes while it is read."""
    for _attempt in range(STABLE_READS):
        before = below.lstat(path)
        if before is None or not (stat.S_ISREG(before.st_mode) or stat.S_ISLNK(before.st_mode)):
            return None
        if stat.S_ISLNK(before.st_mode):
            mode, oid = SYMLINK, repo.create_blob(below.readlink(path))
        else:
            mode = "100755" if before.st_mode & stat.S_IXUSR else "100644"
            if before.st_size <= IN_MEMORY:
                oid = _blob(repo, b"".join(below.chunks(path)))
            else:
                oid = repo.create_blob_fromiobase(_Stream(below.chunks(path)))
        after = below.lstat(path)
        if after is not None and _key(after) == _key(before):
            return mode, str(oid), _key(after)
    raise Changing(f"{path} kept changing while it was read; try again when it is quiet")


def _blob(repo: pygit2.Repository, data: bytes) -> pygit2.Oid:
    """`data` as a blob, written only when the repository lacks it: at every turn most changed
    files are the ones the last checkpoint saved already (libgit2 would hash them again with its
    slower collision-detecting SHA-1 and touch the object it has)."""
    import pygit2

    oid = pygit2.Oid(hex=raw_sha((data,), len(data)))
    return oid if oid in repo.odb else repo.create_blob(data)


class _Stream(io.RawIOBase):
    """A read-only file-like view of an iterator of chunks (for pygit2's streaming blob write,
    which, unlike `create_blob_fromdisk`, applies no filter)."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        super().__init__()
        self._chunks = chunks
        self._buffer = b""

    def readable(self) -> bool:
        return True

    def readinto(self, target: Any) -> int:
        while not self._buffer:
            chunk = next(self._chunks, None)
            if chunk is None:
                return 0
            self._buffer = chunk
        size = min(len(target), len(self._buffer))
        target[:size] = self._buffer[:size]
        self._buffer = self._buffer[size:]
        return size


def raw_sha(chunks: Iterable[bytes], size: int) -> str:
    """The blob id git gives these bytes, computed without writing anything."""
    digest = hashlib.sha1(f"blob {size}\0".encode(), usedforsecurity=False)
    for chunk in chunks:
        digest.update(chunk)
    return digest.hexdigest()


# --- capture ------------------------------------------------------------------------------


def capture(
    repo: pygit2.Repository,
    worktree: Path,
    gitdir: Path,
    status: StatusFacts,
    *,
    common_dir: Path,
    tracked_files: Iterable[str] = (),
) -> Capture:
    """The index tree and the raw worktree tree of `worktree` as `status` (taken just before)
    describes it. `tracked_files` are the index's regular files, for the conversion check."""
    from laneboard.core.adapters import trees

    changed = set(status.unstaged) - set(status.submodules)
    unchanged = [path for path in tracked_files if path not in changed]
    others = [*changed, *status.untracked]
    suspect = converted(worktree, common_dir, unchanged, everything=others)
    to_read = sorted(changed | set(status.untracked) | suspect)
    changes: dict[bytes, trees.Change] = {}
    read: list[tuple[str, StatKey | None]] = []
    with Below(worktree) as below:
        for path in to_read:
            found = _hash_file(repo, below, path)
            read.append((path, None if found is None else found[2]))
            changes[os.fsencode(path)] = None if found is None else (int(found[0], 8), found[1])
    index_tree = _index_tree(repo, worktree, gitdir, status)
    tree = trees.edit_tree(repo, index_tree, changes) if changes else index_tree
    return Capture(index_tree, tree, tuple(read), status)


def _index_tree(repo: pygit2.Repository, worktree: Path, gitdir: Path, status: StatusFacts) -> str:
    """The tree `git write-tree` makes of the worktree's index. With nothing staged and nothing
    conflicted (what `status` just saw), that is HEAD's tree, read in this process: the index
    then differs from HEAD only in entries `write-tree` leaves out (intent-to-add). Otherwise
    `write-tree` runs on a copy of the index (never the index itself)."""
    import pygit2

    if status.head is not None and not status.staged and not status.conflicted:
        head = repo.get(status.head)
        if isinstance(head, pygit2.Commit):
            return str(head.tree_id)
    with _scratch() as tmp:
        index = tmp / "index"
        source = gitdir / "index"
        if source.exists():
            shutil.copyfile(source, index)
        return _git(worktree, "write-tree", index=index)


def unchanged_since(worktree: Path, captured: Capture, status: StatusFacts) -> bool:
    """True when `status` (taken now) and the files read for `captured` show the worktree still
    exactly as captured: the same changed and untracked paths, and every file read then has
    the same inode, mode, size and times now."""
    before, now = captured.status, status
    if (before.head, before.staged, before.unstaged, before.untracked) != (
        now.head,
        now.staged,
        now.unstaged,
        now.untracked,
    ):
        return False
    with Below(worktree) as below:
        for path, key in captured.read:
            if _hashable_key(below, path) != key:
                return False
    return True


def _hashable_key(below: Below, path: str) -> StatKey | None:
    """The stat key of a file or link at `path`; None when nothing hashable is there."""
    info = below.lstat(path)
    if info is None or not (stat.S_ISREG(info.st_mode) or stat.S_ISLNK(info.st_mode)):
        return None
    return _key(info)


def save(
    repo: pygit2.Repository,
    root: Path,
    captured: Capture,
    *,
    ref: str,
    head: str,
    tip: str | None,
    extras: tuple[str, ...] = (),
    message: str,
) -> Snapshot:
    """Commit `captured` and point `ref` (which must not exist yet) at it."""
    return _save(repo, root, ref, (captured.index_tree, captured.tree), head, tip, extras, message)


def _signature() -> pygit2.Signature:
    import pygit2

    return pygit2.Signature(IDENTITY["GIT_AUTHOR_NAME"], IDENTITY["GIT_AUTHOR_EMAIL"])


def _save(
    repo: pygit2.Repository,
    root: Path,
    ref: str,
    trees: tuple[str, str],
    head: str,
    tip: str | None,
    extras: tuple[str, ...],
    message: str,
) -> Snapshot:
    index_tree, work_tree = trees
    signature = _signature()
    index_commit = str(repo.create_commit(None, signature, signature, "index", index_tree, [head]))
    parents = [head, index_commit, tip or head, *extras]  # positions matter: `read` relies on them
    sha = str(repo.create_commit(None, signature, signature, message, work_tree, parents))
    _git(root, "update-ref", "--no-deref", ref, sha, ZERO)
    return Snapshot(ref, sha, head, index_commit, tip, work_tree, index_tree, extras)


def of_commit(
    repo: pygit2.Repository,
    root: Path,
    *,
    ref: str,
    commit: str,
    index_tree: str | None = None,
    extras: tuple[str, ...] = (),
    message: str,
) -> Snapshot:
    """A snapshot of a branch alone (its worktree is gone): its tree, and the index as the
    worktree's admin dir still holds it when `index_tree` is given."""
    tree = str(repo.revparse_single(f"{commit}^{{tree}}").id)
    return _save(repo, root, ref, (index_tree or tree, tree), commit, commit, extras, message)


def of_files(
    repo: pygit2.Repository,
    root: Path,
    directory: Path,
    *,
    ref: str,
    parent: str,
    message: str,
) -> tuple[Snapshot, tuple[tuple[str, StatKey | None], ...]]:
    """A snapshot of every regular file and link under `directory` (a worktree git has lost,
    ignored files included), on top of the commit `parent`; and what was read."""
    read: list[tuple[str, StatKey | None]] = []
    additions: list[bytes] = []
    with Below(directory) as below:
        for path in _walk(directory):
            found = _hash_file(repo, below, path)
            if found is None:
                continue
            mode, sha, key = found
            read.append((path, key))
            additions.append(f"{mode} {sha}\t".encode() + os.fsencode(path) + b"\0")
    with _scratch() as tmp:
        index = tmp / "index"
        _git(root, "update-index", "-z", "--index-info", index=index, input=b"".join(additions))
        tree = _git(root, "write-tree", index=index)
    saved = _save(repo, root, ref, (tree, tree), parent, parent, (), message)
    return saved, tuple(read)


def _walk(directory: Path) -> list[str]:
    """Relative paths of every non-directory entry below `directory`, never entering a link."""
    found = []
    for top, dirs, files, _fd in os.fwalk(directory, follow_symlinks=False):
        relative = os.path.relpath(top, directory)
        prefix = "" if relative == "." else relative + "/"
        found += [prefix + name for name in files]
        found += [prefix + name for name in dirs if os.path.islink(os.path.join(top, name))]
    return sorted(found)


def remove_saved(directory: Path, saved: Iterable[tuple[str, StatKey | None]]) -> bool:
    """Remove the files of `saved` that are still exactly as they were read (same inode, mode,
    size and times), then the directories left empty, then `directory` itself. Returns True when
    `directory` is gone; False when something unsaved is still there (it is left in place)."""
    with Below(directory) as below:
        for path, key in saved:
            if key is not None and _hashable_key(below, path) == key:
                below.remove(path)
    for top, dirs, _files, _fd in os.fwalk(directory, topdown=False, follow_symlinks=False):
        for name in dirs:
            with contextlib.suppress(OSError):  # not empty, or a link: left alone
                os.rmdir(os.path.join(top, name))
    try:
        os.rmdir(directory)
    except OSError:
        return False
    return True


def _stored(root: Path, ref: str) -> tuple[str, str] | None:
    """The object the exact ref `ref` names and, for a symbolic ref, what it links to; None
    when there is no such ref (git's short-name lookup is never used)."""
    listed = run_git(
        ["for-each-ref", "--format=%(refname)%00%(objectname)%00%(symref)", ref], cwd=root
    )
    for line in listed.stdout.decode(errors="surrogateescape").splitlines():
        name, target, link = line.split("\0")
        if name == ref:
            return target, link
    return None


def find(root: Path, ref: str, sha: str) -> Snapshot | None:
    """The snapshot at `ref` when that exact ref (no short-name lookup, not symbolic, not a
    tag) points at the recorded `sha` and its commit has a snapshot's shape; None otherwise
    (`read` says which). Two git processes: the ref as it is stored, then both trees and the
    parents of `sha` in one `rev-parse`."""
    if _stored(root, ref) != (sha, ""):
        return None
    asked = [f"{sha}^{{tree}}", f"{sha}^2^{{tree}}", f"{sha}^@", "--"]  # `--`: no path
    found = run_git(["rev-parse", *asked], cwd=root, check=False)
    lines = [line for line in found.stdout.decode().split() if line != "--"]
    if found.returncode != 0 or len(lines) < 4:
        return None
    tree, index_tree, parents = lines[0], lines[1], lines[2:]
    extras = tuple(parents[3:])
    tip = parents[2] if len(parents) > 2 else parents[0]
    return Snapshot(ref, sha, parents[0], parents[1], tip, tree, index_tree, extras)


def read(root: Path, ref: str, sha: str) -> Snapshot:
    """The snapshot at `ref`, refusing, and saying why, unless `find` reads it."""
    saved = find(root, ref, sha)
    if saved is not None:
        return saved
    stored = _stored(root, ref)
    if stored is None:
        raise LaneboardError(f"snapshot {ref} is missing, expected {sha}")
    target, link = stored
    if link:
        raise LaneboardError(f"snapshot {ref} is a symbolic ref to {link}, expected {sha}")
    if target != sha:
        raise LaneboardError(f"snapshot {ref} is {target}, expected {sha}")
    listed = run_git(["rev-list", "--parents", "-n", "1", sha, "--"], cwd=root, check=False)
    parents = listed.stdout.split()[1:]
    raise LaneboardError(f"{ref} is not a laneboard snapshot ({len(parents)} parents)")


# --- restore ------------------------------------------------------------------------------


class Blobs:
    """Blob contents streamed from one `git cat-file --batch` (a blob is read in chunks straight
    into its file, never whole into memory). Each blob must be consumed before the next."""

    def __init__(self, cwd: Path) -> None:
        self._proc = subprocess.Popen(
            ["git", "cat-file", "--batch"],
            cwd=cwd,
            env=git_env(read=True),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )

    def chunks(self, sha: str) -> Iterator[bytes]:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(f"{sha}\n".encode())
        self._proc.stdin.flush()
        header = self._proc.stdout.readline().split()
        if len(header) != 3 or header[1] != b"blob":
            raise LaneboardError(f"blob {sha} cannot be read from the repository")
        remaining = int(header[2])
        while remaining:
            chunk = self._proc.stdout.read(min(remaining, 1 << 20))
            if not chunk:
                raise LaneboardError(f"blob {sha} ended early")
            remaining -= len(chunk)
            yield chunk
        self._proc.stdout.read(1)  # the newline after the content

    def close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()

    def __enter__(self) -> Blobs:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def apply(worktree: Path, snapshot: Snapshot, *, common_dir: Path) -> None:
    """Make a fresh worktree (checked out at the snapshot's branch tip) hold the snapshot:
    HEAD at the snapshot's HEAD, the index as staged, the files byte for byte as they were on
    disk, untracked files untracked. Nothing is written through a link: a symlink (or file) that
    stands where the snapshot holds a directory is removed first. Idempotent, so an interrupted
    restore can run it again."""
    if snapshot.tip and snapshot.tip != snapshot.head:
        _git(worktree, "checkout", "-q", "--detach", snapshot.head)
    present = {p: e for p, e in tree_entries(worktree, snapshot.head).items() if e[0] != GITLINK}
    wanted = {p: e for p, e in tree_entries(worktree, snapshot.tree).items() if e[0] != GITLINK}
    same = [p for p, e in wanted.items() if present.get(p) == e and e[0] != SYMLINK]
    suspect = converted(worktree, common_dir, same, everything=[*present, *wanted])
    with Below(worktree) as below, Blobs(worktree) as blobs:
        for path in sorted(set(present) - set(wanted), reverse=True):
            below.remove(path)
        for path, (mode, sha) in sorted(wanted.items()):
            if present.get(path) == (mode, sha) and path not in suspect:
                continue  # the checkout wrote exactly this blob
            if _holds(below, path, mode, sha):
                continue
            if mode == SYMLINK:
                below.symlink(path, b"".join(blobs.chunks(sha)), clear_links=True)
            else:
                below.write(path, blobs.chunks(sha), executable=mode == "100755", clear_links=True)
    _git(worktree, "read-tree", snapshot.index_tree)
    run_git([*NO_HOOKS, "update-index", "-q", "--refresh"], cwd=worktree, read=False, check=False)


def apply_over(worktree: Path, present_tree: str, snapshot: Snapshot, *, common_dir: Path) -> None:
    """Make a live worktree, whose files are exactly `present_tree` (a capture taken just
    before, under its lane), hold `snapshot`'s files and index; HEAD is the caller's to move.
    Refused, before anything is written, when a path the snapshot writes holds something the
    capture did not save (an ignored file). Nothing is written through a link."""
    present = {p: e for p, e in tree_entries(worktree, present_tree).items() if e[0] != GITLINK}
    wanted = {p: e for p, e in tree_entries(worktree, snapshot.tree).items() if e[0] != GITLINK}
    with Below(worktree) as below:
        unsaved = [p for p in wanted if p not in present and below.lstat(p) is not None]
        parents = {str(parent) for p in wanted for parent in Path(p).parents} - {"."}
        unsaved += [p for p in sorted(parents) if _unsaved_file(below, p, present)]
        if unsaved:
            raise LaneboardError(
                f"{unsaved[0]} is in the worktree but in no checkpoint (an ignored file?); "
                "move it away first"
            )
    with Below(worktree) as below, Blobs(worktree) as blobs:
        for path in sorted(set(present) - set(wanted), reverse=True):
            below.remove(path)
        for path, (mode, sha) in sorted(wanted.items()):
            if present.get(path) == (mode, sha) and _holds(below, path, mode, sha):
                continue
            if mode == SYMLINK:
                below.symlink(path, b"".join(blobs.chunks(sha)), clear_links=True)
            else:
                below.write(path, blobs.chunks(sha), executable=mode == "100755", clear_links=True)
    _git(worktree, "read-tree", snapshot.index_tree)
    run_git([*NO_HOOKS, "update-index", "-q", "--refresh"], cwd=worktree, read=False, check=False)


def _unsaved_file(below: Below, directory: str, present: dict[str, tuple[str, str]]) -> bool:
    """A regular file (or link) stands where the snapshot needs directory `directory`, and the
    capture did not save it."""
    info = below.lstat(directory)
    return info is not None and not stat.S_ISDIR(info.st_mode) and directory not in present


def _holds(below: Below, path: str, mode: str, sha: str) -> bool:
    """The entry at `path` already has the wanted kind, exec bit and raw bytes."""
    info = below.lstat(path)
    if info is None:
        return False
    if mode == SYMLINK:
        if not stat.S_ISLNK(info.st_mode):
            return False
        target = below.readlink(path)
        return raw_sha([target], len(target)) == sha
    if not stat.S_ISREG(info.st_mode):
        return False
    if bool(info.st_mode & stat.S_IXUSR) != (mode == "100755"):
        return False
    return raw_sha(below.chunks(path), info.st_size) == sha


def next_number(existing: list[int]) -> int:
    return max(existing, default=0) + 1
