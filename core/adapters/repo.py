"""A registered repository in use: its paths, settings, git handle and worktree area.

Built once per command by `core.operations.repos.open_repo` from `--repo` or the current
directory (the root or any worktree of it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from laneboard.core.adapters.config import Settings
from laneboard.core.adapters.git import GitRepo, RepoPaths
from laneboard.core.adapters.leases import Cancel, Held, LeaseStore, hold
from laneboard.core.adapters.ledger import Ledger
from laneboard.core.adapters.verify import still_pinned, verify_worktree
from laneboard.core.domain.errors import LaneboardError
from laneboard.core.domain.lanes import Lease, LeaseKind
from laneboard.core.domain.models import Relocation, Repo, Task
from laneboard.core.domain.values import value
from laneboard.core.domain.verdict import Verdict


class NotRegistered(LaneboardError):
    """The repository has not been registered with `laneboard init`."""


@value(frozen=False)
class RepoContext:
    repo: Repo
    paths: RepoPaths
    settings: Settings
    git: GitRepo
    registered_now: bool = False
    """This context registered the repo (it was unknown to the ledger before)."""
    relocation: Relocation | None = None
    """Set when opening it found the repo moved since it was registered (and repaired it)."""
    on_wait: Callable[[Lease], None] | None = None
    """Told once each time a lane of this repo has to be waited for (the CLI prints a line)."""
    cancel: Cancel | None = None
    """Cancels any wait for a lane of this repo (the board's cancel button)."""
    on_output: Callable[[bytes], None] | None = None
    """Receives the output of commands laneboard runs for the operator (a setup command)."""

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

    def verify_unchanged(self, task: Task) -> Verdict:
        """The verdict of a worktree the controller's watch proves unchanged since it was last
        verified in full with success: `ok` when its directory and `.git` file are still the
        pinned ones (`still_pinned`), else a full verification. For reads only."""
        if still_pinned(Path(task.worktree_path), task.identity):
            return Verdict(ok=True, admin_name=task.admin_name, identity=task.identity)
        return self.verify(task)

    @contextmanager
    def lane(
        self,
        ledger: Ledger,
        lane: str | None,
        kind: LeaseKind,
        command: list[str],
        parent: Held | None = None,
    ) -> Iterator[Held]:
        """Hold one of this repo's lanes (None = the root lane) for the block, after waiting for
        admission like any `laneboard exec` (telling `on_wait`, stopping when `cancel` is set);
        nested in `parent`, a lease this process holds, when given."""
        store = LeaseStore(ledger.database, self.settings.lanes.slots)
        with hold(
            store,
            repo_id=self.repo.id,
            lane=lane,
            kind=kind,
            command=command,
            repo_cap=self.settings.lanes.repo_cap,
            on_wait=self.on_wait,
            cancel=self.cancel,
            parent=parent,
        ) as held:
            yield held
