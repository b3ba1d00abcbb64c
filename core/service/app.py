"""The application service: the one entry the command line, the board and hooks call
(DESIGN.md section 10).

Inputs are plain values: a repository as a path inside it (its root or any worktree) or its id,
a task as its name, its id or a unique prefix of its id. Outputs are the domain's values
(`core.domain.views`). Refusals are typed (`Refused` carries its blockers as data). Each method
opens what it needs and prints nothing.

Threads: the service may be called from worker threads at once. Each thread gets its own ledger
connection (SQLite's are never shared across threads); everything else a call uses is made for
that call. Waits for a lane can be cancelled from another thread with a `Cancel` token, and the
operations the service runs never fork a Python child or install signal handlers (a setup
command is started by `subprocess` through a shell gate), so they are safe in a threaded
process. Reads never write: `lanes()` and `snapshot()` show leases as the last admission pass
left them, and a dead holder's lease is reaped by the next writer, not by a reader.

Imports: each method imports the operation it runs inside its body, so a command loads only
its own operation (`ls` never loads pygit2; `exec` has a lean entry of its own). This is for
start-up time only: operations never import the service, so there is no cycle to dodge.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Container, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from laneboard.core.adapters.config import load_settings, save_user_value, state_dir
from laneboard.core.adapters.db import default_path
from laneboard.core.adapters.git import (
    GitRepo,
    NotARepository,
    discover,
    resolve_at,
    symbolic_target,
)
from laneboard.core.adapters.leases import Cancel, LeaseStore
from laneboard.core.adapters.ledger import Ledger
from laneboard.core.adapters.repo import NotRegistered, RepoContext
from laneboard.core.adapters.verify import verify_worktree
from laneboard.core.domain.agents import recorded_state
from laneboard.core.domain.cleanup import Blocker
from laneboard.core.domain.errors import ConfigError, LaneboardError
from laneboard.core.domain.lanes import INTEGRATION_LANE, Lease, LeaseState
from laneboard.core.domain.lifecycle import OWNED
from laneboard.core.domain.models import Actor, Event, Repo, Task, TaskState
from laneboard.core.domain.names import TASK_ID, branch_for
from laneboard.core.domain.runtime import NoRuntime, PaneState, Runtime, pane_of, pane_state
from laneboard.core.domain.values import replace, value
from laneboard.core.domain.verdict import Reason, Verdict
from laneboard.core.domain.views import (
    BoardConfig,
    BoardSnapshot,
    Changes,
    Finding,
    GitState,
    Keeping,
    LanesView,
    LaneView,
    Outcome,
    Registration,
    RepoBoard,
    ShimDir,
    TaskView,
    Watched,
    WatchedRepo,
    WatchSet,
)
from laneboard.core.service.agents import AgentCommands
from laneboard.core.service.delegation import DelegationCommands
from laneboard.core.service.hosts import HostCommands
from laneboard.core.service.parts import OnOutput, OnWait, RepoRef
from laneboard.core.service.queue import QueueCommands
from laneboard.core.service.review import ReviewCommands
from laneboard.core.service.reviewloop import ReviewLoopCommands

if TYPE_CHECKING:
    from laneboard.core.operations.gitstate import Group

__all__ = ["Cancel", "NotARepository", "NotRegistered", "RepoRef", "Service", "UnknownTask"]

ID_PREFIX = 4
"""A task id may be shortened to a unique prefix of at least this many hex digits."""


class UnknownTask(LaneboardError):
    """No task of the repo has that name or id."""


def target_branch(
    git: GitRepo, configured: str | None, given: str | None, root: Path
) -> str | None:
    """The branch a new task integrates into: `given`, else the repo's integration branch
    (config `target`, origin/HEAD's branch, the root's branch); refused when it names no local
    branch. None: a detached root, no remote and nothing configured."""
    branch = given or git.integration_branch(configured)
    if branch is None:
        return None
    branch = branch.removeprefix("refs/heads/")
    if git.branch_tip(branch) is None:
        if not given and not configured:
            return None  # an unborn root branch: no target yet, as before
        source = "--target" if given else "config target"
        raise LaneboardError(f"{source} {branch!r} is not a local branch of {root}")
    alias = symbolic_target(root, f"refs/heads/{branch}")
    if alias is not None:
        raise LaneboardError(f"target {branch} is a symbolic ref to {alias}; name that branch")
    return branch


@value
class NewRequest:
    """What `new` resolved before anything is created: where it runs (the parent's worktree
    for a child), the base as asked and its SHA, the target, the parent, and notes for the
    operator (a parent's uncommitted files that the child does not get)."""

    where: Path
    base_ref: str
    base_sha: str
    target: str | None
    parent: Task | None
    notes: tuple[str, ...]


class Service(
    AgentCommands,
    ReviewCommands,
    DelegationCommands,
    QueueCommands,
    ReviewLoopCommands,
    HostCommands,
):
    """laneboard's operations and reads over one ledger file.

    `actor` is written into the journal with every change (cli, tui, hook); `runtime` is the
    agent runtime (tmux) or `NoRuntime`; `on_notice` hears what the operator should know beyond
    a command's result (a repository found moved and repaired).
    """

    def __init__(
        self,
        ledger_path: Path | None = None,
        *,
        actor: Actor = Actor.CLI,
        runtime: Runtime | Callable[[], Runtime] | None = None,
        on_notice: Callable[[str], None] | None = None,
    ) -> None:
        self.ledger_path = ledger_path or default_path()
        self.actor = actor
        self._runtime = runtime or NoRuntime()
        self.on_notice = on_notice
        self._local = threading.local()

    @property
    def runtime(self) -> Runtime:
        """The agent runtime; a factory given for it is called on first use (the CLI passes
        one, so commands that never touch a pane never import tmux's library)."""
        if callable(self._runtime) and not hasattr(self._runtime, "snapshot"):
            self._runtime = self._runtime()
        return self._runtime  # type: ignore[return-value]

    # --- connections ---------------------------------------------------------------------

    def _ledger(self) -> Ledger:
        """This thread's ledger connection, opened on first use."""
        ledger: Ledger | None = getattr(self._local, "ledger", None)
        if ledger is None:
            ledger = Ledger(self.ledger_path)
            self._local.ledger = ledger
        return ledger

    def close(self) -> None:
        """Close this thread's connection (other threads' close with their thread)."""
        ledger: Ledger | None = getattr(self._local, "ledger", None)
        if ledger is not None:
            ledger.close()
            self._local.ledger = None

    # --- repositories --------------------------------------------------------------------

    def _open(
        self,
        where: RepoRef,
        *,
        register: bool = False,
        on_wait: OnWait = None,
        cancel: Cancel | None = None,
        on_output: OnOutput = None,
    ) -> RepoContext:
        from laneboard.core.operations.repos import open_repo

        ledger = self._ledger()
        path = Path(ledger.repo(where).root) if isinstance(where, int) else Path(where)
        ctx = open_repo(ledger, path, register=register, actor=self.actor)
        ctx.on_wait, ctx.cancel, ctx.on_output = on_wait, cancel, on_output
        if ctx.relocation is not None and self.on_notice is not None:
            for line in ctx.relocation.lines():
                self.on_notice(line)
        return ctx

    def init(self, where: Path) -> Registration:
        """Register the repository containing `where` (a no-op that says so when it is)."""
        ctx = self._open(where, register=True)
        return Registration(ctx.repo, ctx.registered_now, ctx.relocation)

    def repo(self, where: RepoRef) -> Repo:
        """The registered repository `where` names (refused when it is not registered)."""
        return self._open(where).repo

    def repos(self) -> list[Repo]:
        return self._ledger().repos()

    # --- tasks -----------------------------------------------------------------------------

    def _find(self, ctx: RepoContext, ref: str) -> Task:
        """The task `ref` names in this repo: the live task of that name, else a task with that
        id, else the latest retired one of that name, else the one task whose id starts with
        `ref` (at least `ID_PREFIX` hex digits)."""
        ledger = self._ledger()
        found = ledger.find_task(ctx.repo.id, ref)
        if found is not None and found.live:
            return found
        tasks = ledger.tasks(ctx.repo.id)
        exact = next((t for t in tasks if t.id == ref), None)
        if exact is not None:
            return exact
        if found is not None:
            return found
        if len(ref) >= ID_PREFIX and TASK_ID.fullmatch(ref.ljust(12, "0")):
            matches = [t for t in tasks if t.id.startswith(ref)]
            if len(matches) == 1:
                return matches[0]
            if matches:
                names = ", ".join(f"{t.name} ({t.id})" for t in matches)
                raise UnknownTask(f"{ref!r} is the start of more than one task id: {names}")
        raise UnknownTask(f"no task named {ref!r} in {ctx.root}")

    def _live(self, ctx: RepoContext, ref: str) -> Task:
        task = self._find(ctx, ref)
        if not task.live:
            raise LaneboardError(f"task {task.name} is {task.state.value}; it has been retired")
        return task

    def new(
        self,
        where: Path,
        name: str,
        *,
        base: str | None = None,
        target: str | None = None,
        parent: str | None = None,
        start: bool = False,
        agent: str | None = None,
        command: list[str] | None = None,
        prompt: str | None = None,
        on_wait: OnWait = None,
        on_output: OnOutput = None,
        cancel: Cancel | None = None,
        retry_of: str | None = None,
    ) -> Outcome:
        """Provision task `name` to be integrated into `target` (default: the repo's
        integration branch, DESIGN.md section 7) from `base` (default: the target's tip, else
        HEAD of the checkout `where` is in; a `base` is resolved as git run there means it),
        registering the repo if needed, but only once the name, base, target and agent are
        valid: a refused `new` changes nothing. With `start`, its agent starts too (or the task
        is queued when `agents.max_running` run already). `on_wait` hears when it waits for a
        lane, `on_output` receives the setup command's output as it comes.

        With `parent` (a task id, or a name in the repository of `where`), the task is that
        task's child, in the parent's repository: its base is the parent's HEAD commit now
        (resolved once, pinned; the parent's uncommitted files are not copied, and the notes
        name them) and its target the parent's branch, unless `base`/`target` say otherwise.
        Refused beyond `delegation.max_depth` and `delegation.max_children`."""
        from laneboard.core.operations import provision

        asked = self._new_request(Path(where), name, base, target, parent, start, agent, command)
        ctx = self._open(
            asked.where, register=True, on_wait=on_wait, cancel=cancel, on_output=on_output
        )
        requested = {"start": start, "agent": agent, "command": command, "prompt": prompt}
        more = {"requested": requested, **({"retry_of": retry_of} if retry_of else {})}
        task = provision.provision(
            ctx, self._ledger(), name, asked.base_ref, asked.base_sha, self.actor,
            target=asked.target, parent=asked.parent, more=more,
        )  # fmt: skip
        if start:
            task = self._start_new(ctx, task, agent, command, prompt)
        return Outcome(task, ctx.repo, notes=asked.notes)

    def _new_request(
        self,
        where: Path,
        name: str,
        base: str | None,
        target: str | None,
        parent: str | None,
        start: bool,
        agent: str | None,
        command: list[str] | None,
    ) -> NewRequest:
        """Everything `new` checks and resolves before anything is created: the name, the
        agent, the parent's depth, the target and the base SHA. Refuses with one line."""
        from laneboard.core.operations.agents import choose

        below: Task | None = None
        notes: list[str] = []
        if parent is not None:
            below = self._parent(where, parent)
            where = Path(below.worktree_path)
        paths = discover(where)
        settings = load_settings(paths.root)
        branch_for(settings.branch_prefix, name)
        if start:
            choose(settings, agent, command)
        if below is not None:
            depth = self.depth(below) + 1
            if depth > settings.delegation.max_depth:
                raise LaneboardError(
                    f"{below.name} is at depth {depth - 1}; `delegation.max_depth` "
                    f"({settings.delegation.max_depth}) allows no child below it"
                )
            target = target or below.branch
            if base is None:
                base, notes = self._parent_head(below)
        target = target_branch(GitRepo(paths), settings.target, target, paths.root)
        if base is None and target is not None:
            base = f"refs/heads/{target}"
        base_sha = resolve_at(where, base or "HEAD")
        return NewRequest(where, base or "HEAD", base_sha, target, below, tuple(notes))

    def _start_new(
        self,
        ctx: RepoContext,
        task: Task,
        agent: str | None,
        command: list[str] | None,
        prompt: str | None,
    ) -> Task:
        """Start a just-provisioned task's agent; a failure says what is kept and how to try
        again (the task stays provisioned)."""
        try:
            return self._configure_and_start(ctx, task, agent, command, prompt).task
        except LaneboardError as err:
            now = self._ledger().task(task.id)
            if now.state is TaskState.CANCELLING:  # a cancel won the race and is undoing it
                raise LaneboardError(
                    f"{task.name}: cancelled before its agent started (the cancel removes what "
                    "it created)"
                ) from None
            if not now.live:
                raise LaneboardError(
                    f"{task.name}: {now.state.value} before its agent started"
                ) from None
            if now.state is TaskState.RETAINED and self._ledger().last_event(
                now.id, "cancel.answered"
            ):
                raise LaneboardError(
                    f"{task.name}: cancelled just after its agent started; {now.worktree_path} "
                    f"and {now.branch} are kept (retained)"
                ) from None
            raise LaneboardError(
                f"{task.name}: provisioned at {task.worktree_path}, but its agent did not "
                f"start: {err} (`laneboard start {task.name}` tries again)"
            ) from None

    def retry(self, where: Path | str | int, task: str, **options: Any) -> Outcome:
        """Provision a failed (or cancelled) task again, as a new task of the same name with
        the same parent, base SHA, target, agent and prompt; the first try's task and journal
        stay as they were. `options` are `new`'s (`on_wait`, `on_output`, `start`)."""
        from laneboard.core.domain.models import TaskState
        from laneboard.core.operations.steps.created import intent

        found = self.resolve(where, task)
        if found.state not in (TaskState.FAILED, TaskState.CANCELLED):
            raise LaneboardError(
                f"{found.name} is {found.state.value}; `retry` is for a task whose provisioning "
                "failed or was cancelled"
            )
        asked = dict(intent(self._ledger(), found).get("requested") or {})
        repo = self._ledger().repo(found.repo_id)
        return self.new(
            Path(repo.root),
            found.name,
            base=found.base_sha,
            target=found.target,
            parent=found.parent_id,
            agent=asked.get("agent"),
            command=asked.get("command"),
            prompt=asked.get("prompt"),
            start=bool(options.pop("start", asked.get("start", False))),
            retry_of=found.id,
            **options,
        )

    def _parent(self, where: Path, ref: str) -> Task:
        """The live task a child is spawned from, its worktree verified (the child starts at
        its HEAD: a forged worktree must not choose that commit)."""
        found = self.resolve(where, ref)
        if not found.live:
            raise LaneboardError(f"parent {found.name} is {found.state.value}; it has retired")
        if found.state in OWNED:
            raise LaneboardError(
                f"parent {found.name} is {found.state.value}; a child starts from a settled task"
            )
        ctx = self._open(found.repo_id)
        verdict = ctx.verify(found)
        if not verdict.ok:
            raise LaneboardError(f"parent {found.name}: its worktree fails verification: {verdict}")
        return found

    def _parent_head(self, parent: Task) -> tuple[str, list[str]]:
        """The parent's HEAD commit now, and a note naming its uncommitted files (which the
        child does not get)."""
        from laneboard.core.adapters.git import status

        facts = status(Path(parent.worktree_path))
        if facts.head is None:
            raise LaneboardError(f"parent {parent.name} has no commit checked out")
        pending = facts.staged + facts.unstaged + facts.conflicted + facts.untracked
        notes: list[str] = []
        if pending:
            shown = ", ".join(sorted(set(pending))[:10]) + (
                ", ..." if len(set(pending)) > 10 else ""
            )
            notes.append(
                f"{parent.name} has {len(set(pending))} uncommitted file(s) the child does not get "
                f"(it starts at {facts.head[:12]}): {shown}"
            )
        return facts.head, notes

    def retain(self, where: RepoRef, task: str) -> Outcome:
        """Stop the task's agent, keep its worktree and branch. A task retained already is left
        as it is (`changed` False)."""
        from laneboard.core.operations import discard

        ctx = self._open(where)
        found = self._live(ctx, task)
        if found.state is TaskState.RETAINED:
            return Outcome(found, ctx.repo, changed=False)
        kept = discard.retain(ctx, self._ledger(), found, self.runtime, self.actor)
        return Outcome(kept, ctx.repo)

    def discard_preview(self, where: RepoRef, task: str) -> tuple[Blocker, ...]:
        """What would block discarding the task right now (changes nothing)."""
        from laneboard.core.operations.steps.blockers import preview

        ctx = self._open(where)
        decision = preview(ctx, self._ledger(), self._live(ctx, task), self.runtime)
        return decision.blockers

    def discard(
        self,
        where: RepoRef,
        task: str,
        *,
        force: bool = False,
        on_wait: OnWait = None,
        cancel: Cancel | None = None,
    ) -> Outcome:
        """Snapshot and remove the task's worktree and branch, or refuse (`Refused`, with
        every blocker) changing nothing."""
        from laneboard.core.operations import discard

        ctx = self._open(where, on_wait=on_wait, cancel=cancel)
        ledger = self._ledger()
        gone = discard.discard(
            ctx,
            ledger,
            self._live(ctx, task),
            force=force,
            runtime=self.runtime,
            actor=self.actor,
        )
        snaps = ledger.snapshots(gone.id)
        return Outcome(gone, ctx.repo, snapshot=snaps[-1][1] if snaps else None)

    def restore(
        self,
        where: RepoRef,
        task: str,
        *,
        as_name: str | None = None,
        on_wait: OnWait = None,
        cancel: Cancel | None = None,
    ) -> Outcome:
        """Bring the newest snapshot of the task back as a new task (`as_name`, default the
        same name)."""
        from laneboard.core.operations import restore

        ctx = self._open(where, on_wait=on_wait, cancel=cancel)
        back = restore.restore(ctx, self._ledger(), task, self.actor, as_name=as_name)
        return Outcome(back, ctx.repo)

    def task(self, where: RepoRef, task: str, *, facts: bool = True) -> TaskView:
        """One task (the live one of that name, else by id or id prefix, else the latest
        retired one); with `facts`, what its worktree holds and its lane does now."""
        ctx = self._open(where)
        found = self._find(ctx, task)
        if not facts:
            return TaskView(found, ctx.repo)
        return self._views(ctx, [found], proven=self._proven([found]))[0]

    def tasks(
        self, where: RepoRef | None, *, include_retired: bool = False, facts: bool = True
    ) -> list[TaskView]:
        """Tasks of one repo, or of every registered repo when `where` is None; with `facts`,
        each live one's git state, lane and verification (one `git status` per worktree)."""
        ledger = self._ledger()
        contexts: list[tuple[Repo, RepoContext | None]]
        if where is not None:
            ctx = self._open(where)
            contexts = [(ctx.repo, ctx)]
        else:
            contexts = [(repo, self._try_open(repo)) for repo in ledger.repos()]
        listed = [
            (repo, context, ledger.tasks(repo.id, include_retired=include_retired))
            for repo, context in contexts
        ]
        proven = self._proven([t for _, c, tasks in listed if c for t in tasks]) if facts else {}
        views: list[TaskView] = []
        for repo, context, tasks in listed:
            if facts and context is not None:
                views += self._views(context, tasks, proven=proven)
            else:
                views += [TaskView(task, repo) for task in tasks]
        return views

    def _proven(self, tasks: Collection[Task]) -> Mapping[str, GitState]:
        """The git states of `tasks` that the controller keeps and its watch proves fresh now
        (a fence asked and answered); empty without a watching controller: then every state
        is computed."""
        from laneboard.core.adapters.gitcache import fresh_states

        live = [task.id for task in tasks if task.live]
        return fresh_states(self._ledger().database, live) if live else {}

    def _try_open(self, repo: Repo) -> RepoContext | None:
        try:
            return self._open(repo.id)
        except LaneboardError:
            return None

    def _views(
        self,
        ctx: RepoContext,
        tasks: list[Task],
        git_for: Container[str] | None = None,
        *,
        agents: bool = True,
        active: list[Lease] | None = None,
        proven: Mapping[str, GitState] | None = None,
        keeping: Keeping | None = None,
    ) -> list[TaskView]:
        """Views of `tasks` of one repository with their facts (see `_views_of`)."""
        return self._views_of(
            [(ctx, tasks)], git_for, agents=agents, active=active, proven=proven, keeping=keeping
        )[0]

    def _views_of(
        self,
        groups: Sequence[tuple[RepoContext, list[Task]]],
        git_for: Container[str] | None = None,
        *,
        agents: bool = True,
        active: list[Lease] | None = None,
        proven: Mapping[str, GitState] | None = None,
        keeping: Keeping | None = None,
    ) -> list[list[TaskView]]:
        """Views of each group's tasks (a repository and tasks of it) with their facts, in the
        groups' order; the `git status` runs of every group share one pipeline. `git_for`
        limits those runs to the task ids it holds (None: every live task), the others get no
        `git`; without `agents`, no pane is looked at (the agent's state is the one the
        controller recorded). `proven` states (fresh by the controller's proof) are used as
        they are for verified worktrees; with `keeping` (the controller), what is computed is
        kept for readers."""
        from laneboard.core.operations.gitstate import LazyVerdicts, git_states

        proven = proven or {}
        states: dict[str, GitState] = {}
        reads: list[tuple[RepoContext, list[Task], LazyVerdicts]] = []
        for ctx, tasks in groups:
            live = [task for task in tasks if task.live]
            # A worktree whose state the controller proves fresh was verified in full when
            # that state was computed, and nothing in it or its admin dir changed since: its
            # path is checked (two stats). Any other is verified in full, as before every
            # action, and just before its `git status` starts (while git reads the others).
            verdicts = LazyVerdicts(live, partial(self._verdict, ctx, proven))
            read = tasks if git_for is None else [task for task in tasks if task.id in git_for]
            states.update(
                (task.id, proven[task.id])
                for task in read
                if task.id in proven and task.live and verdicts[task.id].ok
            )
            reads.append((ctx, [task for task in read if task.id not in states], verdicts))
        if any(read for _, read, _ in reads):
            if keeping is not None:
                states.update(self._compute_and_keep(reads, keeping))
            else:
                states.update(git_states(reads))
        leases = self._active() if active is None else active
        found: list[list[TaskView]] = []
        for (ctx, tasks), (_, _, verdicts) in zip(groups, reads, strict=True):
            verdicts.complete()  # every live task's verdict is shown, read or not
            observed = self._agent_states(ctx, [t for t in tasks if t.live]) if agents else {}
            lanes = {view.task_id: view for view in self._lane_views(ctx.repo, leases, tasks=tasks)}
            found.append(
                [
                    TaskView(
                        task,
                        ctx.repo,
                        git=states.get(task.id),
                        lane=lanes.get(task.id) if task.live else None,
                        verdict=verdicts.get(task.id),
                        agent=observed.get(task.id) if agents else recorded_state(task),
                    )
                    for task in tasks
                ]
            )
        return found

    @staticmethod
    def _verdict(ctx: RepoContext, proven: Mapping[str, GitState], task: Task) -> Verdict:
        return ctx.verify_unchanged(task) if task.id in proven else ctx.verify(task)

    def _compute_and_keep(self, reads: Sequence[Group], keeping: Keeping) -> dict[str, GitState]:
        """The git states of the tasks of `reads`, computed, and kept in the ledger as
        `keeping` proves them: each task's change count is read before its `git status`
        starts, so a change seen meanwhile makes the store fail."""
        from laneboard.core.adapters.gitcache import GitCache
        from laneboard.core.operations.gitstate import git_states, keep_states

        cache = GitCache(self._ledger().database)
        gens = cache.generations([task.id for _, tasks, _ in reads for task in tasks])
        ignored: dict[str, set[str]] = {}
        states = git_states(reads, ignored=ignored)
        keep_states(cache, keeping, states, gens, ignored)
        return states

    def views(
        self, task_ids: Collection[str], *, keeping: Keeping | None = None, git: bool = True
    ) -> list[TaskView]:
        """The live tasks `task_ids` with their git state, lane and verification (no pane is
        looked at: the agent's state is the one recorded): what the board re-reads when only
        those worktrees changed. With `keeping` (the controller), the states are kept for
        readers; without `git`, no `git status` runs (a hook event: only the agent moved)."""
        ledger = self._ledger()
        active = self._active()
        wanted = [task for task in ledger.tasks_by_id(task_ids) if task.live]
        groups = [
            (self._open(repo_id), [task for task in wanted if task.repo_id == repo_id])
            for repo_id in sorted({task.repo_id for task in wanted})
        ]
        found = self._views_of(
            groups, None if git else (), agents=False, active=active, keeping=keeping
        )
        return [view for views in found for view in views]

    def log(self, where: RepoRef, task: str) -> tuple[Task, list[Event]]:
        """The task and its whole journal, oldest first."""
        ctx = self._open(where)
        found = self._find(ctx, task)
        return found, self._ledger().events(found.id)

    def verify(self, where: RepoRef, task: str, *, repin: bool = False) -> tuple[Task, Verdict]:
        """Verify the task's worktree against its pinned identity (filesystem reads only).

        `repin` takes a new device number after a remount: allowed only when every other check
        passes and both inodes are still the pinned ones, so it can never adopt another
        directory; it is journalled with the old and new identity."""
        ctx = self._open(where)
        found = self._find(ctx, task)
        verdict = ctx.verify(found)
        if not repin or verdict.ok:
            return found, verdict
        if verdict.reason is not Reason.IDENTITY_CHANGED or found.identity is None:
            raise LaneboardError(f"{found.name}: --repin only follows a device change: {verdict}")
        seen = verify_worktree(
            Path(found.worktree_path),
            area=Path(found.area),
            common_dir=ctx.common_dir,
            admin_name=found.admin_name,
            identity=None,
        )
        old, new = found.identity, seen.identity
        if (
            not seen.ok
            or new is None
            or (new.dir_ino, new.gitfile_ino) != (old.dir_ino, old.gitfile_ino)
        ):
            raise LaneboardError(
                f"{found.name}: refusing to repin: {found.worktree_path} is not the directory "
                "laneboard created (its inodes differ), only a device number may change"
            )
        repinned = self._ledger().update_task(
            found.id,
            actor=self.actor,
            kind="worktree.repinned",
            data={"old": old.as_dict(), "new": new.as_dict()},
            identity=new,
        )
        return repinned, ctx.verify(repinned)

    def shims(self, where: RepoRef, task: str) -> ShimDir:
        """Where the task's lane command shims go and which commands they wrap (config
        `lanes.wrap`); the runtime (or `laneboard shims`) writes them there."""
        ctx = self._open(where)
        found = self._live(ctx, task)
        path = state_dir() / "shims" / found.id / "bin"
        return ShimDir(found, str(path), tuple(ctx.settings.lanes.wrap))

    # --- lanes ------------------------------------------------------------------------------

    def _store(self) -> LeaseStore:
        return LeaseStore(self._ledger().database, load_settings(None).lanes.slots)

    def _active(self) -> list[Lease]:
        return self._store().active()

    def _lane_views(
        self,
        repo: Repo,
        active: list[Lease],
        store: LeaseStore | None = None,
        tasks: list[Task] | None = None,
    ) -> list[LaneView]:
        """The repo's lanes with their leases; with `store`, also what keeps each running
        lease whose command has exited (a look at the process table: `lanes`, not the board's
        every refresh). The worktree lanes are those of `tasks` (default: every live task of
        the repo)."""
        mine = [lease for lease in active if lease.repo_id == repo.id]
        lanes: list[tuple[str | None, str]] = [(None, "root"), (INTEGRATION_LANE, "integration")]
        if tasks is None:
            tasks = self._ledger().tasks(repo.id, include_retired=False)
        lanes += [(t.id, t.name) for t in tasks if t.live]
        views: list[LaneView] = []
        for lane, label in lanes:
            running = tuple(x for x in mine if x.lane == lane and x.state is LeaseState.RUNNING)
            views.append(
                LaneView(
                    label=label,
                    task_id=None if lane == INTEGRATION_LANE else lane,
                    running=running,
                    waiting=tuple(
                        x for x in mine if x.lane == lane and x.state is LeaseState.WAITING
                    ),
                    lingering=tuple(found for x in running for found in store.lingering(x))
                    if store is not None
                    else (),
                )
            )
        return views

    def lanes(self, where: RepoRef | None) -> LanesView:
        """The root lane and each live task's worktree lane, per repo (one, or all), with their
        running and waiting leases, as the last admission pass left them (read only), and the
        processes that keep a lease whose command has exited."""
        store = self._store()
        if where is not None:
            ctx = self._open(where)
            store.slots = ctx.settings.lanes.slots
            repos = [ctx.repo]
        else:
            repos = self._ledger().repos()
        active = store.active()
        views = tuple((repo, tuple(self._lane_views(repo, active, store))) for repo in repos)
        used = sum(1 for lease in active if lease.state is LeaseState.RUNNING)
        return LanesView(slots=store.slots, used=used, repos=views)

    # --- the board's read model and change feed --------------------------------------------

    def snapshot(
        self,
        *,
        git_for: Container[str] | None = None,
        facts: bool = True,
        agents: bool = True,
        keeping: Keeping | None = None,
    ) -> BoardSnapshot:
        """Every repository, its lanes and its live tasks with their git state, as plain values,
        read without writing anything. `cursor` is where `changes` continues from.

        `git_for` names the tasks whose worktrees are read with `git status` (None: all); the
        board passes the ones whose files changed and keeps the last state of the others.
        Without `facts`, the ledger's record alone (no worktree is verified, no pane looked
        at): what the board paints first, before the first full read. Without `agents`, each
        agent's state is the one the controller recorded (the board, being the controller or
        watching the one that is, needs no second look at the panes). With `keeping` (the
        controller), the states computed are kept for readers; without, the states the
        controller keeps and proves fresh are used."""
        ledger = self._ledger()
        cursor = ledger.last_seq()
        store = self._store()
        active = store.active()
        proven: Mapping[str, GitState] = {}
        if facts and keeping is None:
            wanted = ledger.tasks(include_retired=False)
            proven = self._proven([t for t in wanted if git_for is None or t.id in git_for])
        boards: list[RepoBoard | int] = []  # a board, or where its repository is in `opened`
        opened: list[tuple[RepoContext, list[Task]]] = []
        for repo in ledger.repos():
            live = ledger.tasks(repo.id, include_retired=False)
            if not facts:
                lanes = tuple(self._lane_views(repo, active, tasks=live))
                boards.append(RepoBoard(repo, lanes, tuple(TaskView(t, repo) for t in live)))
                continue
            try:
                ctx = self._open(repo.id)
            except LaneboardError as err:
                tasks = tuple(TaskView(t, repo) for t in live)
                boards.append(RepoBoard(repo, (), tasks, problem=str(err)))
                continue
            boards.append(len(opened))
            opened.append((ctx, live))
        views = self._views_of(
            opened, git_for, agents=agents, active=active, proven=proven, keeping=keeping
        )
        repos = tuple(
            board
            if isinstance(board, RepoBoard)
            else self._repo_board(*opened[board], views[board], active)
            for board in boards
        )
        used = sum(1 for lease in active if lease.state is LeaseState.RUNNING)
        return BoardSnapshot(
            at=time.time(), slots=store.slots, used=used, repos=repos, cursor=cursor
        )

    def _repo_board(
        self, ctx: RepoContext, live: list[Task], views: list[TaskView], active: list[Lease]
    ) -> RepoBoard:
        """One opened repository on the board: its lanes, its tasks' views and its queue."""
        lanes = tuple(self._lane_views(ctx.repo, active, tasks=live))
        waiting = self.queue_of(ctx.repo.id)
        if not waiting.lines:
            return RepoBoard(ctx.repo, lanes, tuple(views))
        places = {line.entry.task_id: line for line in waiting.lines}
        placed = tuple(replace(view, queue=places.get(view.task.id)) for view in views)
        return RepoBoard(ctx.repo, lanes, placed, queue=waiting)

    @staticmethod
    def confinement_gaps() -> list[str]:
        """What a sandbox on this machine cannot hold (docs/confine.md), named."""
        from laneboard.core.adapters import confine

        return confine.gaps()

    @staticmethod
    def state_root() -> Path:
        """laneboard's state directory (the ledger, logs, event files)."""
        return state_dir()

    def change_dirs(self) -> tuple[str, str]:
        """The directories every change of a task's state writes into: the ledger's (its WAL)
        and the agents' event files'. What a waiter watches."""
        return str(self.ledger_path.parent), str(state_dir() / "events")

    def watched(self) -> WatchSet:
        """What the board watches for changes: the ledger's directory, the agents' event files,
        and each live task's worktree and its admin dir under the common git dir (HEAD, index
        and logs change there on a commit)."""
        ledger = self._ledger()
        worktrees: list[Watched] = []
        repos: list[WatchedRepo] = []
        for repo in ledger.repos():
            live = ledger.tasks(repo.id, include_retired=False)
            repos.append(WatchedRepo(repo.common_dir, tuple(task.id for task in live)))
            for task in live:
                admin = (
                    str(Path(repo.common_dir) / "worktrees" / task.admin_name)
                    if task.admin_name
                    else None
                )
                worktrees.append(Watched(task.id, task.worktree_path, admin))
        return WatchSet(
            ledger=str(self.ledger_path.parent),
            events=str(state_dir() / "events"),
            worktrees=tuple(worktrees),
            repos=tuple(repos),
            fences=str(state_dir() / "fences"),
        )

    # --- git states the controller keeps (docs/board.md) -----------------------------------

    def watch_started(self, fences: str) -> None:
        """The controller's watch is set up and answers the fences put into `fences`."""
        from laneboard.core.adapters.gitcache import GitCache

        Path(fences).mkdir(mode=0o700, parents=True, exist_ok=True)
        GitCache(self._ledger().database).watching(fences)

    def watch_stopped(self) -> None:
        """The controller's watch stopped: its states can no longer be proven fresh."""
        from laneboard.core.adapters.gitcache import GitCache

        GitCache(self._ledger().database).unwatching()

    def git_changed(self, task_ids: Collection[str]) -> None:
        """The watch saw changes to these tasks: their kept states are forgotten, and a
        computation that began before now cannot be kept."""
        from laneboard.core.adapters.gitcache import GitCache

        GitCache(self._ledger().database).invalidate(task_ids)

    def carry_git_states(self, old: str, new: str, task_ids: Collection[str]) -> None:
        """The controller's watch `new` took over from `old` having missed nothing: the
        states `old` proves for `task_ids` are proven by `new`."""
        from laneboard.core.adapters.gitcache import GitCache

        GitCache(self._ledger().database).carry(old, new, task_ids)

    @staticmethod
    def answer_fence(path: str, epoch: str) -> None:
        """Answer a reader's fence: the watch `epoch` has seen everything before it."""
        from laneboard.core.adapters.gitcache import answer

        answer(path, epoch)

    def screen(self, task_id: str, *, lines: int = 200) -> str:
        """The last `lines` lines of the task's pane with its colours (ANSI escapes); empty
        when it has no pane on this runtime's server. Reads only (the ledger's record of the
        task and one tmux call; the board calls it for the selected task whenever its pane
        printed something)."""
        found = self._ledger().task(task_id)
        seen = pane_state(self.runtime, pane_of(found))
        if seen is None:
            return ""
        return self.runtime.capture_many([seen.ref], lines, colour=True).get(seen.ref.pane_id, "")

    def board_config(self) -> BoardConfig:
        """The user's board settings (theme, bell, key map)."""
        settings = load_settings(None)
        board = settings.board
        return BoardConfig(
            settings.theme,
            board.bell,
            dict(board.keys),
            board.preview_lines,
            desktop=board.desktop,
            ntfy=board.ntfy,
            webhook=board.webhook,
            push_every=board.push_every,
        )

    def profiles(self) -> list[str]:
        """The agent profiles a new task may name (built in, and the user's)."""
        from laneboard.core.domain.agents import profiles

        return sorted(profiles(load_settings(None).agents.profiles))

    def agent_choices(self) -> tuple[list[tuple[str, bool]], str | None]:
        """Every agent profile a new task may name, each with whether its program is installed
        (on PATH), and the one a new task should start with: `agents.default` when installed,
        else the first installed one (None: none is)."""
        import shutil

        from laneboard.core.domain.agents import profiles

        agents = load_settings(None).agents
        known = profiles(agents.profiles)
        found = [(name, shutil.which(known[name].command[0]) is not None) for name in sorted(known)]
        installed = [name for name, ok in found if ok]
        default = agents.default if agents.default in installed else next(iter(installed), None)
        return found, default

    def root_of(self, path: Path | str) -> str | None:
        """The main checkout of the repository that contains `path`, registered or not (None
        outside any): where the board's new-task form starts."""
        try:
            return str(discover(Path(path)).root)
        except LaneboardError:
            return None

    def save_theme(self, name: str) -> None:
        """Remember the board's theme in the user's config file (other lines are kept)."""
        save_user_value("theme", name)

    def panes(self) -> Mapping[str, PaneState]:
        """Every pane of the runtime's server, by pane id, in one cheap call (`list-panes -a`):
        the board polls it to learn that a pane died or printed, before reading anything
        else."""
        return self.runtime.snapshot()

    def runtime_started(self) -> float | None:
        """When the runtime's server started, None when none runs: a new value after a
        reconnect means the panes of the old server are gone (a reboot, or tmux was killed)."""
        return self.runtime.started()

    def changes(self, cursor: int, *, limit: int = 1000) -> Changes:
        """What the journal recorded after `cursor` (task events and lease transitions), oldest
        first, at most `limit`; the returned cursor continues from there."""
        events = self._ledger().events(since=cursor, limit=limit)
        return Changes(tuple(events), events[-1].seq if events else cursor)

    def data_version(self) -> int:
        """Changes whenever another connection commits: poll it, then call `changes` only when
        it moved."""
        return self._ledger().database.data_version()

    # --- reconciliation ---------------------------------------------------------------------

    def doctor(self, where: RepoRef | None, *, fix: bool) -> list[tuple[Repo, list[Finding]]]:
        """Findings per repo (the given one, or every registered repo)."""
        from laneboard.core.operations import doctor

        ledger = self._ledger()
        contexts: list[tuple[Repo, RepoContext | None, Finding | None]] = []
        if where is not None:
            ctx = self._open(where)
            contexts.append((ctx.repo, ctx, None))
        else:
            for repo in ledger.repos():
                try:
                    contexts.append((repo, self._open(Path(repo.root)), None))
                except ConfigError as err:
                    contexts.append((repo, None, Finding("config-invalid", str(err))))
                except LaneboardError:
                    contexts.append((repo, None, None))
        report: list[tuple[Repo, list[Finding]]] = []
        for repo, context, problem in contexts:
            if problem is not None:
                report.append((repo, [problem]))
                continue
            if context is None or context.repo.id != repo.id:
                missing = Finding(
                    "repo-missing", f"{repo.root} is no longer this repository's checkout"
                )
                report.append((repo, [missing]))
                continue
            try:
                found = doctor.diagnose(context, ledger, fix=fix, runtime=self.runtime)
            except LaneboardError as err:  # one unreadable repo must not hide the others
                found = [Finding("check-failed", f"could not check it: {err}")]
            report.append((repo, found))
        return report
