"""Retain and discard (DESIGN.md sections 7 and 8): stop or remove a task without losing work.

Discard decides from facts gathered fresh at the moment of removal (`steps.facts`, under the repo's
root-lane lease, so no lane command runs meanwhile) and refuses with every blocker, changing
nothing, when any stands. Otherwise, in this order, each step journalled before it happens:

1. the intent (path, quarantine, branch, tip, HEAD, what `--force` lifted) makes this process the
   task's owner (`discarding`);
2. the worktree is moved (`git worktree move`, a rename: same inodes, so it still verifies) to a
   quarantine name in the area; a writer that uses the old path now fails instead of writing
   into a tree about to go;
3. the facts are read again there and judged on the intent's terms, the worktree is saved as a
   snapshot (reading only what can differ from the index), and `git status` confirms that
   nothing changed since; anything new starts this step again;
4. `git worktree remove` deletes it, without `--force` when nothing was lifted, so git's own
   last check stays on;
5. the branch is deleted only when laneboard created it, it is at the journalled tip, in use
   nowhere, and its commits are reachable elsewhere (the snapshot counts), by compare-and-swap.

A blocker found at step 3 moves the worktree back and leaves the task `retained`. A worktree that
is already gone (deleted by hand) is discarded too: its branch and what its admin dir still
holds (HEAD, index, reflogs) are saved, then only its registration is removed. `complete`
resumes an interrupted discard from the journal and the disk (`doctor --fix`), including a
removal git left half-done: files left in the quarantine are saved in a snapshot before they go.
No `rm -rf`, no repo-wide prune, no branch chosen by pattern.

Length: this module is longer than the ~400 lines the others keep to, on purpose: a discard is
one ordered sequence of journalled steps, each resumable after a crash (`Discard`), and its order
is checked by reading the steps in one place. What other operations share with it (the blockers,
the snapshot, the stop of an agent) lives in `operations.steps`.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from laneboard.core.adapters import faults, locks, procs, safefs, snapshot
from laneboard.core.adapters.git import (
    delete_ref_if,
    run_git,
    status,
    worktree_list,
    worktree_move,
    worktree_remove,
)
from laneboard.core.adapters.leases import LeaseStore
from laneboard.core.adapters.ledger import Ledger
from laneboard.core.adapters.repo import RepoContext
from laneboard.core.domain.cleanup import (
    Blocker,
    BlockerKind,
    Decision,
    Refused,
    branch_blockers,
)
from laneboard.core.domain.errors import LaneboardError
from laneboard.core.domain.lanes import Lease, LeaseKind, LeaseState
from laneboard.core.domain.lifecycle import check_transition
from laneboard.core.domain.models import Actor, Task, TaskState
from laneboard.core.domain.runtime import Runtime
from laneboard.core.domain.values import value
from laneboard.core.domain.verdict import Reason
from laneboard.core.operations.steps import confinement, snapshots
from laneboard.core.operations.steps.blockers import decide, lease_store
from laneboard.core.operations.steps.facts import (
    Observation,
    admin_dir,
    branch_facts,
    commits_at_stake,
    listed,
    observe,
)
from laneboard.core.operations.steps.stopping import retain_now

OnWait = Callable[[Lease], None] | None
QUARANTINE_PREFIX = ".discarding-"
"""Worktrees being discarded wait under `<area>/.discarding-<task id>`; no task name starts with
a dot, so the name can never be a task's."""
ROUNDS = 3
"""How many times the last look is repeated when the worktree changes under it, before the
discard gives up and leaves the task retained."""


def retain(ctx: RepoContext, ledger: Ledger, task: Task, runtime: Runtime, actor: Actor) -> Task:
    """Stop the agent (if one runs) and keep worktree and branch exactly as they are. Under the
    agents lock, like `pause`: the controller must not take this stop for the agent's exit."""
    with locks.held("agents"):
        return retain_now(ledger, ledger.task(task.id), runtime, actor)


def _refusal(task: Task, decision: Decision, force: bool) -> Refused:
    return Refused(task.name, decision.blockers, forced=force)


def _blocks(decision: Decision, force: bool) -> bool:
    return bool(decision.hard or (decision.blockers and not force))


def _refuse_unsettled(task: Task) -> None:
    if task.state is TaskState.DISCARDING:
        if task.owner_pid is not None and procs.alive(task.owner_pid, task.owner_start):
            raise LaneboardError(f"{task.name} is being discarded by process {task.owner_pid}")
        raise LaneboardError(
            f"discarding {task.name} was interrupted; `laneboard doctor --fix` finishes it"
        )


REMOVING_PREFIX = ".laneboard-removing-"
"""The name a saved worktree is renamed to just before its files are deleted (`_detach`)."""


def quarantine_for(task: Task) -> Path:
    """A free quarantine path in the task's area."""
    base = Path(task.area) / f"{QUARANTINE_PREFIX}{task.id}"
    candidate, n = base, 1
    while os.path.lexists(candidate):
        n += 1
        candidate = base.with_name(f"{base.name}-{n}")
    return candidate


def discard(
    ctx: RepoContext,
    ledger: Ledger,
    task: Task,
    *,
    force: bool,
    runtime: Runtime,
    actor: Actor,
) -> Task:
    """Snapshot, then remove the task's worktree and branch; or refuse, changing nothing."""
    _refuse_unsettled(task)
    confinement.settle(ctx.common_dir, task.id)
    check_transition(task.state, TaskState.DISCARDING)
    store = lease_store(ctx, ledger)
    own = [
        x for x in store.active(task.repo_id) if x.lane == task.id and x.state is LeaseState.RUNNING
    ]
    if own:
        # Refuse now rather than queue the root lease behind a command in this very lane.
        held = tuple(
            Blocker(BlockerKind.LEASE, f"lease held: #{x.seq} `{' '.join(x.command)}`") for x in own
        )
        raise _refusal(task, Decision(held), force)
    command = ["laneboard", "discard", task.name]
    with ctx.lane(ledger, None, LeaseKind.REMOVE, command):
        task = ledger.task(task.id)
        _refuse_unsettled(task)
        check_transition(task.state, TaskState.DISCARDING)
        seen = observe(ctx, ledger, task, runtime, store)
        decision = decide(ctx, seen)
        if _blocks(decision, force):
            raise _refusal(task, decision, force)
        task = ledger.update_task(
            task.id,
            actor=actor,
            kind="discard.intent",
            state=TaskState.DISCARDING,
            expect=task.state,
            data={
                "path": task.worktree_path,
                "quarantine": str(quarantine_for(task)),
                "branch": task.branch,
                "tip": ctx.git.branch_tip(task.branch),
                "head": seen.facts.head,
                "admin_name": task.admin_name,
                "force": force,
                "lifted": [str(b) for b in decision.blockers],
            },
        )
        faults.checkpoint("discard.after_intent")
        return Discard(ctx, ledger, task, runtime, store, actor).run(first=seen)


def complete(
    ctx: RepoContext,
    ledger: Ledger,
    task: Task,
    *,
    runtime: Runtime,
    store: LeaseStore,
    actor: Actor,
) -> Task:
    """Carry a task in `discarding`, owned by this process, through to `discarded`.
    Idempotent: each step looks at what the journal and the disk show now, so `doctor --fix`
    can call it after a crash at any point. Must run under the root-lane lease."""
    return Discard(ctx, ledger, task, runtime, store, actor).run(first=None)


@value(frozen=False)
class Discard:
    """One discard in progress, on the terms of its journalled intent."""

    ctx: RepoContext
    ledger: Ledger
    task: Task
    runtime: Runtime
    store: LeaseStore
    actor: Actor

    def __post_init__(self) -> None:
        intent = self.ledger.last_event(self.task.id, "discard.intent")
        if intent is None:
            raise LaneboardError(f"task {self.task.name} has no discard intent in the journal")
        self.intent: dict[str, Any] = intent.data
        self.intent_seq = intent.seq
        self.forced = bool(self.intent.get("force"))
        self.original = Path(self.task.worktree_path)
        self.finalized = self.intent.get("from") == TaskState.FINALIZED.value
        """The cleanup of a finalized task's worktree: it ends finalized either way."""
        recorded = self.intent.get("quarantine")
        self.quarantine = Path(recorded) if recorded else None

    def _journal(self, kind: str, data: dict[str, Any]) -> None:
        self.ledger.append_event(self.task.id, self.ctx.repo.id, kind, self.actor, data)

    def run(self, *, first: Observation | None) -> Task:
        where = self._locate()
        if where == "original":
            first = self._quarantine(first)
            where = "quarantine"
        if where == "quarantine":
            assert self.quarantine is not None
            self._remove_quarantined(first)
        elif where == "leftover":
            assert self.quarantine is not None
            self._remove_leftovers(self.quarantine)
        elif self._removal_started():
            # git removed it after the last snapshot was taken (a crash came before the journal
            # said so): only a registration can be left.
            self._unregister(self.quarantine or self.original)
            if not self._removal_finished():
                self._removed(self.quarantine or self.original)
        else:
            self._remove_missing()
        self._delete_branch()
        if self.finalized:
            return self.ledger.update_task(
                self.task.id,
                actor=self.actor,
                kind="task.cleaned",
                state=TaskState.FINALIZED,
                expect=TaskState.DISCARDING,
                settled=True,
                disposition=self.task.disposition,
            )
        return self.ledger.update_task(
            self.task.id,
            actor=self.actor,
            kind="task.discarded",
            state=TaskState.DISCARDED,
            expect=TaskState.DISCARDING,
            settled=True,
        )

    # --- where the worktree is ---------------------------------------------------------------

    def _locate(self) -> str:
        """`original`, `quarantine` (verified there), `leftover` (the quarantine directory, by its
        pinned inode, after git lost its `.git` half-way through removal) or `missing`."""
        q = self.quarantine
        for detached in self._detached():
            # A crash between `_detach`'s rename and the end of its removal: put it back where
            # the quarantine was, and go on from there (saved again, or its leftovers saved).
            if q is not None and not os.path.lexists(q) and self._ours(detached):
                os.rename(detached, q)
        if q is not None and os.path.lexists(q):
            verdict = self.ctx.verify(self.task, path=q)
            if verdict.ok:
                return "quarantine"
            if verdict.reason is Reason.BACKLINK_MISMATCH and self._ours(q):
                # The rename happened but git's link was not rewritten (a crash inside the move).
                run_git(["worktree", "repair", str(q)], cwd=self.ctx.root, read=False)
                if self.ctx.verify(self.task, path=q).ok:
                    return "quarantine"
            if self._ours(q) and self._removal_started():
                return "leftover"
            raise self._stop_hard(f"{q} is not the worktree laneboard quarantined: {verdict}")
        if os.path.lexists(self.original):
            verdict = self.ctx.verify(self.task)
            if not verdict.ok:
                raise self._stop_hard(f"verification: {verdict}")
            return "original"
        return "missing"

    def _detached(self) -> list[Path]:
        """Where `_detach` renamed the worktree, by the journal, after this discard's intent."""
        return [
            Path(e.data["detached"])
            for e in self.ledger.events(self.task.id)
            if e.kind == "worktree.removing" and e.seq > self.intent_seq and e.data.get("detached")
        ]

    def _removal_started(self) -> bool:
        """`git worktree remove` may have run: the journal says so after the intent."""
        return any(
            e.kind == "worktree.removing" and e.seq > self.intent_seq
            for e in self.ledger.events(self.task.id)
        )

    def _removal_finished(self) -> bool:
        return any(
            e.kind == "worktree.removed" and e.seq > self.intent_seq
            for e in self.ledger.events(self.task.id)
        )

    def _ours(self, path: Path) -> bool:
        """The directory at `path` is the worktree directory laneboard pinned (same inode)."""
        identity = self.task.identity
        try:
            info = path.lstat()
        except OSError:
            return False
        return (
            identity is not None
            and stat.S_ISDIR(info.st_mode)
            and (info.st_dev, info.st_ino) == (identity.dir_dev, identity.dir_ino)
        )

    def _quarantine(self, first: Observation | None) -> Observation | None:
        """Move the worktree out of its path; return `first` still valid for its `git status`."""
        if self.quarantine is None:  # an intent journalled before quarantines existed
            self.quarantine = quarantine_for(self.task)
            self._journal("discard.quarantine", {"quarantine": str(self.quarantine)})
        worktree_move(self.ctx.root, self.original, self.quarantine)
        self._journal(
            "worktree.quarantined", {"from": str(self.original), "to": str(self.quarantine)}
        )
        faults.checkpoint("discard.after_quarantine")
        return first

    # --- the last look, the snapshot, the removal ----------------------------------------------

    def _remove_quarantined(self, first: Observation | None) -> None:
        assert self.quarantine is not None
        q = self.quarantine
        known = first.status if first is not None else None
        for _round in range(ROUNDS):
            seen = observe(
                self.ctx,
                self.ledger,
                self.task,
                self.runtime,
                self.store,
                path=q,
                known=known,
                known_index=first,
            )
            decision = decide(self.ctx, seen)
            if _blocks(decision, self.forced):
                raise self._stop(decision)
            assert seen.status is not None
            admin = admin_dir(self.ctx, self.task)
            assert admin is not None
            captured = snapshot.capture(
                self.ctx.git.handle,
                q,
                admin,
                seen.status,
                common_dir=self.ctx.common_dir,
                tracked_files=seen.index.files,
            )
            saved = self._save(captured, seen)
            faults.checkpoint("discard.after_snapshot")
            now = status(q, ignored=True)
            if now.ignored != seen.status.ignored or not snapshot.unchanged_since(q, captured, now):
                known = now  # something changed after the look: look again
                continue
            doomed = q.with_name(f"{REMOVING_PREFIX}{self.task.id}-{os.urandom(4).hex()}")
            self._journal(
                "worktree.removing",
                {
                    "path": str(q),
                    "detached": str(doomed),
                    "original": str(self.original),
                    "branch": self.task.branch,
                    "tip": self.intent.get("tip"),
                    "head": seen.facts.head,
                    "snapshot": saved.ref,
                },
            )
            faults.checkpoint("discard.before_remove")
            verdict = self.ctx.verify(self.task, path=q)  # right before: still the pinned tree
            if not verdict.ok:
                raise self._stop_hard(f"worktree changed during discard: {verdict}")
            faults.checkpoint("discard.after_verify")
            if not self._detach(q, doomed, captured):
                known = None  # something changed, or it was put back: look again
                continue
            self._unregister(q)
            self._removed(q)
            return
        raise self._stop(
            Decision(
                (Blocker(BlockerKind.PROCESS, "the worktree kept changing while it was saved"),)
            )
        )

    def _detach(self, q: Path, doomed: Path, captured: snapshot.Capture) -> bool:
        """Remove the saved worktree through handles that cannot be swapped underneath: rename
        whatever is at `q` to the unguessable `doomed` beside it, open that without following
        a link, and go on only if it is the directory laneboard pinned and still exactly as
        saved (a file written into it at the last moment, before the rename, is seen here; one
        written after cannot find it). Anything else is renamed back (False: look again) or,
        when it is not ours at all, refused. Then the tree is deleted below the opened
        directory (`rmtree` by descriptors, never entering a link)."""
        area = safefs.open_dir(q.parent)
        if area is None:
            raise self._stop_hard(f"{q.parent} is not a directory")
        try:
            os.rename(q.name, doomed.name, src_dir_fd=area, dst_dir_fd=area)
            faults.checkpoint("discard.after_detach")
            top = safefs.open_dir(doomed.name, area)
            pinned = self.task.identity
            info = os.fstat(top) if top is not None else None
            ours = (
                info is not None
                and pinned is not None
                and (info.st_dev, info.st_ino) == (pinned.dir_dev, pinned.dir_ino)
            )
            if top is not None:
                os.close(top)
            if not ours:
                os.rename(doomed.name, q.name, src_dir_fd=area, dst_dir_fd=area)
                raise self._stop_hard(f"{q} was replaced during discard; left in place")
            now = status(doomed, ignored=True)
            if now.ignored != captured.status.ignored or not snapshot.unchanged_since(
                doomed, captured, now
            ):
                os.rename(doomed.name, q.name, src_dir_fd=area, dst_dir_fd=area)
                return False
            shutil.rmtree(doomed.name, dir_fd=area)
        finally:
            os.close(area)
        return True

    def _removed(self, where: Path) -> None:
        self._journal(
            "worktree.removed",
            {
                "path": str(self.original),
                "removed": str(where),
                "branch": self.task.branch,
                "tip": self.intent.get("tip"),
            },
        )
        faults.checkpoint("discard.after_worktree_remove")

    def _next_ref(self) -> tuple[int, str]:
        return snapshots.next_ref(self.ctx, self.ledger, self.task)

    def _message(self, n: int) -> str:
        return snapshots.message(self.task, n)

    def _save(self, captured: snapshot.Capture, seen: Observation) -> snapshot.Snapshot:
        head = seen.facts.head
        assert head is not None  # an unborn HEAD is a hard blocker
        return snapshots.save_capture(
            self.ctx, self.ledger, self.task, self.actor, captured, head, seen.facts.kept_tips
        )

    def _record(self, n: int, saved: snapshot.Snapshot, **data: Any) -> snapshot.Snapshot:
        return snapshots.record(self.ctx, self.ledger, self.task, self.actor, n, saved, **data)

    def _remove_leftovers(self, q: Path) -> None:
        """git removed the quarantine's `.git` (and perhaps its admin dir) but not every file:
        something wrote there during removal. Save what is left, then remove exactly that."""
        for _round in range(ROUNDS):
            parent = self._latest_sha() or self.ctx.git.branch_tip(self.task.branch)
            if parent is None:
                raise LaneboardError(f"no commit to save the files left in {q} on top of")
            n, ref = self._next_ref()
            saved, read = snapshot.of_files(
                self.ctx.git.handle,
                self.ctx.root,
                q,
                ref=ref,
                parent=parent,
                message=self._message(n) + ": files left after removal",
            )
            self._record(n, saved, leftovers=[path for path, _key in read])
            self._journal("worktree.removing", {"path": str(q), "leftovers": len(read)})
            if snapshot.remove_saved(q, read):
                self._unregister(q)
                self._removed(q)
                return
        raise LaneboardError(f"{q} keeps receiving files; saved what was there, left it in place")

    def _unregister(self, where: Path) -> None:
        """Remove git's registration of a worktree whose directory is gone (only that one)."""
        for path in dict.fromkeys((where, self.original)):
            if listed(worktree_list(self.ctx.root), path) is not None:
                worktree_remove(self.ctx.root, path, force=False)

    def _remove_missing(self) -> None:
        """The worktree's directory is gone: save what its branch and admin dir still hold,
        then remove only its registration."""
        seen = observe(self.ctx, self.ledger, self.task, self.runtime, self.store)
        decision = decide(self.ctx, seen)
        if _blocks(decision, self.forced):
            raise self._stop(decision)
        commit = seen.facts.head or self.ctx.git.branch_tip(self.task.branch)
        if commit is not None:
            n, ref = self._next_ref()
            admin = admin_dir(self.ctx, self.task)
            index_tree = _index_tree(self.ctx.root, admin) if admin is not None else None
            _, kept = commits_at_stake(self.ctx, self.task, admin, seen.facts.head)
            saved = snapshot.of_commit(
                self.ctx.git.handle,
                self.ctx.root,
                ref=ref,
                commit=commit,
                index_tree=index_tree,
                extras=kept,
                message=self._message(n) + ": its worktree was already gone",
            )
            self._record(n, saved)
        if seen.facts.registered:
            self._journal(
                "worktree.removing",
                {"path": str(self.original), "branch": self.task.branch, "missing": True},
            )
            self._unregister(self.original)
            self._removed(self.original)

    def _latest_sha(self) -> str | None:
        snaps = self.ledger.snapshots(self.task.id)
        return snaps[-1][2] if snaps else None

    # --- stopping -------------------------------------------------------------------------

    def _stop(self, decision: Decision) -> Refused:
        """A blocker appeared: put the worktree back and leave the task retained."""
        stopped = decision.hard if self.forced else decision.blockers
        self._settle_retained([str(b) for b in stopped])
        return _refusal(self.task, decision, self.forced)

    def _stop_hard(self, reason: str) -> Refused:
        self._settle_retained([reason])
        blocker = Blocker(BlockerKind.VERIFICATION, reason, self.task.worktree_path)
        return Refused(self.task.name, (blocker,), forced=self.forced)

    def _settle_retained(self, reasons: list[str]) -> None:
        q = self.quarantine
        fields: dict[str, Any] = {}
        if q is not None and self.ctx.verify(self.task, path=q).ok:
            if not os.path.lexists(self.original):
                worktree_move(self.ctx.root, q, self.original)
                self._journal("worktree.unquarantined", {"from": str(q), "to": str(self.original)})
            else:
                # Something was made at the old path meanwhile; the worktree stays where it is.
                fields["worktree_path"] = str(q)
                reasons.append(f"{self.original} is taken now; the worktree stays at {q}")
        self.task = self.ledger.update_task(
            self.task.id,
            actor=self.actor,
            kind="discard.stopped",
            state=TaskState.FINALIZED if self.finalized else TaskState.RETAINED,
            data={"blockers": reasons},
            settled=True,
            keep_live=True,
            disposition=self.task.disposition,
            **fields,
        )

    # --- the branch -------------------------------------------------------------------------

    def _delete_branch(self) -> None:
        task, ctx = self.task, self.ctx
        facts = branch_facts(ctx, task, self.intent.get("tip"))
        if facts.tip is None:
            self._journal("branch.absent", {"branch": task.branch})
            return
        decision = branch_blockers(facts)
        faults.checkpoint("discard.before_branch_delete")
        if decision.clear and delete_ref_if(ctx.root, f"refs/heads/{task.branch}", facts.tip):
            self._journal("branch.deleted", {"branch": task.branch, "tip": facts.tip})
            return
        reasons = [str(b) for b in decision.blockers] or ["the branch moved during deletion"]
        self._journal("branch.kept", {"branch": task.branch, "reasons": reasons})


def _index_tree(root: Path, admin: Path) -> str | None:
    """The tree of the index a missing worktree's admin dir still holds (read from a copy, so
    the admin dir is not written), or None."""
    fd = safefs.open_regular(admin / "index")  # the task's file: no link, no FIFO
    if fd is None:
        return None
    with tempfile.TemporaryDirectory(prefix="laneboard-index-") as tmp:
        copy = Path(tmp) / "index"
        with os.fdopen(fd, "rb") as source, open(copy, "wb") as target:
            shutil.copyfileobj(source, target)
        result = run_git(
            ["write-tree"], cwd=root, read=False, check=False, env={"GIT_INDEX_FILE": str(copy)}
        )
    return result.stdout.decode().strip() if result.returncode == 0 else None
