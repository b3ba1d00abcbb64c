"""The service's review, conflict radar, finalize, publish and rebase (DESIGN.md section 7),
mixed into `Service` so the command line and the board call the same methods.

Each returns plain values (`Review`, `Radar`, `Outcome`) and raises `LaneboardError` with a
one-line reason. Finalize and rebase may wait for a lane: `on_wait` hears it, `cancel` ends
the wait (nothing has changed then).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from laneboard.core.adapters.leases import Cancel
from laneboard.core.domain.cleanup import Refused
from laneboard.core.domain.errors import LaneboardError
from laneboard.core.domain.models import Repo, Task, TaskState
from laneboard.core.domain.review import Radar, Review
from laneboard.core.domain.views import Outcome
from laneboard.core.service.parts import OnOutput, OnWait, RepoRef, ServicePart

if TYPE_CHECKING:
    pass


FINALIZABLE = (
    TaskState.PROVISIONED,
    TaskState.RUNNING,
    TaskState.PAUSED,
    TaskState.READY_FOR_REVIEW,
    TaskState.REVISING,
    TaskState.RETAINED,
)
"""States finalize accepts (a running one only once its agent has ended)."""


class ReviewCommands(ServicePart):
    """Review, radar and integration; `Service` provides the connections and lookups."""

    if TYPE_CHECKING:

        def discard(
            self,
            where: RepoRef,
            task: str,
            *,
            force: bool = False,
            on_wait: OnWait = None,
            cancel: Cancel | None = None,
        ) -> Outcome: ...

    # --- review --------------------------------------------------------------------------------

    def review(self, where: RepoRef, task: str) -> tuple[Task, Repo, Review]:
        """The task's commits, changed files and uncommitted work against its target."""
        from laneboard.core.operations import review

        ctx = self._open(where)
        found = self._find(ctx, task)
        return found, ctx.repo, review.review(ctx, self._ledger(), found)

    def mark_reviewed(self, where: RepoRef, task: str) -> tuple[Task, Repo, Review]:
        """Pin the branch tip now as the reviewed SHA (committed work only)."""
        from laneboard.core.operations import review

        ctx = self._open(where)
        marked, seen = review.mark(ctx, self._ledger(), self._live(ctx, task), self.actor)
        return marked, ctx.repo, seen

    def patch(self, where: RepoRef, task: str, paths: tuple[str, ...] = ()) -> bytes:
        """The unified diff of the task's committed work since the merge base (of `paths`)."""
        from laneboard.core.adapters import history

        _, _, seen = self.review(where, task)
        return history.patch(self._open(where).root, seen.merge_base, seen.tip, paths)

    def patch_between(self, where: RepoRef, task: str, base: str, tip: str) -> bytes:
        """The unified diff of the task's commits from `base` to `tip` (both its own)."""
        from laneboard.core.adapters import history

        ctx = self._open(where)
        self._find(ctx, task)
        return history.patch(ctx.root, base, tip)

    # --- the radar -----------------------------------------------------------------------------

    def conflicts(self, where: RepoRef | None) -> list[tuple[Repo, Radar]]:
        """The conflict radar of one repo, or of every registered repo (None)."""
        from laneboard.core.operations import radar

        ledger = self._ledger()
        repos = [self._open(where).repo] if where is not None else ledger.repos()
        report: list[tuple[Repo, Radar]] = []
        for repo in repos:
            try:
                ctx = self._open(repo.id)
            except LaneboardError:
                continue
            live = ledger.tasks(repo.id, include_retired=False)
            report.append((ctx.repo, radar.radar(ctx, ledger, live)))
        return report

    # --- finalize ------------------------------------------------------------------------------

    def finalize(
        self,
        where: RepoRef,
        task: str,
        *,
        into: str | None = None,
        strategy: str | None = None,
        on_wait: OnWait = None,
        cancel: Cancel | None = None,
        on_output: OnOutput = None,
    ) -> Outcome:
        """Merge the reviewed SHA into the target (see `core.operations.finalize`), then clean
        the worktree up by the cleanup policy; a blocker keeps it, and `notes` say why."""
        from laneboard.core.operations import finalize
        from laneboard.core.operations.steps import integration

        ctx = self._open(where, on_wait=on_wait, cancel=cancel, on_output=on_output)
        ledger = self._ledger()
        found = self._live(ctx, task)
        chosen = integration.plan(
            ctx,
            ledger,
            found,
            self.runtime,
            into=into,
            strategy=strategy or ctx.settings.finalize.strategy,
        )
        done = finalize.finalize(ctx, ledger, chosen, self.actor)
        return self._clean_up(ctx.repo, done, on_wait=on_wait, cancel=cancel)

    def _clean_up(
        self, repo: Repo, task: Task, *, on_wait: OnWait, cancel: Cancel | None
    ) -> Outcome:
        """Remove a finalized task's worktree and branch when the cleanup policy allows."""
        try:
            cleaned = self.discard(repo.id, task.id, on_wait=on_wait, cancel=cancel)
        except Refused as refused:
            reasons = "; ".join(str(b) for b in refused.blockers)
            note = f"worktree {task.worktree_path} kept: {reasons}"
            return Outcome(self._ledger().task(task.id), repo, notes=(note,))
        except LaneboardError as err:
            note = f"worktree {task.worktree_path} kept: {err}"
            return Outcome(self._ledger().task(task.id), repo, notes=(note,))
        return Outcome(cleaned.task, repo, snapshot=cleaned.snapshot)

    def ready(self, where: RepoRef) -> list[Task]:
        """The repo's reviewed tasks whose branch is still at the reviewed SHA, in the order
        they were reviewed: what `finalize --all-ready` integrates."""
        ctx = self._open(where)
        ctx.git.refresh()
        tasks = [
            t
            for t in self._ledger().tasks(ctx.repo.id, include_retired=False)
            if t.state in FINALIZABLE
            and t.reviewed_sha is not None
            and ctx.git.branch_tip(t.branch) == t.reviewed_sha
        ]
        return sorted(tasks, key=lambda t: t.reviewed_at or 0.0)

    def publish(
        self,
        where: RepoRef,
        task: str,
        *,
        remote: str | None = None,
        pr: bool = False,
        draft: bool = False,
    ) -> tuple[Outcome, str | None, str]:
        """Push the reviewed SHA to the task's branch on `remote` and verify it there; with
        `pr`, find or open a pull request. Returns the outcome, a note about the pull request
        and the remote pushed to."""
        from laneboard.core.operations import publish
        from laneboard.core.operations.steps import integration

        ctx = self._open(where)
        ledger = self._ledger()
        found = self._live(ctx, task)
        integration.plan_publish(ctx, found)
        settings = ctx.settings.finalize
        done = publish.publish(
            ctx,
            ledger,
            found,
            self.actor,
            remote=remote or settings.remote,
            pr=pr,
            draft=draft,
            timeout=settings.network_timeout,
        )
        return Outcome(done.task, ctx.repo), done.pr_note, done.remote

    def rebase(
        self, where: RepoRef, task: str, *, on_wait: OnWait = None, cancel: Cancel | None = None
    ) -> tuple[Outcome, tuple[str, ...]]:
        """Rebase the task's branch onto its target in its own worktree, under its lane; the
        agent must be paused or idle. A conflict is left in place (returned as its files)."""
        from laneboard.core.operations import rebase

        ctx = self._open(where, on_wait=on_wait, cancel=cancel)
        found = self._live(ctx, task)
        done, conflicts = rebase.rebase(ctx, self._ledger(), found, self.runtime, self.actor)
        return Outcome(done, ctx.repo), conflicts
