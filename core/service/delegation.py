"""The service's delegation commands: a task's children, their completion records, waiting for
them, cancelling and retrying (DESIGN.md section 10; docs/delegation.md).

A mixin of `Service`, like the agent and review commands. A child is an ordinary task with a
`parent_id` (`Service.new(parent=...)` makes one): the same provisioning, lanes, queue and
confinement. Nothing here merges, pushes or removes a child's work, except `cancel` of a child
whose agent never started, which removes exactly what provisioning created (`operations.cancel`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from laneboard.core.adapters.leases import Cancel, Cancelled
from laneboard.core.domain.errors import LaneboardError, WaitTimeout
from laneboard.core.domain.lanes import Lease
from laneboard.core.domain.models import Task, TaskState
from laneboard.core.domain.views import Completion, Outcome
from laneboard.core.service.parts import ServicePart

if TYPE_CHECKING:
    pass

CHECK_RESULTS = ("pass", "fail")
Wake = Callable[[float], None]
"""Blocks until something may have changed (the ledger or an agent's event file was written)
or the given seconds have passed. The command line passes one that watches those files."""
OBSERVE = 5.0
"""At most this long between looks while waiting: an agent whose only sign of being done is
its screen writes no file."""
MAX_DEPTH_WALK = 64


class DelegationCommands(ServicePart):
    """Delegation commands over the service's ledger and runtime (mixed into `Service`)."""

    # --- the tree ------------------------------------------------------------------------------

    def task_by_id(self, task_id: str) -> Task:
        """A task by its full id, in whichever repository it is (what `LANEBOARD_TASK` holds)."""
        return self._ledger().task(task_id)

    def resolve(self, where: Path | str | int, ref: str) -> Task:
        """The task `ref` names: a full task id anywhere, else a name or id prefix in the
        repository of `where`."""
        ledger = self._ledger()
        try:
            return ledger.task(ref)
        except LaneboardError:
            return self._find(self._open(where), ref)

    def task_at(self, path: Path) -> Task | None:
        """The live task whose worktree `path` is in, or None: how a server an agent started in
        its worktree knows whose subtree it serves. Refused when that worktree fails
        verification (a forged worktree must not widen anyone's scope to everything)."""
        here = os.path.realpath(path)
        for task in self._ledger().tasks(include_retired=False):
            root = os.path.realpath(task.worktree_path)
            if here == root or here.startswith(root + os.sep):
                verdict = self._open(task.repo_id).verify(task)
                if not verdict.ok:
                    raise LaneboardError(
                        f"{path} is in the worktree of {task.name}, which fails verification: "
                        f"{verdict}"
                    )
                return task
        return None

    def depth(self, task: Task) -> int:
        """How many parents above `task` (a top-level task is 0)."""
        ledger, depth, at = self._ledger(), 0, task
        while at.parent_id is not None and depth < MAX_DEPTH_WALK:
            at = ledger.task(at.parent_id)
            depth += 1
        return depth

    def children(self, task: Task, *, include_retired: bool = True) -> list[Task]:
        return self._ledger().children(task.id, include_retired=include_retired)

    def descendants(self, task: Task, *, include_retired: bool = True) -> list[Task]:
        """Every task below `task`, each parent before its children; without
        `include_retired`, the live ones only, found through retired ones too (a live
        grandchild of a retired child is still below `task`)."""
        found: list[Task] = []
        todo = [task]
        while todo:
            below = self.children(todo.pop(0))
            found += below
            todo += below
        return found if include_retired else [t for t in found if t.live]

    def within(self, root: Task, task: Task) -> bool:
        """`task` is `root` or below it (the scope of a child's MCP server)."""
        ledger, at, steps = self._ledger(), task, 0
        while steps <= MAX_DEPTH_WALK:
            if at.id == root.id:
                return True
            if at.parent_id is None:
                return False
            at = ledger.task(at.parent_id)
            steps += 1
        return False

    # --- what children report ------------------------------------------------------------------

    def report_check(self, task_id: str, name: str, result: str) -> None:
        """A check the task ran on its own work (`signal --check NAME=pass|fail`): journalled,
        and shown in its completion record (the newest result per name)."""
        if result not in CHECK_RESULTS:
            raise LaneboardError(f"check {name!r}: the result is pass or fail, not {result!r}")
        if not name or any(c.isspace() for c in name) or len(name) > 100:
            raise LaneboardError(f"check name {name!r}: a word of up to 100 characters")
        task = self._ledger().task(task_id)
        self._ledger().append_event(
            task.id, task.repo_id, "check.reported", self.actor, {"name": name, "result": result}
        )

    def report_message(self, task_id: str, text: str) -> None:
        """The agent's summary of its work (`signal --message`), kept for its parent."""
        task = self._ledger().task(task_id)
        self._ledger().append_event(
            task.id, task.repo_id, "agent.message", self.actor, {"text": text[:20000]}
        )

    def completion(self, task: Task) -> Completion:
        """The task's completion record now (read only)."""
        from laneboard.core.operations.completion import completion

        ctx = self._open(task.repo_id)
        return completion(ctx, self._ledger(), self.runtime, self._ledger().task(task.id))

    def wait(
        self,
        tasks: list[Task],
        *,
        any_: bool = False,
        timeout: float | None = None,
        wake: Wake | None = None,
        cancel: Cancel | None = None,
    ) -> list[Completion]:
        """Block until every task in `tasks` is done (with `any_`, until one is), then return
        the records of those that are done (a running task whose pane is gone counts: nothing
        more will happen to it until it is resumed, and its record says `lost`). Each round
        writes down what the agents did (`reconcile`: an agent that exited makes its task
        ready for review), so no controller needs to run. `wake` blocks until something
        changed; `timeout` gives up (`WaitTimeout`, naming those still at work)."""
        from laneboard.core.operations.completion import is_done, is_lost

        if not tasks:
            raise LaneboardError("name at least one task to wait for")
        tasks = list({task.id: task for task in tasks}.values())  # each once
        self._same_servers(tasks)
        ledger = self._ledger()
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            self.reconcile()
            now = [ledger.task(task.id) for task in tasks]
            finished = [task for task in now if is_done(task) or is_lost(self.runtime, task)]
            if (any_ and finished) or len(finished) == len(now):
                return [self.completion(task) for task in finished]
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                busy = ", ".join(f"{t.name} ({t.state.value})" for t in now if t not in finished)
                raise WaitTimeout(f"still at work after {timeout:g}s: {busy}")
            step = OBSERVE if left is None else min(OBSERVE, left)
            if cancel is not None and cancel.cancelled:
                raise Cancelled("waiting was cancelled")
            (wake or time.sleep)(step)

    def _same_servers(self, tasks: list[Task]) -> None:
        """Refuse to wait for a task whose agent runs on another tmux server than this process
        talks to: its exit would never be seen from here."""
        here = self.runtime.socket_path
        for task in tasks:
            if task.live and task.tmux_socket and here and task.tmux_socket != here:
                raise LaneboardError(
                    f"{task.name}: its agent runs on the tmux server {task.tmux_socket}, not "
                    f"{here}; set LANEBOARD_TMUX_SOCKET={task.tmux_socket}"
                )

    def finished(self, tasks: list[Task]) -> tuple[list[Completion], list[Task]]:
        """The records of those of `tasks` that are done now, and the others (as they are
        now); what a `wait` that timed out still reports."""
        from laneboard.core.operations.completion import is_done, is_lost

        now = [self._ledger().task(task.id) for task in {t.id: t for t in tasks}.values()]
        done = [t for t in now if is_done(t) or is_lost(self.runtime, t)]
        return [self.completion(t) for t in done], [t for t in now if t not in done]

    # --- cancelling and retrying -----------------------------------------------------------

    def cancel_removes(self, task: Task) -> bool:
        """A cancel of `task` now would remove what it created (no agent was ever handed its
        worktree), rather than keep everything. What the board's dialog says before asking."""
        from laneboard.core.operations.steps import cancelling

        now = self._ledger().task(task.id)
        before_agent = now.state in (*cancelling.NOT_STARTED, TaskState.PROVISIONING)
        return before_agent and not cancelling.ever_started(self._ledger(), now)

    def _retarget_children(self, parent: Task) -> list[tuple[Task, str | None]]:
        """A cancel that removes `parent`'s branch keeps its children: those that land on that
        branch land on the parent's own target instead, each journalled (`task.retargeted`).
        Returns each child as it is now with the target it had. Tasks stacked on the branch
        that are not its children still refuse the cancel."""
        from laneboard.core.operations.steps.facts import dependents

        ledger = self._ledger()
        moved: list[tuple[Task, str | None]] = []
        for child in dependents(ledger, parent):
            if child.parent_id != parent.id or not parent.target:
                continue
            now = ledger.update_task(
                child.id,
                actor=self.actor,
                kind="task.retargeted",
                data={"from": child.target, "to": parent.target, "why": f"{parent.name} cancelled"},
                target=parent.target,
            )
            moved.append((now, child.target))
        return moved

    def _retarget_back(self, moved: list[tuple[Task, str | None]], parent: Task) -> None:
        """The cancel did not remove the parent's branch: its children target it again."""
        for child, old in moved:
            self._ledger().update_task(
                child.id,
                actor=self.actor,
                kind="task.retargeted",
                data={"from": child.target, "to": old, "why": f"{parent.name} kept"},
                target=old,
            )

    def cancel(
        self,
        where: Path | str | int,
        task: str,
        *,
        children: Literal["keep", "cancel"] = "keep",
        timeout: float | None = None,
        on_wait: Callable[[Lease], None] | None = None,
    ) -> Outcome:
        """Cancel a task: before its agent started, stop its provisioning or setup and remove
        exactly what it created (`cancelled`); after, stop the agent and keep worktree and
        branch (`retained`). Its live children are kept (`children="keep"`, named in the notes)
        or cancelled first, deepest first."""
        from laneboard.core.operations import cancel as cancelling

        ledger = self._ledger()
        found = self.resolve(where, task)
        notes: list[str] = []
        retargeted: list[tuple[Task, str | None]] = []
        below = [t for t in self.descendants(found, include_retired=False) if t.live]
        if children == "cancel":
            for child in reversed(below):
                ctx = self._open(child.repo_id)
                ctx.on_wait = on_wait
                ended = cancelling.cancel(
                    ctx, ledger, self.runtime, child, self.actor, timeout=timeout
                )
                notes.append(f"{ended.name}: {ended.state.value}")
        elif below:
            names = ", ".join(t.name for t in below)
            notes.append(f"kept its {len(below)} live descendants ({names}); --children cancel")
        if found.live and self.cancel_removes(found):  # its branch goes: kept children move on
            retargeted = self._retarget_children(found)
        if not found.live:
            return Outcome(found, self._open(found.repo_id).repo, changed=False, notes=tuple(notes))
        ctx = self._open(found.repo_id)
        ctx.on_wait = on_wait
        before = found.state
        try:
            ended = cancelling.cancel(ctx, ledger, self.runtime, found, self.actor, timeout=timeout)
        except BaseException:
            self._retarget_back(retargeted, found)
            raise
        if ended.state is not TaskState.CANCELLED:
            self._retarget_back(retargeted, found)  # its branch stays: so do their targets
        else:
            notes += [f"{child.name} now targets {child.target}" for child, _ in retargeted]
        said = ledger.last_event(ended.id, "task.cancelled")
        if ended.state is TaskState.CANCELLED and said is not None:
            notes = [f"kept: {kept}" for kept in said.data.get("kept") or ()] + notes
        self.reconcile()  # the slot it held may start a queued task
        return Outcome(ended, ctx.repo, changed=ended.state is not before, notes=tuple(notes))
