"""The cleanup policy, pure: each fact yields its blocker; only snapshot-able ones yield to
--force; rebuildable caches and laneboard's own copies are no one's work."""

from __future__ import annotations

import pytest

from laneboard.core.adapters.config import DEFAULT_REBUILDABLE
from laneboard.core.domain.cleanup import (
    BlockerKind,
    BranchFacts,
    WorktreeFacts,
    branch_blockers,
    is_rebuildable,
    worktree_blockers,
)

K = BlockerKind


def kinds(facts: WorktreeFacts) -> list[BlockerKind]:
    return [b.kind for b in worktree_blockers(facts, DEFAULT_REBUILDABLE).blockers]


def test_a_clean_worktree_of_ours_has_no_blockers() -> None:
    decision = worktree_blockers(WorktreeFacts(), DEFAULT_REBUILDABLE)
    assert decision.clear and decision.clear_after_snapshot


def test_a_worktree_that_is_already_gone_blocks_nothing() -> None:
    assert worktree_blockers(WorktreeFacts(exists=False, untracked=("x",)), ()).clear


@pytest.mark.parametrize(
    ("facts", "kind", "line"),
    [
        (WorktreeFacts(created_by_us=False), K.NOT_OURS, "worktree not created by laneboard"),
        (WorktreeFacts(verification="symlinked: x"), K.VERIFICATION, "verification: symlinked: x"),
        (WorktreeFacts(leases=("#3 `make`",)), K.LEASE, "lease held: #3 `make`"),
        (WorktreeFacts(agent=("pid 7 (claude)",)), K.AGENT, "agent running: pid 7 (claude)"),
        (WorktreeFacts(processes=("pid 9 (vim): cwd /w",)), K.PROCESS, "process inside: pid 9"),
        (WorktreeFacts(staged=("a.py",)), K.UNCOMMITTED, "staged change: a.py"),
        (WorktreeFacts(unstaged=("b.py",)), K.UNCOMMITTED, "unstaged change: b.py"),
        (WorktreeFacts(untracked=("notes.md",)), K.UNTRACKED, "untracked file: notes.md"),
        (WorktreeFacts(ignored=(".env",)), K.IGNORED, "ignored file: .env"),
        (WorktreeFacts(hidden=("c.py",)), K.HIDDEN, "hidden change possible: c.py"),
        (WorktreeFacts(conflicted=("d.py",)), K.CONFLICT, "conflicted file: d.py"),
        (WorktreeFacts(operations=("rebase (merge backend)",)), K.OPERATION, "in progress: rebase"),
        (WorktreeFacts(lock="mine"), K.LOCKED, "locked: mine"),
        (
            WorktreeFacts(lock="laneboard: initializing task x", initializing=True),
            K.INITIALIZING,
            "still being created",
        ),
        (WorktreeFacts(submodules=("sub",)), K.SUBMODULE, "initialized submodule: sub"),
        (WorktreeFacts(nested=("/w/inner",)), K.NESTED, "worktree nested inside: /w/inner"),
        (
            WorktreeFacts(untracked=("lib/",), repositories=("lib/",)),
            K.NESTED,
            "repository nested inside: lib/",
        ),
        (
            WorktreeFacts(unique_commits=("abc1234567 wip",)),
            K.UNIQUE_COMMITS,
            "commit only here: abc1234567 wip",
        ),
    ],
)
def test_each_fact_yields_its_blocker(facts: WorktreeFacts, kind: BlockerKind, line: str) -> None:
    blockers = worktree_blockers(facts, DEFAULT_REBUILDABLE).blockers
    assert [b.kind for b in blockers] == [kind]
    assert str(blockers[0]).startswith(line)


def test_only_uncommitted_untracked_and_unique_commits_yield_to_a_snapshot() -> None:
    lifted = WorktreeFacts(staged=("a",), untracked=("b",), unique_commits=("c d",))
    assert worktree_blockers(lifted, ()).clear_after_snapshot
    for hard in (
        WorktreeFacts(ignored=("secret.key",)),
        WorktreeFacts(operations=("merge",)),
        WorktreeFacts(lock="mine"),
        WorktreeFacts(processes=("pid 1",)),
        WorktreeFacts(hidden=("x",)),
    ):
        decision = worktree_blockers(hard, ())
        assert not decision.clear_after_snapshot
        assert decision.hard == decision.blockers


def test_rebuildable_ignored_caches_and_unchanged_copies_are_not_work() -> None:
    facts = WorktreeFacts(
        ignored=(
            "node_modules/",
            "web/node_modules/",
            "target/",
            "x/__pycache__/",
            "a.pyc",
            ".env",
        ),
        untracked=("copied.cfg",),
        untracked_ours=frozenset({".env", "copied.cfg"}),
    )
    assert kinds(facts) == []


@pytest.mark.parametrize(
    ("path", "patterns", "expected"),
    [
        ("node_modules/", ["node_modules/"], True),
        ("web/node_modules/", ["node_modules/"], True),
        ("node_modules", ["node_modules/"], False),  # a file named like the dir is not the cache
        ("node_modules/pkg/x.js", ["node_modules/"], False),
        ("target/prod.key", ["target/"], False),  # ignored by its own rule: maybe a secret
        ("src/target.rs", ["target/"], False),
        ("a/b.pyc", ["*.pyc"], True),
        ("build/out/", ["build/out/"], True),
        ("secret.key", ["*.pyc", "node_modules/"], False),
        ("logs/app.log", ["logs/*.log"], True),
    ],
)
def test_is_rebuildable(path: str, patterns: list[str], expected: bool) -> None:
    assert is_rebuildable(path, patterns) is expected


def test_branch_is_deleted_only_when_ours_unmoved_unused_and_reachable() -> None:
    good = BranchFacts("lb/x/work", True, "a" * 40, "a" * 40, (), True)
    assert branch_blockers(good).clear
    cases = {
        K.NOT_OURS: BranchFacts("lb/x/work", False, "a" * 40, "a" * 40, (), True),
        K.BRANCH_MOVED: BranchFacts("lb/x/work", True, "b" * 40, "a" * 40, (), True),
        K.BRANCH_IN_USE: BranchFacts(
            "lb/x/work", True, "a" * 40, "a" * 40, ("checked out at /w",), True
        ),
        K.UNIQUE_COMMITS: BranchFacts("lb/x/work", True, "a" * 40, "a" * 40, (), False),
    }
    for kind, facts in cases.items():
        assert [b.kind for b in branch_blockers(facts).blockers] == [kind]
