"""The service's review loop (docs/review.md, "The review loop"), mixed into `Service` so the
command line and the board call the same methods: checkpoints (taken by the controller at the
end of each agent turn, listed, pinned, taken on request), rewind, what changed since the last
review, and comments sent to the agent as one prompt.

The controller's part, `checkpoint_turns`, runs in `reconcile(record=True)`: a running task
whose agent is idle after a turn it has not seen (a newer hook event, or, without hooks, a
working-to-idle change of its screen) gets a checkpoint, and so does one whose agent exited.
Which turns were seen is this process's memory: a new controller looks once more, and finds
the worktree unchanged.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from typing import TYPE_CHECKING

from laneboard.core.adapters import agentfiles
from laneboard.core.adapters.config import state_dir
from laneboard.core.domain.agents import HOOK_STATES, AgentState, State
from laneboard.core.domain.errors import LaneboardError
from laneboard.core.domain.models import Actor, Task
from laneboard.core.domain.review import Since
from laneboard.core.domain.reviewloop import Checkpoint, Comment, CommentState, Side
from laneboard.core.operations.steps import agentstate
from laneboard.core.service.parts import RepoRef, ServicePart

if TYPE_CHECKING:
    pass


CHECKPOINT_WAIT = 60.0
"""Seconds a task's next turn checkpoint waits for the one before it to finish."""


def checkpointer_argv(task_id: str, turn: str) -> list[str]:
    """The process that takes a turn's checkpoint for the controller."""
    asked = json.dumps({"task": task_id, "turn": turn})
    return [sys.executable, "-P", "-m", "laneboard.core.service.checkpointer", asked]


SESSION_STARTS = ("SessionStart",)
"""Hook events that say idle because the agent just started, not because a turn ended."""


class ReviewLoopCommands(ServicePart):
    """Checkpoints, rewind, comments; `Service` provides the lookups and `send`."""

    _turns: dict[str, str]
    _was: dict[str, AgentState]
    _apart: dict[str, subprocess.Popen[bytes]]

    # --- checkpoints -------------------------------------------------------------------------

    def checkpoints(self, where: RepoRef, task: str) -> tuple[Task, list[Checkpoint]]:
        from laneboard.core.operations import checkpoints

        ctx = self._open(where)
        found = self._find(ctx, task)
        return found, checkpoints.listing(self._ledger(), found)

    def checkpoint(self, where: RepoRef, task: str) -> Checkpoint | None:
        """Take a checkpoint now (None: the worktree is exactly the last one)."""
        from laneboard.core.operations import checkpoints

        ctx = self._open(where)
        found = self._live(ctx, task)
        verdict = ctx.verify(found)
        if not verdict.ok:
            raise LaneboardError(f"{found.name}: its worktree fails verification: {verdict}")
        return checkpoints.take(ctx, self._ledger(), found, self.actor, turn="asked")

    def pin_checkpoint(self, where: RepoRef, task: str, n: int, *, pinned: bool) -> Checkpoint:
        from laneboard.core.operations import checkpoints

        ctx = self._open(where)
        return checkpoints.pin(self._ledger(), self._find(ctx, task), n, self.actor, pinned)

    def rewind(
        self, where: RepoRef, task: str, n: int | None = None, *, fork: bool = False
    ) -> tuple[Checkpoint, Checkpoint]:
        """Bring the worktree back to checkpoint `n` (default: the one before the newest);
        returns the checkpoint of the state it left and the one it went back to. `fork`: then
        the agent goes on in a new conversation forked from its own (`fork`), so the one that
        made the turns undone stays as it was; refused before anything changes when the
        agent cannot fork."""
        from laneboard.core.operations import checkpoints

        ctx = self._open(where)
        found = self._live(ctx, task)
        if fork:
            agentstate.fork_profile(ctx.settings, found)
        before, to = checkpoints.rewind(ctx, self._ledger(), self.runtime, found, n, self.actor)
        if fork:
            try:
                self.fork(where, task)
            except LaneboardError as err:
                raise LaneboardError(
                    f"{found.name}: back at checkpoint {to.n} (`laneboard rewind {found.name} "
                    f"{before.n}` undoes it), but its agent did not fork: {err}"
                ) from None
        return before, to

    def checkpoint_turns(self, running: list[Task], states: dict[str, State]) -> None:
        """The controller's part: a checkpoint for each running task whose agent ended a turn
        it has not seen yet, or exited. Each is taken by a process of its own
        (`core.service.checkpointer`: the controller never loads pygit2, 12 MB it would keep
        for good), started at once and not waited for, in a session of its own (a Ctrl-C at
        the board's terminal does not cut it short); a task's checkpoints are taken one at a
        time (the next waits for the one before). A task whose worktree cannot be read is
        skipped (its next turn tries again)."""
        if not hasattr(self, "_turns"):
            self._turns, self._was, self._apart = {}, {}, {}
        for task in running:
            state = states.get(task.id)
            if state is None:
                continue
            before = self._was.get(task.id)
            self._was[task.id] = state.state
            turn = self._turn(task, state, before)
            if turn is None or self._turns.get(task.id) == turn:
                continue
            self._turns[task.id] = turn
            try:
                ctx = self._open(task.repo_id)
                if not ctx.settings.checkpoints.enabled or not ctx.verify(task).ok:
                    continue
            except LaneboardError:
                continue
            last = self._apart.pop(task.id, None)
            if last is not None and last.poll() is None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    last.wait(timeout=CHECKPOINT_WAIT)  # (two turns within one checkpoint)
            for done in [t for t, p in self._apart.items() if p.poll() is not None]:
                del self._apart[done]  # (reaped)
            self._apart[task.id] = subprocess.Popen(
                checkpointer_argv(task.id, turn),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )

    def turn_checkpoint(self, task_id: str, turn: str) -> Checkpoint | None:
        """The checkpoint of turn `turn` of task `task_id`, as the controller takes it (in the
        process `checkpoint_turns` starts): the worktree saved when it changed, else the note
        `checkpoint.unchanged`, so a reader knows it looked. None when nothing was saved."""
        from laneboard.core.operations import checkpoints

        task = self._ledger().task(task_id)
        if not task.live:
            return None
        ctx = self._open(task.repo_id)
        if not ctx.settings.checkpoints.enabled or not ctx.verify(task).ok:
            return None
        made = checkpoints.take(ctx, self._ledger(), task, Actor.CONTROLLER, turn=turn)
        if made is None:  # the turn changed nothing: said, so a reader knows it looked
            self._ledger().append_event(
                task.id, task.repo_id, "checkpoint.unchanged", Actor.CONTROLLER, {"turn": turn}
            )
        return made

    @staticmethod
    def _turn(task: Task, state: State, before: AgentState | None) -> str | None:
        """What names the turn that just ended, or None while no turn ended: the agent's last
        hook event when a hook said it is idle; the moment its screen went from working to
        idle; its exit."""
        if state.state is AgentState.EXITED:
            return f"exit {task.agent_started_at}"
        if state.state is not AgentState.IDLE:
            return None
        if state.source == "hook":
            event = agentfiles.last_event(state_dir(), task.id)
            if event is None or event.name in SESSION_STARTS:
                return None  # the agent started: no turn ended yet
            if HOOK_STATES.get(event.name) is not AgentState.IDLE:
                # A newer event than the one the state was read from: the next turn began
                # between the two reads, and its end is the turn to checkpoint.
                return None
            return f"hook {event.name} {event.at}"
        if before is AgentState.WORKING:
            return f"screen {time.time():.3f}"
        return None

    # --- since the last review -------------------------------------------------------------

    def review_since(self, where: RepoRef, task: str) -> Since | None:
        """What changed since the task's reviewed SHA (None: never reviewed, or unchanged)."""
        from laneboard.core.operations import review

        ctx = self._open(where)
        found = self._find(ctx, task)
        seen = review.review(ctx, self._ledger(), found)
        return review.since(ctx, self._ledger(), found, seen)

    # --- comments ----------------------------------------------------------------------------

    def comment(
        self, where: RepoRef, task: str, at: str, text: str, *, side: str = "new"
    ) -> Comment:
        from laneboard.core.operations import review

        ctx = self._open(where)
        found = self._live(ctx, task)
        try:
            chosen = Side(side)
        except ValueError:
            raise LaneboardError(f"--side {side!r}: use new or old") from None
        return review.add_comment(
            ctx, self._ledger(), found, self.actor, where=at, text=text, side=chosen
        )

    def comments(
        self, where: RepoRef, task: str, *, resolved: bool = False
    ) -> list[tuple[Comment, bool]]:
        """The task's comments with whether each is outdated (its line reads differently)."""
        from laneboard.core.operations import review

        ctx = self._open(where)
        return review.comments(self._ledger(), self._find(ctx, task), resolved=resolved)

    def send_comments(
        self, where: RepoRef, task: str, *, timeout: float | None = 60.0
    ) -> list[Comment]:
        """Send the open comments to the agent as one prompt, once its worktree verifies and
        it is idle (or waiting); they are marked sent. Returns them."""
        from laneboard.core.operations import review

        ctx = self._open(where)
        found = self._live(ctx, task)
        text, waiting = review.comments_prompt(self._ledger(), found)
        self.send(ctx.repo.id, found.id, text, when_idle=True, timeout=timeout)
        review.mark_comments(self._ledger(), found, waiting, self.actor, CommentState.SENT)
        return waiting

    def resolve_comment(self, where: RepoRef, task: str, comment_id: int) -> Comment:
        from laneboard.core.operations import review

        ctx = self._open(where)
        return review.resolve(self._ledger(), self._find(ctx, task), comment_id, self.actor)
