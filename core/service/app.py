"""The application service: the one entry the CLI and the TUI call.

Each method is one operator action or read. It opens what it needs from the ledger and the repo,
applies the domain's decisions, and returns values; it prints nothing and never exits. Callers
wire the actor (cli, tui, hook) so the journal says who did what.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from laneboard.core.domain.cleanup import Decision
from laneboard.core.operations import discard as removal
from laneboard.core.operations import provision as provision_mod
from laneboard.core.operations import restore as restore_mod

if TYPE_CHECKING:
    from laneboard.core.operations import doctor as doctor_mod
from laneboard.core.adapters.config import load_settings
from laneboard.core.adapters.git import discover, resolve_at
from laneboard.core.adapters.leases import LeaseStore
from laneboard.core.adapters.ledger import Ledger
from laneboard.core.adapters.repo import RepoContext
from laneboard.core.adapters.verify import Reason, Verdict, verify_worktree
from laneboard.core.domain.errors import ConfigError, LaneboardError
from laneboard.core.domain.lanes import Lease, LeaseState
from laneboard.core.domain.models import Actor, Event, Repo, Task
from laneboard.core.domain.names import branch_for
from laneboard.core.domain.runtime import NoRuntime, Runtime
from laneboard.core.operations.repos import open_repo


class UnknownTask(LaneboardError):
    """No task of the repo has that name or id."""


@dataclass(frozen=True)
class LaneView:
    """One lane of a repo as the board shows it: what runs there and what waits for it."""

    label: str
    """`root`, or the task's name."""
    task_id: str | None
    running: list[Lease]
    waiting: list[Lease]


@dataclass(frozen=True)
class LanesReport:
    """Every lane of the repos asked for, with the machine-wide slot count and use."""

    slots: int
    used: int
    repos: list[tuple[Repo, list[LaneView]]]


@dataclass(frozen=True)
class TaskView:
    """A task with the repo it belongs to, as reads return it."""

    task: Task
    repo: Repo


class Board:
    """laneboard's operations over one ledger."""

    def __init__(
        self, ledger: Ledger, *, actor: Actor = Actor.CLI, runtime: Runtime | None = None
    ) -> None:
        self.ledger = ledger
        self.actor = actor
        self.runtime: Runtime = runtime or NoRuntime()

    # --- repos ---------------------------------------------------------------------------

    def repo(self, path: Path, *, register: bool = False) -> RepoContext:
        """The repo containing `path` (root or any worktree), registering it if asked."""
        return open_repo(self.ledger, path, register=register, actor=self.actor)

    def init(self, path: Path) -> tuple[RepoContext, bool]:
        """Register the repository at `path`. Returns (context, newly registered)."""
        ctx = self.repo(path, register=True)
        return ctx, ctx.registered_now

    # --- tasks ---------------------------------------------------------------------------

    def new(
        self,
        path: Path,
        name: str,
        *,
        base: str | None = None,
        on_wait: Callable[[Lease], None] | None = None,
        on_output: Callable[[bytes], None] | None = None,
    ) -> tuple[Task, RepoContext]:
        """Provision task `name` from `base` (default: the root's HEAD) in the repo containing
        `path`, registering the repo if needed, but only once the name and base are valid: a
        refused `new` changes nothing. `on_wait` is told when it waits for the root lane."""
        paths = discover(path)
        settings = load_settings(paths.root)
        branch_for(settings.branch_prefix, name)
        # As git means it: `HEAD` (or `@{-1}`, `HEAD~2`) of the checkout the command runs in.
        base_sha = resolve_at(path, base or "HEAD")
        ctx = self.repo(path, register=True)
        task = provision_mod.provision(
            ctx, self.ledger, name, base or "HEAD", base_sha, self.actor, on_wait, on_output
        )
        return task, ctx

    def retain(self, ctx: RepoContext, name: str) -> Task:
        """Stop the task's agent, keep its worktree and branch."""
        return removal.retain(ctx, self.ledger, self._live(ctx, name), self.runtime, self.actor)

    def discard_preview(self, ctx: RepoContext, name: str) -> Decision:
        """What would block discarding the task right now (changes nothing)."""
        return removal.preview(ctx, self.ledger, self._live(ctx, name), self.runtime)

    def discard(
        self,
        ctx: RepoContext,
        name: str,
        *,
        force: bool = False,
        on_wait: Callable[[Lease], None] | None = None,
    ) -> Task:
        """Snapshot and remove the task's worktree and branch, or refuse with every blocker."""
        return removal.discard(
            ctx,
            self.ledger,
            self._live(ctx, name),
            force=force,
            runtime=self.runtime,
            actor=self.actor,
            on_wait=on_wait,
        )

    def restore(
        self,
        ctx: RepoContext,
        name: str,
        *,
        as_name: str | None = None,
        on_wait: Callable[[Lease], None] | None = None,
    ) -> Task:
        """Bring the newest snapshot of the task `name` back as a new task."""
        return restore_mod.restore(ctx, self.ledger, name, self.actor, on_wait, as_name=as_name)

    def snapshots(self, task: Task) -> list[tuple[int, str, str]]:
        return self.ledger.snapshots(task.id)

    def _live(self, ctx: RepoContext, name: str) -> Task:
        task = self.task(ctx, name)
        if not task.live:
            raise LaneboardError(f"task {task.name} is {task.state.value}; it has been retired")
        return task

    def task(self, ctx: RepoContext, name: str) -> Task:
        """The live task called `name` (or with that id), else the latest retired one."""
        found = self.ledger.find_task(ctx.repo.id, name)
        if found is None:
            found = next((t for t in self.ledger.tasks(ctx.repo.id) if t.id == name), None)
        if found is None:
            raise UnknownTask(f"no task named {name!r} in {ctx.root}")
        return found

    def tasks(self, ctx: RepoContext | None, *, include_retired: bool = False) -> list[TaskView]:
        """Tasks of one repo, or of every registered repo when `ctx` is None."""
        repos = [ctx.repo] if ctx else self.ledger.repos()
        return [
            TaskView(task, repo)
            for repo in repos
            for task in self.ledger.tasks(repo.id, include_retired=include_retired)
        ]

    def log(self, ctx: RepoContext, name: str) -> tuple[Task, list[Event]]:
        """The task and its whole journal, oldest first."""
        task = self.task(ctx, name)
        return task, self.ledger.events(task.id)

    def verify(self, ctx: RepoContext, name: str, *, repin: bool = False) -> tuple[Task, Verdict]:
        """Verify the task's worktree against its pinned identity (filesystem reads only).

        `repin` takes a new device number after a remount: allowed only when every other check
        passes and both inodes are still the pinned ones, so it can never adopt another
        directory; it is journalled with the old and new identity."""
        task = self.task(ctx, name)
        verdict = ctx.verify(task)
        if not repin or verdict.ok:
            return task, verdict
        if verdict.reason is not Reason.IDENTITY_CHANGED or task.identity is None:
            raise LaneboardError(f"{task.name}: --repin only follows a device change: {verdict}")
        seen = verify_worktree(
            Path(task.worktree_path),
            area=Path(task.area),
            common_dir=ctx.common_dir,
            admin_name=task.admin_name,
            identity=None,
        )
        old = task.identity
        new = seen.identity
        if (
            not seen.ok
            or new is None
            or (new.dir_ino, new.gitfile_ino)
            != (
                old.dir_ino,
                old.gitfile_ino,
            )
        ):
            raise LaneboardError(
                f"{task.name}: refusing to repin: {task.worktree_path} is not the directory "
                "laneboard created (its inodes differ), only a device number may change"
            )
        task = self.ledger.update_task(
            task.id,
            actor=self.actor,
            kind="worktree.repinned",
            data={"old": old.as_dict(), "new": new.as_dict()},
            identity=new,
        )
        return task, ctx.verify(task)

    # --- lanes ---------------------------------------------------------------------------

    def lanes(self, ctx: RepoContext | None) -> LanesReport:
        """The root lane and each live task's worktree lane, per repo (one, or all), with their
        running and waiting leases. Runs an admission pass first, so dead holders are reaped and
        the wait reasons are current."""
        settings = ctx.settings if ctx else load_settings(None)
        store = LeaseStore(self.ledger.database, settings.lanes.slots)
        store.run_pass()
        active = store.active()
        repos = [ctx.repo] if ctx else self.ledger.repos()
        report: list[tuple[Repo, list[LaneView]]] = []
        for repo in repos:
            mine = [lease for lease in active if lease.repo_id == repo.id]
            lanes = [(None, "root")] + [
                (t.id, t.name) for t in self.ledger.tasks(repo.id, include_retired=False)
            ]
            views = [
                LaneView(
                    label=label,
                    task_id=lane,
                    running=[x for x in mine if x.lane == lane and x.state is LeaseState.RUNNING],
                    waiting=[x for x in mine if x.lane == lane and x.state is LeaseState.WAITING],
                )
                for lane, label in lanes
            ]
            report.append((repo, views))
        used = sum(1 for lease in active if lease.state is LeaseState.RUNNING)
        return LanesReport(slots=store.slots, used=used, repos=report)

    # --- reconciliation ------------------------------------------------------------------

    def doctor(
        self, ctx: RepoContext | None, *, fix: bool
    ) -> list[tuple[Repo, list[doctor_mod.Finding]]]:
        """Findings per repo (the given one, or every registered repo)."""
        from laneboard.core.operations import doctor as doctor_mod

        contexts: list[tuple[Repo, RepoContext | None, doctor_mod.Finding | None]] = []
        if ctx is not None:
            contexts.append((ctx.repo, ctx, None))
        else:
            for repo in self.ledger.repos():
                try:
                    contexts.append((repo, self.repo(Path(repo.root)), None))
                except ConfigError as err:
                    contexts.append((repo, None, doctor_mod.Finding("config-invalid", str(err))))
                except LaneboardError:
                    contexts.append((repo, None, None))
        report: list[tuple[Repo, list[doctor_mod.Finding]]] = []
        for repo, context, problem in contexts:
            if problem is not None:
                report.append((repo, [problem]))
                continue
            if context is None or context.repo.id != repo.id:
                missing = doctor_mod.Finding(
                    "repo-missing", f"{repo.root} is no longer this repository's checkout"
                )
                report.append((repo, [missing]))
                continue
            try:
                found = doctor_mod.diagnose(context, self.ledger, fix=fix, runtime=self.runtime)
            except LaneboardError as err:  # one unreadable repo must not hide the others
                found = [doctor_mod.Finding("check-failed", f"could not check it: {err}")]
            report.append((repo, found))
        return report
