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

from laneboard.core.domain.identity import Identity
from laneboard.core.domain.verdict import Reason, Verdict

MAX_GITFILE_BYTES = 1 << 20
GITFILE_PREFIX = b"gitdir: "


def _reject(reason: Reason, detail: str) -> Verdict:
    return Verdict(ok=False, reason=reason, detail=detail)


def _read_small(path: Path) -> bytes | None:
    """The content of a small regular file (not following a symlink), or None."""
    try:
        info = path.lstat()
    except OSError:
        return None
    if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_GITFILE_BYTES:
        return None
    try:
        with path.open("rb") as handle:
            return handle.read(MAX_GITFILE_BYTES + 1)
    except OSError:
        return None


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


def verify_worktree(
    path: Path,
    *,
    area: Path,
    common_dir: Path,
    admin_name: str | None,
    identity: Identity | None,
) -> Verdict:
    """Check the worktree at `path` against the repo's area and common dir and the ledger's
    admin name and pinned identity (either may be None when not yet recorded)."""
    area_real = Path(os.path.realpath(area))
    common_real = Path(os.path.realpath(common_dir))
    literal = Path(os.path.abspath(path))

    # 1. Inside the area, the area a real directory, and no symlink from the area down.
    try:
        below = literal.relative_to(Path(os.path.abspath(area)))
    except ValueError:
        return _reject(Reason.OUTSIDE_AREA, f"{literal} is not under the area {area}")
    if not below.parts:
        return _reject(Reason.OUTSIDE_AREA, f"{literal} is the area itself, not inside it")
    try:
        area_info = Path(os.path.abspath(area)).lstat()
    except OSError as err:
        return _reject(Reason.MISSING, f"the worktree area {area}: {err.strerror}")
    if stat.S_ISLNK(area_info.st_mode):
        return _reject(Reason.SYMLINKED, f"the worktree area {area} is a symbolic link")
    if not stat.S_ISDIR(area_info.st_mode):
        return _reject(Reason.NOT_A_DIRECTORY, f"the worktree area {area} is not a directory")
    current = Path(os.path.abspath(area))
    for part in below.parts:
        current = current / part
        try:
            info = current.lstat()
        except FileNotFoundError:
            return _reject(Reason.MISSING, f"{current} does not exist")
        except OSError as err:
            return _reject(Reason.MISSING, f"{current}: {err.strerror}")
        if stat.S_ISLNK(info.st_mode):
            return _reject(Reason.SYMLINKED, f"{current} is a symbolic link")
    if not stat.S_ISDIR(info.st_mode):
        return _reject(Reason.NOT_A_DIRECTORY, f"{literal} is not a directory")
    real = Path(os.path.realpath(literal))
    if area_real not in real.parents:
        return _reject(Reason.OUTSIDE_AREA, f"{literal} resolves to {real}, outside {area_real}")
    dir_info = info

    # 2. `.git` is a small regular file `gitdir: X`.
    gitfile = literal / ".git"
    try:
        git_info = gitfile.lstat()
    except FileNotFoundError:
        return _reject(Reason.MISSING, f"{gitfile} does not exist")
    except OSError as err:
        return _reject(Reason.MISSING, f"{gitfile}: {err.strerror}")
    if stat.S_ISLNK(git_info.st_mode):
        return _reject(Reason.SYMLINKED, f"{gitfile} is a symbolic link")
    if not stat.S_ISREG(git_info.st_mode):
        kind = "a directory" if stat.S_ISDIR(git_info.st_mode) else "not a regular file"
        return _reject(Reason.GITFILE_NOT_REGULAR, f"{gitfile} is {kind}")
    if git_info.st_size > MAX_GITFILE_BYTES:
        return _reject(Reason.GITFILE_TOO_LARGE, f"{gitfile} is {git_info.st_size} bytes")
    raw_content = _read_small(gitfile)
    if raw_content is None:
        return _reject(Reason.GITFILE_NOT_REGULAR, f"{gitfile} cannot be read as a small file")
    content = _clean(raw_content)
    if content is None:
        return _reject(Reason.GITFILE_MALFORMED, f"{gitfile} contains a NUL byte")
    if not content.startswith(GITFILE_PREFIX) or len(content) == len(GITFILE_PREFIX):
        return _reject(Reason.GITFILE_MALFORMED, f"{gitfile} does not hold 'gitdir: <path>'")

    # 3. gitdir: X is this repo's admin dir for the recorded admin name.
    raw_target = content[len(GITFILE_PREFIX) :]
    target_literal = Path(os.fsdecode(raw_target))
    if not target_literal.is_absolute():
        target_literal = literal / target_literal
    admin = _resolve(raw_target, literal)
    # Before the realpath comparison: a symlinked admin dir resolves out of `worktrees/` and would
    # otherwise be reported as a gitdir mismatch instead of a symlink.
    if os.path.islink(target_literal):
        return _reject(Reason.SYMLINKED, f"the admin dir {target_literal} is a symbolic link")
    worktrees_dir = common_real / "worktrees"
    if admin.parent != worktrees_dir:
        return _reject(
            Reason.GITDIR_MISMATCH, f"{gitfile} points to {admin}, not into {worktrees_dir}"
        )
    if admin_name is not None and admin.name != admin_name:
        return _reject(
            Reason.GITDIR_MISMATCH,
            f"{gitfile} names admin dir {admin.name!r}, the ledger recorded {admin_name!r}",
        )
    try:
        admin_info = (worktrees_dir / admin.name).lstat()
    except OSError:
        return _reject(Reason.GITDIR_MISMATCH, f"{admin} does not exist")
    if stat.S_ISLNK(admin_info.st_mode):
        return _reject(Reason.SYMLINKED, f"the admin dir {admin} is reached through a symlink")
    if not stat.S_ISDIR(admin_info.st_mode):
        return _reject(Reason.GITDIR_MISMATCH, f"{admin} is not a directory")

    # 4. X/commondir leads back to the repo.
    commondir_raw = _clean(_read_small(admin / "commondir"))
    if not commondir_raw:
        return _reject(Reason.COMMONDIR_MISMATCH, f"{admin}/commondir is missing or unreadable")
    if _resolve(commondir_raw, admin) != common_real:
        return _reject(
            Reason.COMMONDIR_MISMATCH, f"{admin}/commondir does not lead to {common_real}"
        )

    # 5. X/gitdir points back at this very `.git` file.
    backlink_raw = _clean(_read_small(admin / "gitdir"))
    if not backlink_raw:
        return _reject(Reason.BACKLINK_MISMATCH, f"{admin}/gitdir is missing or unreadable")
    backlink = _resolve(backlink_raw, admin)
    if backlink != Path(os.path.realpath(gitfile)):
        return _reject(Reason.BACKLINK_MISMATCH, f"{admin}/gitdir points to {backlink}")

    # 6. The same directory and file as when laneboard created them.
    observed = Identity(
        dir_dev=dir_info.st_dev,
        dir_ino=dir_info.st_ino,
        gitfile_dev=git_info.st_dev,
        gitfile_ino=git_info.st_ino,
    )
    if identity is not None and observed != identity:
        return _reject(
            Reason.IDENTITY_CHANGED,
            f"{literal} is not the directory laneboard created (moved, copied or replaced)",
        )
    return Verdict(ok=True, admin_name=admin.name, identity=observed)


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
