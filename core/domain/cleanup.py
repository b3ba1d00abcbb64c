"""The cleanup policy (DESIGN.md section 8): facts about a worktree and its branch in, blockers
out.

Pure: no disk, no git, no clock. The facts are gathered fresh from disk at the moment of removal
by `operations.steps.facts`; this module only decides. A blocker is a value carrying the fact
behind it (`untracked file: notes.md`) so the operator can act on it.

Some blockers can be lifted by a snapshot (the work is then saved under
`refs/laneboard/snapshots/…` before removal, and `laneboard restore` brings it back); the others
can never be overridden, because removing the worktree would lose something a snapshot cannot
hold or would pull the ground from under someone still working there.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence
from enum import StrEnum

from laneboard.core.domain.errors import LaneboardError
from laneboard.core.domain.values import field, value


class BlockerKind(StrEnum):
    """Why a worktree or branch may not be removed now."""

    NOT_OURS = "not-ours"
    """laneboard did not create it (so it has no licence to remove it)."""
    VERIFICATION = "verification"
    """The worktree fails verification: forged, moved, symlinked, or its identity changed."""
    LEASE = "lease"
    """A lease is held on the task's lane: a command is running there."""
    AGENT = "agent"
    """A process of the task's pane is alive."""
    PROCESS = "process"
    """A process has its working directory, or an open file, inside the worktree."""
    UNCOMMITTED = "uncommitted"
    """A staged or unstaged change to a tracked file."""
    UNTRACKED = "untracked"
    """An untracked file (not ignored), found whatever `status.showUntrackedFiles` says."""
    IGNORED = "ignored"
    """An ignored file that is not a rebuildable cache (`cleanup.rebuildable`)."""
    HIDDEN = "hidden"
    """A tracked file marked assume-unchanged or skip-worktree: its changes would be invisible."""
    CONFLICT = "conflict"
    """An unmerged index entry."""
    OPERATION = "operation"
    """A merge, rebase, cherry-pick, revert, sequencer or bisect is in progress."""
    LOCKED = "locked"
    """The worktree is locked (`git worktree lock`) by someone."""
    INITIALIZING = "initializing"
    """The worktree is still being created (locked while initializing)."""
    SUBMODULE = "submodule"
    """An initialized submodule lives inside."""
    NESTED = "nested"
    """Another registered worktree, or a repository of its own (an untracked directory with a
    `.git`), lies inside this one: removal would delete its history, which no snapshot holds."""
    UNIQUE_COMMITS = "unique-commits"
    """HEAD or the branch holds commits reachable from no other branch, remote-tracking ref, tag
    or laneboard anchor/snapshot ref."""
    UNBORN = "unborn"
    """HEAD names a branch that does not exist (it was deleted under the worktree)."""
    BRANCH_MOVED = "branch-moved"
    """The branch tip is not the tip recorded before removal."""
    BRANCH_IN_USE = "branch-in-use"
    """The branch is checked out, or under rebase or bisect, in some worktree."""
    DEPENDENT = "dependent"
    """A live task targets this task's branch (a child lands there): removing the branch would
    leave it nothing to be finalized into."""
    MOVED = "moved"
    """The worktree was moved by hand: a checkout elsewhere still leads into its admin dir (its
    index, HEAD and the branch it has checked out), which removal would break."""


SNAPSHOT_LIFTS = frozenset(
    {BlockerKind.UNCOMMITTED, BlockerKind.UNTRACKED, BlockerKind.UNIQUE_COMMITS}
)
"""What a snapshot saves: commits, staged, unstaged and untracked-not-ignored files."""


@value
class Blocker:
    """One fact that makes removal unsafe, as data the board renders and the CLI prints."""

    kind: BlockerKind
    fact: str
    """The whole line, `untracked file: notes.md`."""
    subject: str | None = None
    """The path, commit or process the fact is about (`notes.md`), when there is one."""

    @property
    def lifted_by_snapshot(self) -> bool:
        """`--force` lifts it: a snapshot holds what it guards."""
        return self.kind in SNAPSHOT_LIFTS

    def __str__(self) -> str:
        return self.fact


@value
class WorktreeFacts:
    """Everything the policy needs about one task's worktree, read fresh from disk.

    `exists` is False when nothing is at the worktree's path any more (deleted by hand, or
    removed by an interrupted discard): then only what git still keeps for it counts, its
    registration (`registered`, with its lock) and the commits of its HEAD and branch.
    """

    exists: bool = True
    registered: bool = True
    moved_to: str | None = None
    dependents: tuple[str, ...] = ()
    """Live tasks whose target is this task's branch (`facts.dependents`)."""
    """Where a checkout gone from its path lives on (moved by hand), found by
    `facts.moved_checkout`; None when none was found."""
    """git still lists a worktree at the path (a missing one shows as prunable)."""
    created_by_us: bool = True
    verification: str | None = None
    """None when verification passed, else the verdict (`symlinked: …`)."""
    leases: tuple[str, ...] = ()
    agent: tuple[str, ...] = ()
    processes: tuple[str, ...] = ()
    processes_unseen: str | None = None
    """Why processes inside cannot be checked (no readable `/proc`); None when they can."""
    staged: tuple[str, ...] = ()
    unstaged: tuple[str, ...] = ()
    conflicted: tuple[str, ...] = ()
    untracked: tuple[str, ...] = ()
    untracked_ours: frozenset[str] = frozenset()
    """Untracked or ignored files provisioning put there and nobody changed since (by content)."""
    ignored: tuple[str, ...] = ()
    hidden: tuple[str, ...] = ()
    operations: tuple[str, ...] = ()
    lock: str | None = None
    initializing: bool = False
    submodules: tuple[str, ...] = ()
    nested: tuple[str, ...] = ()
    repositories: tuple[str, ...] = ()
    """Untracked directories inside that are repositories of their own (hold a `.git`)."""
    unique_commits: tuple[str, ...] = ()
    """`<short sha> <subject>` of commits only HEAD or the branch hold."""
    head: str | None = None
    """The worktree's HEAD commit (what a snapshot starts from); None when HEAD is unborn."""
    unborn: bool = False
    """HEAD names a branch that does not exist."""
    kept_tips: tuple[str, ...] = ()
    """Commits only the worktree's reflogs or per-worktree refs reach (`refs/worktree/…`,
    `refs/bisect/…`): removal deletes those, so a snapshot must keep these commits."""


@value
class BranchFacts:
    """What decides whether the task's branch may be deleted after its worktree is gone."""

    name: str
    created_by_us: bool
    tip: str | None
    """Its tip now; None when the branch is gone already."""
    recorded_tip: str | None
    """The tip the journal recorded before removal began."""
    in_use: tuple[str, ...] = ()
    """Worktrees that have it checked out or are rebasing or bisecting it."""
    reachable_elsewhere: bool = False


@value
class Decision:
    """The outcome for a worktree: what blocks it, and whether a snapshot would clear the way."""

    blockers: tuple[Blocker, ...] = field(default_factory=tuple)

    @property
    def clear(self) -> bool:
        return not self.blockers

    @property
    def clear_after_snapshot(self) -> bool:
        return all(b.lifted_by_snapshot for b in self.blockers)

    @property
    def hard(self) -> tuple[Blocker, ...]:
        """Blockers no snapshot can lift."""
        return tuple(b for b in self.blockers if not b.lifted_by_snapshot)


class Refused(LaneboardError):
    """A discard refused, with every blocker as data (`blockers`); `forced` says whether
    `--force` was given (then only what it cannot lift is listed). The message and `details`
    are the lines the CLI prints; when the list mixes both kinds, the lines `--force` would lift
    say so."""

    def __init__(self, task: str, blockers: Sequence[Blocker], *, forced: bool) -> None:
        self.task = task
        self.forced = forced
        self.blockers = tuple(b for b in blockers if not (forced and b.lifted_by_snapshot))
        hard = [b for b in self.blockers if not b.lifted_by_snapshot]
        soft = [b for b in self.blockers if b.lifted_by_snapshot]
        count = len(self.blockers)
        if forced or not soft:
            hint = "; --force cannot override these" if hard else ""
        elif not hard:
            hint = "; --force saves them in a snapshot first, then removes"
        else:
            hint = f"; --force cannot override {len(hard)} of these (it saves the ones marked)"
        lines = [str(b) + (SAVED_MARK if hard and b in soft else "") for b in self.blockers]
        lines += [f"fix: {line}" for line in fixes(hard, task)]
        super().__init__(
            f"refusing to discard {task}: {count} blocker{'s' if count != 1 else ''}{hint}",
            details=lines,
        )


FIXES: dict[BlockerKind, str] = {
    BlockerKind.AGENT: (
        "`laneboard pause {task}` stops the agent and keeps its conversation (or `retain {task}`"
        " stops it for good); then discard"
    ),
    BlockerKind.LEASE: "wait for the command in its lane to end (`laneboard lanes` shows it)",
    BlockerKind.PROCESS: "end the process named above (or wait for it to end), then discard",
    BlockerKind.DEPENDENT: "finalize, cancel or retarget the tasks that target its branch first",
    BlockerKind.VERIFICATION: "`laneboard verify {task}` says what changed; `laneboard doctor`",
    BlockerKind.MOVED: "`laneboard doctor --fix` registers it where it went",
    BlockerKind.OPERATION: "finish or abort it in the worktree (`git rebase --abort`, …)",
    BlockerKind.LOCKED: "`git worktree unlock` it once nothing needs it locked",
    BlockerKind.INITIALIZING: "wait for it to be created (`laneboard doctor` if that stopped)",
    BlockerKind.SUBMODULE: "`git submodule deinit` it in the worktree first",
    BlockerKind.NESTED: "move what is nested out of the worktree first",
    BlockerKind.NOT_OURS: "laneboard did not create it: remove it with git yourself",
}

OFFERED: dict[BlockerKind, str] = {BlockerKind.AGENT: "pause"}
"""Blockers one of laneboard's own actions lifts: the action the board offers to run first."""


def fixes(blockers: Iterable[Blocker], task: str) -> list[str]:
    """One line per kind of blocker among `blockers` that names its fix, in their order."""
    found: list[str] = []
    for kind in dict.fromkeys(b.kind for b in blockers if not b.lifted_by_snapshot):
        fix = FIXES.get(kind)
        if fix is not None and fix.format(task=task) not in found:
            found.append(fix.format(task=task))
    return found


def offered(blockers: Iterable[Blocker]) -> str | None:
    """The action that would lift every blocker no snapshot lifts (None: none does)."""
    hard = {b.kind for b in blockers if not b.lifted_by_snapshot}
    actions = {OFFERED.get(kind) for kind in hard}
    return actions.pop() if len(actions) == 1 and None not in actions else None


SAVED_MARK = " [--force saves this]"
"""Marks, in a refusal that mixes both kinds, a blocker that `--force` would lift."""


def is_rebuildable(path: str, patterns: Iterable[str]) -> bool:
    """True when an ignored path, as `git status --ignored=matching` names it, is a cache tools
    rebuild. A pattern ending in `/` names an ignored directory reported as such (a path ending
    in `/`): by its name at any depth (`node_modules/` matches `web/node_modules/`), or by its
    path from the top when the pattern holds another `/` (`build/out/`). Any other pattern is a
    glob on the basename (`*.pyc`), or on the whole path when it contains a `/` (`logs/*.log`).

    A file *inside* a directory named like a cache is not matched: git reports it on its own only
    when the directory itself is not ignored, so the file is ignored for a reason of its own
    (`target/prod.key` under `*.key`) and may well be someone's secret, not a build product.
    """
    is_dir = path.endswith("/")
    stripped = path.rstrip("/")
    basename = stripped.rsplit("/", 1)[-1]
    for pattern in patterns:
        if pattern.endswith("/"):
            name = pattern.strip("/")
            target = stripped if "/" in name else basename
            if is_dir and fnmatch.fnmatchcase(target, name):
                return True
        elif "/" in pattern:
            if fnmatch.fnmatchcase(stripped, pattern.strip("/")):
                return True
        elif fnmatch.fnmatchcase(basename, pattern):
            return True
    return False


UNIQUE_SHOWN = 10
"""Unique commits listed one per line; beyond that they are counted."""


def _each(kind: BlockerKind, label: str, items: Sequence[str]) -> list[Blocker]:
    return [Blocker(kind, f"{label}: {item}", item) for item in items]


def worktree_blockers(facts: WorktreeFacts, rebuildable: Sequence[str]) -> Decision:
    """Every reason the worktree may not be removed now (empty when removal is safe). A worktree
    that is gone is judged on what git still holds for it: its lock and its commits."""
    found: list[Blocker] = []
    found += _each(BlockerKind.DEPENDENT, "live task targets its branch", facts.dependents)
    if not facts.exists:
        if facts.moved_to is not None:
            moved = f"moved to {facts.moved_to}; `laneboard doctor --fix` registers it there"
            found.append(Blocker(BlockerKind.MOVED, moved))
        if facts.registered and facts.lock is not None:
            # A locked worktree may be missing only for now (removable media: what locks are for).
            found.append(Blocker(BlockerKind.LOCKED, f"locked: {facts.lock or '(no reason)'}"))
        return Decision(tuple(found + _unique(facts)))
    if not facts.created_by_us:
        found.append(Blocker(BlockerKind.NOT_OURS, "worktree not created by laneboard"))
    if facts.verification is not None:
        found.append(Blocker(BlockerKind.VERIFICATION, f"verification: {facts.verification}"))
    found += _each(BlockerKind.LEASE, "lease held", facts.leases)
    found += _each(BlockerKind.AGENT, "agent running", facts.agent)
    found += _each(BlockerKind.PROCESS, "process inside", facts.processes)
    if facts.processes_unseen is not None:
        found.append(Blocker(BlockerKind.PROCESS, f"processes unseen: {facts.processes_unseen}"))
    found += _each(BlockerKind.OPERATION, "in progress", facts.operations)
    if facts.unborn:
        found.append(Blocker(BlockerKind.UNBORN, "HEAD has no commit: its branch was deleted"))
    if facts.initializing:
        found.append(Blocker(BlockerKind.INITIALIZING, "still being created (locked)"))
    elif facts.lock is not None:
        found.append(Blocker(BlockerKind.LOCKED, f"locked: {facts.lock or '(no reason)'}"))
    found += _each(BlockerKind.SUBMODULE, "initialized submodule", facts.submodules)
    found += _each(BlockerKind.NESTED, "worktree nested inside", facts.nested)
    found += _each(BlockerKind.NESTED, "repository nested inside", facts.repositories)
    found += _each(BlockerKind.CONFLICT, "conflicted file", facts.conflicted)
    found += _each(BlockerKind.HIDDEN, "hidden change possible", facts.hidden)
    found += _each(BlockerKind.UNCOMMITTED, "staged change", facts.staged)
    found += _each(BlockerKind.UNCOMMITTED, "unstaged change", facts.unstaged)
    found += _each(
        BlockerKind.UNTRACKED,
        "untracked file",
        [
            p
            for p in facts.untracked
            if p not in facts.untracked_ours and p not in facts.repositories
        ],
    )
    found += _each(
        BlockerKind.IGNORED,
        "ignored file",
        [
            p
            for p in facts.ignored
            if p not in facts.untracked_ours and not is_rebuildable(p, rebuildable)
        ],
    )
    return Decision(tuple(found + _unique(facts)))


def _unique(facts: WorktreeFacts) -> list[Blocker]:
    shown = facts.unique_commits[:UNIQUE_SHOWN]
    found = _each(BlockerKind.UNIQUE_COMMITS, "commit only here", shown)
    if len(facts.unique_commits) > UNIQUE_SHOWN:
        more = len(facts.unique_commits) - UNIQUE_SHOWN
        found.append(Blocker(BlockerKind.UNIQUE_COMMITS, f"commit only here: … and {more} more"))
    return found


def branch_blockers(facts: BranchFacts) -> Decision:
    """Every reason the branch may not be deleted. A branch laneboard did not create, or one
    that is already gone, is never deleted (the caller keeps it)."""
    found: list[Blocker] = []
    if not facts.created_by_us:
        found.append(Blocker(BlockerKind.NOT_OURS, f"branch {facts.name} not created by laneboard"))
    if facts.tip is not None and facts.tip != facts.recorded_tip:
        found.append(
            Blocker(
                BlockerKind.BRANCH_MOVED,
                f"branch {facts.name} moved: {_short(facts.recorded_tip)} → {_short(facts.tip)}",
            )
        )
    found += _each(BlockerKind.BRANCH_IN_USE, f"branch {facts.name} in use", facts.in_use)
    if facts.tip is not None and not facts.reachable_elsewhere:
        found.append(
            Blocker(
                BlockerKind.UNIQUE_COMMITS,
                f"branch {facts.name} holds commits no other ref reaches",
            )
        )
    return Decision(tuple(found))


def _short(sha: str | None) -> str:
    return (sha or "none")[:10]
