"""Worktree verification by filesystem reads only (DESIGN.md section 5).

Runs before a lease is admitted on a worktree lane, before an agent is launched or sent keys, and
before every destructive step. It starts no git process (no hooks, no config) and no pygit2: every
fact comes from `lstat`, `realpath` and reading small files. The first failed check is the verdict;
nothing is dispatched on a rejection. It is deliberately stricter than git (git follows a
symlinked `.git`; laneboard does not).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from laneboard.core.adapters import safefs
from laneboard.core.domain.identity import TOKEN_FILE, Identity
from laneboard.core.domain.verdict import Reason, Verdict

MAX_GITFILE_BYTES = 1 << 20
GITFILE_PREFIX = b"gitdir: "


def _reject(reason: Reason, detail: str) -> Verdict:
    return Verdict(ok=False, reason=reason, detail=detail)


def _read_small(path: Path) -> bytes | None:
    """The content of a small regular file (not following a symlink, never blocking on a FIFO
    swapped in after a look), or None."""
    return safefs.read_regular(path, MAX_GITFILE_BYTES)


def _strip_eol(raw: bytes) -> bytes:
    # git trims trailing newlines and carriage returns from these files, nothing else.
    return raw.rstrip(b"\r\n")


def _clean(raw: bytes | None) -> bytes | None:
    """File content without git's trailing newlines; None when absent or holding a NUL byte
    (no path contains one, and the OS would refuse it)."""
    if raw is None or b"\0" in raw:
        return None
    return _strip_eol(raw)


def _resolve(raw: bytes, base: Path) -> Path:
    target = Path(os.fsdecode(raw))
    return Path(os.path.realpath(target if target.is_absolute() else base / target))


class _Rejected(Exception):
    """One step's rejection, carried up to `verify_worktree`, which returns it as the verdict."""

    def __init__(self, reason: Reason, detail: str) -> None:
        super().__init__(detail)
        self.verdict = _reject(reason, detail)


def _lstat(path: Path, what: str = "") -> os.stat_result:
    try:
        return path.lstat()
    except FileNotFoundError:
        raise _Rejected(Reason.MISSING, f"{what}{path} does not exist") from None
    except OSError as err:
        raise _Rejected(Reason.MISSING, f"{what}{path}: {err.strerror}") from None


def _inside_area(literal: Path, area: Path) -> os.stat_result:
    """Step 1: the path is strictly inside the area, the area is a real directory at its
    place, and no component from the area down is a symlink. Returns the directory's lstat."""
    top = Path(os.path.abspath(area))
    try:
        below = literal.relative_to(top)
    except ValueError:
        raise _Rejected(Reason.OUTSIDE_AREA, f"{literal} is not under the area {area}") from None
    if not below.parts:
        raise _Rejected(Reason.OUTSIDE_AREA, f"{literal} is the area itself, not inside it")
    area_info = _lstat(top, "the worktree area ")
    if stat.S_ISLNK(area_info.st_mode):
        raise _Rejected(Reason.SYMLINKED, f"the worktree area {area} is a symbolic link")
    if not stat.S_ISDIR(area_info.st_mode):
        raise _Rejected(Reason.NOT_A_DIRECTORY, f"the worktree area {area} is not a directory")
    current, info = top, area_info
    for part in below.parts:
        current = current / part
        info = _lstat(current)
        if stat.S_ISLNK(info.st_mode):
            raise _Rejected(Reason.SYMLINKED, f"{current} is a symbolic link")
    if not stat.S_ISDIR(info.st_mode):
        raise _Rejected(Reason.NOT_A_DIRECTORY, f"{literal} is not a directory")
    real, area_real = Path(os.path.realpath(literal)), Path(os.path.realpath(area))
    if area_real not in real.parents:
        raise _Rejected(Reason.OUTSIDE_AREA, f"{literal} resolves to {real}, outside {area_real}")
    return info


def _gitfile(literal: Path) -> tuple[os.stat_result, bytes]:
    """Step 2: `.git` is a small regular file `gitdir: X`. Returns its lstat and X."""
    gitfile = literal / ".git"
    info = _lstat(gitfile)
    if stat.S_ISLNK(info.st_mode):
        raise _Rejected(Reason.SYMLINKED, f"{gitfile} is a symbolic link")
    if not stat.S_ISREG(info.st_mode):
        kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file"
        raise _Rejected(Reason.GITFILE_NOT_REGULAR, f"{gitfile} is {kind}")
    if info.st_size > MAX_GITFILE_BYTES:
        raise _Rejected(Reason.GITFILE_TOO_LARGE, f"{gitfile} is {info.st_size} bytes")
    raw = _read_small(gitfile)
    if raw is None:
        raise _Rejected(Reason.GITFILE_NOT_REGULAR, f"{gitfile} cannot be read as a small file")
    content = _clean(raw)
    if content is None:
        raise _Rejected(Reason.GITFILE_MALFORMED, f"{gitfile} contains a NUL byte")
    if not content.startswith(GITFILE_PREFIX) or len(content) == len(GITFILE_PREFIX):
        raise _Rejected(Reason.GITFILE_MALFORMED, f"{gitfile} does not hold 'gitdir: <path>'")
    return info, content[len(GITFILE_PREFIX) :]


def _admin_dir(literal: Path, target: bytes, common: Path, admin_name: str | None) -> Path:
    """Step 3: X is this repo's admin dir for the recorded admin name, a real directory."""
    gitfile = literal / ".git"
    target_literal = Path(os.fsdecode(target))
    if not target_literal.is_absolute():
        target_literal = literal / target_literal
    admin = _resolve(target, literal)
    # Before the realpath comparison: a symlinked admin dir resolves out of `worktrees/` and would
    # otherwise be reported as a gitdir mismatch instead of a symlink.
    if os.path.islink(target_literal):
        raise _Rejected(Reason.SYMLINKED, f"the admin dir {target_literal} is a symbolic link")
    worktrees_dir = common / "worktrees"
    if admin.parent != worktrees_dir:
        raise _Rejected(
            Reason.GITDIR_MISMATCH, f"{gitfile} points to {admin}, not into {worktrees_dir}"
        )
    if admin_name is not None and admin.name != admin_name:
        raise _Rejected(
            Reason.GITDIR_MISMATCH,
            f"{gitfile} names admin dir {admin.name!r}, the ledger recorded {admin_name!r}",
        )
    try:
        info = (worktrees_dir / admin.name).lstat()
    except OSError:
        raise _Rejected(Reason.GITDIR_MISMATCH, f"{admin} does not exist") from None
    if stat.S_ISLNK(info.st_mode):
        raise _Rejected(Reason.SYMLINKED, f"the admin dir {admin} is reached through a symlink")
    if not stat.S_ISDIR(info.st_mode):
        raise _Rejected(Reason.GITDIR_MISMATCH, f"{admin} is not a directory")
    return admin


def _commondir(admin: Path, common: Path) -> None:
    """Step 4: X/commondir leads back to the repo's common dir."""
    raw = _clean(_read_small(admin / "commondir"))
    if not raw:
        raise _Rejected(Reason.COMMONDIR_MISMATCH, f"{admin}/commondir is missing or unreadable")
    if _resolve(raw, admin) != common:
        raise _Rejected(Reason.COMMONDIR_MISMATCH, f"{admin}/commondir does not lead to {common}")


def _backlink(admin: Path, gitfile: Path) -> None:
    """Step 5: X/gitdir points back at this very `.git` file."""
    raw = _clean(_read_small(admin / "gitdir"))
    if not raw:
        raise _Rejected(Reason.BACKLINK_MISMATCH, f"{admin}/gitdir is missing or unreadable")
    backlink = _resolve(raw, admin)
    if backlink != Path(os.path.realpath(gitfile)):
        raise _Rejected(Reason.BACKLINK_MISMATCH, f"{admin}/gitdir points to {backlink}")


def _identity(
    literal: Path,
    dir_info: os.stat_result,
    git_info: os.stat_result,
    admin: Path,
    pinned: Identity | None,
) -> Identity:
    """Step 6: the same directory and `.git` file (device and inode) as laneboard pinned, and
    the admin dir holding the token laneboard wrote there (a re-created worktree may get the
    inodes back, never the token)."""
    token = _clean(_read_small(admin / TOKEN_FILE))
    observed = Identity(
        dir_dev=dir_info.st_dev,
        dir_ino=dir_info.st_ino,
        gitfile_dev=git_info.st_dev,
        gitfile_ino=git_info.st_ino,
        admin_token=token.decode(errors="replace") if token else None,
    )
    if pinned is not None and not pinned.matches(observed):
        raise _Rejected(
            Reason.IDENTITY_CHANGED,
            f"{literal} is not the directory laneboard created (moved, copied or replaced)",
        )
    return observed


def verify_worktree(
    path: Path,
    *,
    area: Path,
    common_dir: Path,
    admin_name: str | None,
    identity: Identity | None,
) -> Verdict:
    """Check the worktree at `path` against the repo's area and common dir and the ledger's
    admin name and pinned identity (either may be None when not yet recorded): the steps of
    DESIGN.md section 5, in order; the first that fails is the verdict."""
    literal = Path(os.path.abspath(path))
    common = Path(os.path.realpath(common_dir))
    try:
        dir_info = _inside_area(literal, area)
        git_info, target = _gitfile(literal)
        admin = _admin_dir(literal, target, common, admin_name)
        _commondir(admin, common)
        _backlink(admin, literal / ".git")
        observed = _identity(literal, dir_info, git_info, admin, identity)
    except _Rejected as rejected:
        return rejected.verdict
    return Verdict(ok=True, admin_name=admin.name, identity=observed)


def still_pinned(path: Path, identity: Identity | None) -> bool:
    """Whether the directory at `path` and its `.git` file are still the pinned ones (two
    stats). Only for a worktree the controller's watch proves unchanged since it was verified
    in full (`Service._views`): what a full verification reads inside the worktree and its admin
    dir cannot have changed then, so this is what is left to check (the path itself, whose
    parents the watch does not cover). Never a substitute for `verify_worktree` before an
    action."""
    if identity is None:
        return False
    try:
        seen = os.stat(path)
        gitfile = os.lstat(path / ".git")
    except OSError:
        return False
    return (
        (seen.st_dev, seen.st_ino, gitfile.st_dev, gitfile.st_ino)
        == (
            identity.dir_dev,
            identity.dir_ino,
            identity.gitfile_dev,
            identity.gitfile_ino,
        )
        and stat.S_ISDIR(seen.st_mode)
        and stat.S_ISREG(gitfile.st_mode)
    )


def common_dir_of(path: Path) -> Path | None:
    """The common git dir of the checkout containing `path` (the root or a linked worktree),
    found by reading `.git` files upward from `path`; None when there is none.

    Lenient where `verify_worktree` is strict: it only locates the repository (for the lean
    `laneboard exec` path, which must not pay for pygit2); everything it leads to is verified
    before use.
    """
    current = Path(os.path.abspath(path))
    for directory in (current, *current.parents):
        dotgit = directory / ".git"
        if dotgit.is_dir():
            return Path(os.path.realpath(dotgit))
        if not os.path.lexists(dotgit):
            continue
        content = _clean(_read_small(dotgit))
        if content is None or not content.startswith(GITFILE_PREFIX):
            return None
        gitdir = _resolve(content[len(GITFILE_PREFIX) :], directory)
        commondir = _clean(_read_small(gitdir / "commondir"))
        if commondir is None:
            return gitdir
        return _resolve(commondir, gitdir)
    return None
