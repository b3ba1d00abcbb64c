"""A registered repository found again after it moved (`mv ~/src/app ~/work/app`).

The ledger keys a repository by its common dir's path, and also keeps what survives a move: the
device/inode of that dir and its root commit (`RepoIdentity`). When a repository is opened at a
path the ledger does not know, but an identity matches a record whose path is gone, that record
is the repository: its paths are updated, and the links of laneboard's own worktrees only (never
a repo-wide repair) are repaired with `git worktree repair <path>`, under the root lane. A
worktree is taken back only when its directory is the one laneboard pinned (same device and
inode, which a `mv` within a filesystem keeps) and it then verifies; the `.git` file's identity
is re-pinned if the repair rewrote it. Everything done is journalled (`repo.moved`,
`task.relocated`) and reported.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from laneboard.core.adapters.config import Settings
from laneboard.core.adapters.git import GitRepo, RepoPaths, run_git
from laneboard.core.adapters.leases import LeaseStore, hold
from laneboard.core.adapters.ledger import Ledger, RepoIdentity
from laneboard.core.adapters.verify import verify_worktree
from laneboard.core.domain.lanes import LeaseKind
from laneboard.core.domain.models import Actor, Relocation, Repo, Task


def identity_of(paths: RepoPaths, git: GitRepo) -> RepoIdentity:
    info = os.stat(paths.common_dir)
    return RepoIdentity(info.st_dev, info.st_ino, git.root_commit())


def find_moved(
    ledger: Ledger, paths: RepoPaths, identity: RepoIdentity, git: GitRepo
) -> Repo | None:
    """The record of this repository made when it lived elsewhere, if any: same device and
    inode of the common dir, an old path that no longer exists, and its root commit here."""
    for repo in ledger.repos_by_identity(identity.dev, identity.ino):
        if repo.common_dir == str(paths.common_dir) or os.path.lexists(repo.common_dir):
            continue
        if repo.root_commit is not None and not git.has_commit(repo.root_commit):
            continue
        return repo
    return None


def relocate(
    ledger: Ledger, old: Repo, paths: RepoPaths, settings: Settings, actor: Actor
) -> Relocation:
    """Move the record `old` to `paths` and repair the links of its live tasks' worktrees."""
    old_root, new_root = Path(old.root), paths.root
    done = Relocation(old, old.root)
    updates: list[tuple[str, dict[str, Any]]] = []
    store = LeaseStore(ledger.database, settings.lanes.slots)
    command = ["git", "worktree", "repair", "(laneboard's worktrees)"]
    with hold(store, repo_id=old.id, lane=None, kind=LeaseKind.REPAIR, command=command):
        for task in ledger.tasks(old.id, include_retired=False):
            area, path = _new_place(task, old_root, new_root)
            fields: dict[str, Any] = {"area": str(area), "worktree_path": str(path)}
            problem = _repair(task, path, area, paths, fields)
            if problem:
                done.problems.append(f"{task.name}: {problem}")
            else:
                done.repaired.append(task.name)
            updates.append((task.id, fields))
        done.repo = ledger.relocate_repo(
            old.id,
            common_dir=str(paths.common_dir),
            root=str(new_root),
            tasks=updates,
            actor=actor,
            data={
                "from": {"common_dir": old.common_dir, "root": old.root},
                "to": {"common_dir": str(paths.common_dir), "root": str(new_root)},
                "repaired": done.repaired,
                "problems": done.problems,
            },
        )
    return done


def _new_place(task: Task, old_root: Path, new_root: Path) -> tuple[Path, Path]:
    """Where the task's area and worktree are now: moved along when they were inside the
    root; a sibling area stays where it was unless it is gone and one sits beside the new root."""
    area, path = Path(task.area), Path(task.worktree_path)
    below = path.relative_to(area)
    try:
        new_area = new_root / area.relative_to(old_root)
    except ValueError:
        beside = new_root.parent / area.name
        new_area = beside if not os.path.lexists(area) and os.path.isdir(beside) else area
    return new_area, new_area / below


def _repair(
    task: Task, path: Path, area: Path, paths: RepoPaths, fields: dict[str, Any]
) -> str | None:
    """Repair git's links of one worktree and verify it; None when it verifies again."""
    identity = task.identity
    if identity is None or not os.path.isdir(path):
        return f"no worktree at {path}"
    info = path.lstat()
    if (info.st_dev, info.st_ino) != (identity.dir_dev, identity.dir_ino):
        return f"{path} is not the directory laneboard created (left alone)"
    repaired = run_git(["worktree", "repair", str(path)], cwd=paths.root, read=False, check=False)
    verdict = verify_worktree(
        path, area=area, common_dir=paths.common_dir, admin_name=task.admin_name, identity=None
    )
    if not verdict.ok:
        said = repaired.stderr.decode(errors="replace").strip().splitlines()
        return f"cannot repair {path}: {verdict}" + (f" ({said[-1]})" if said else "")
    if verdict.identity is not None and verdict.identity != identity:
        fields["identity"] = verdict.identity  # the repair rewrote `.git`; the directory is ours
    return None
