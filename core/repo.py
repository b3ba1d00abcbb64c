"""A registered repository in use: its paths, settings, git handle and worktree area.

Built once per command from `--repo` or the current directory (the root or any worktree of it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from core.config import Settings, load_settings
from core.errors import LaneboardError
from core.git import GitRepo, RepoPaths, discover
from core.leases import Held, Lease, LeaseKind, LeaseStore, hold
from core.ledger import Ledger
from core.models import Actor, Repo, Task
from core.relocate import Relocation, find_moved, identity_of, relocate
from core.verify import Verdict, verify_worktree


class NotRegistered(LaneboardError):
    """The repository has not been registered with `laneboard init`."""


@dataclass
class RepoContext:
    repo: Repo
    paths: RepoPaths
    settings: Settings
    git: GitRepo
    registered_now: bool = False
    """This context registered the repo (it was unknown to the ledger before)."""
    relocation: Relocation | None = None
    """Set when opening it found the repo moved since it was registered (and repaired it)."""

    @property
    def root(self) -> Path:
        return self.paths.root

    @property
    def common_dir(self) -> Path:
        return self.paths.common_dir

    @property
    def area(self) -> Path:
        """Where new worktrees go (existing tasks keep the area recorded at their creation)."""
        if self.settings.worktrees.area == "sibling":
            return self.root.parent / f"{self.root.name}.worktrees"
        return self.root / ".worktrees"

    def verify(self, task: Task, *, path: Path | None = None) -> Verdict:
        """Verify the task's worktree against this repo, its area and its pinned identity; at
        `path` when it is somewhere else for now (a discard's quarantine)."""
        return verify_worktree(
            path or Path(task.worktree_path),
            area=Path(task.area),
            common_dir=self.common_dir,
            admin_name=task.admin_name,
            identity=task.identity,
        )

    @contextmanager
    def lane(
        self,
        ledger: Ledger,
        lane: str | None,
        kind: LeaseKind,
        command: list[str],
        on_wait: Callable[[Lease], None] | None = None,
    ) -> Iterator[Held]:
        """Hold one of this repo's lanes (None = the root lane) for the block, after waiting for
        admission like any `laneboard exec`."""
        store = LeaseStore(ledger.database, self.settings.lanes.slots)
        with hold(
            store,
            repo_id=self.repo.id,
            lane=lane,
            kind=kind,
            command=command,
            repo_cap=self.settings.lanes.repo_cap,
            on_wait=on_wait,
        ) as held:
            yield held


def open_repo(ledger: Ledger, path: Path, *, register: bool, actor: Actor) -> RepoContext:
    """The repo that contains `path`. With `register`, an unknown repo is registered (as
    `laneboard init` does); otherwise it is refused with a hint. A registered repo that moved
    is recognised by its identity, and its record and laneboard's worktrees are repaired."""

    def registered_root(common: Path) -> Path | None:
        known = ledger.repo_by_common_dir(str(common))
        return Path(known.root) if known else None

    paths = discover(path, registered_root=registered_root)
    settings = load_settings(paths.root)
    git = GitRepo(paths)
    repo = ledger.repo_by_common_dir(str(paths.common_dir))
    created = False
    relocation = None
    if repo is None:
        identity = identity_of(paths, git)
        moved = find_moved(ledger, paths, identity, git)
        if moved is not None:
            relocation = relocate(ledger, moved, paths, settings, actor)
            repo = relocation.repo
        elif not register:
            raise NotRegistered(
                f"{paths.root} is not registered with laneboard; run `laneboard init {paths.root}`"
            )
        else:
            repo, created = ledger.ensure_repo(
                str(paths.common_dir), str(paths.root), paths.name, actor, identity
            )
    elif repo.common_ino is None:  # registered before identities were kept
        ledger.set_repo_identity(repo.id, identity_of(paths, git))
    return RepoContext(
        repo=repo,
        paths=paths,
        settings=settings,
        git=git,
        registered_now=created,
        relocation=relocation,
    )
