"""The conflict radar (DESIGN.md section 7): what the live tasks' own work would conflict with.

A task's own work is its changes from its merge base with its target to its tip; a task with
none (no commits, or all of them in the target already) is left out. Each task with work is
checked against its target (a real merge of the two tips), and each pair of tasks with work and
the same target is checked on their own work alone (`compare`): a conflict a task has with its
target is shown once, against the target, never again against every task whose history holds
the target's change.

Each answer is git's own merge (`git merge-tree --write-tree`): no checkout, no worktree, no ref,
nothing written but objects. Answers are cached in the ledger by the commits they depend on,
which never change what they merge to, so only pairs whose tip moved are computed again; those
run on a few threads (each is its own git process). Committed work only: what a worktree holds
uncommitted is not in any tip yet.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from itertools import combinations

from laneboard.core.adapters import history
from laneboard.core.adapters.ledger import Ledger
from laneboard.core.adapters.repo import RepoContext
from laneboard.core.domain.models import Task
from laneboard.core.domain.review import MergeCheck, Overlap, Radar
from laneboard.core.domain.values import value


def _key(ours: str, theirs: str) -> tuple[str, str]:
    """Merging is symmetric in what conflicts: one cache entry per unordered pair."""
    return (ours, theirs) if ours <= theirs else (theirs, ours)


def merge_checks(
    ctx: RepoContext, ledger: Ledger, pairs: list[tuple[str, str]]
) -> dict[tuple[str, str], MergeCheck]:
    """The merge check of each (ours, theirs), from the cache or computed now (and cached)."""
    keys = list(dict.fromkeys(_key(a, b) for a, b in pairs))
    cached = ledger.cached_merges(keys)
    answers = {key: MergeCheck(clean, tuple(files)) for key, (clean, files) in cached.items()}
    todo = [key for key in keys if key not in answers]
    if todo:
        workers = min(len(todo), os.cpu_count() or 2)
        with ThreadPoolExecutor(max_workers=workers) as pool:
            found = list(pool.map(lambda key: history.merge(ctx.root, *key)[1], todo))
        answers.update(zip(todo, found, strict=True))
        ledger.cache_merges(
            [
                (a, b, c.clean, list(c.files))
                for (a, b), c in zip(todo, found, strict=True)
                if c.problem is None
            ]
        )
    return {(a, b): answers[_key(a, b)] for a, b in pairs}


@value
class Work:
    """A task's own work: its changes from `base` (its merge base with the target) to `tip`."""

    task: Task
    target: str
    """The target branch's tip."""
    base: str
    tip: str


def own_work(
    ctx: RepoContext, tips: list[tuple[Task, str]], branches: dict[str, str]
) -> list[Work]:
    """The tasks of `tips` that have work of their own: a target branch, and a tip whose tree
    differs from its merge base with that target (a task with no commits, or whose commits are
    all in the target already, has none)."""
    found: list[Work] = []
    for task, tip in tips:
        target = branches.get(task.target) if task.target else None
        if target is None:
            continue
        key = (str(ctx.common_dir), target, tip)
        if key not in _OWN:
            if len(_OWN) >= OWN_MOST:
                _OWN.clear()
            _OWN[key] = _own_base(ctx, target, tip)
        base = _OWN[key]
        if base is not None:
            found.append(Work(task, target, base, tip))
    return found


_OWN: dict[tuple[str, str, str], str | None] = {}
"""(common dir, target commit, tip commit) -> the merge base when the tip has work of its own,
else None: a fact of two commits that never changes, so a board's every radar after its first
costs no git process for a task whose tip and target stayed."""
OWN_MOST = 20000


def _own_base(ctx: RepoContext, target: str, tip: str) -> str | None:
    """The merge base of `target` and `tip` when `tip`'s tree differs from it, else None."""
    base = history.merge_base(ctx.root, target, tip)
    if base is None or base == tip:
        return None
    base_tree, tip_tree = history.trees(ctx.root, [base, tip])
    return base if base_tree != tip_tree else None


def _replayed(ctx: RepoContext, work: Work, onto: str) -> str | None:
    """The tree of `work`'s changes applied to `onto`, or None when they conflict there."""
    if onto == work.base:
        return work.tip
    tree, _ = history.merge_at(ctx.root, work.base, onto, work.tip)
    return tree


def compare(ctx: RepoContext, a: Work, b: Work) -> MergeCheck:
    """Whether `a`'s own work and `b`'s merge together: both replayed onto one commit, then
    merged with that commit as their base. The commit is the target's tip when both replay
    there cleanly; else either task's merge base (a task that conflicts with the target is shown
    against it, and its work is compared with the other's where both still apply)."""
    for point in dict.fromkeys((a.target, a.base, b.base)):
        ours, theirs = _replayed(ctx, a, point), _replayed(ctx, b, point)
        if ours is not None and theirs is not None:
            return history.merge_at(ctx.root, point, ours, theirs)[1]
    return MergeCheck(
        True,
        (),
        f"not compared: neither task's work applies where the other's does "
        f"({a.task.name} onto {b.base[:10]}, {b.task.name} onto {a.base[:10]})",
    )


def pair_checks(
    ctx: RepoContext, ledger: Ledger, pairs: list[tuple[Work, Work]]
) -> list[MergeCheck]:
    """`compare` of each pair, from the cache or computed now (and cached). The answer depends on
    the two tips and the target's tip only, so it is cached under each tip qualified by the
    target's (`<target>:<tip>`), apart from the plain commit pairs of `merge_checks`."""
    keys = [_key(f"{a.target}:{a.tip}", f"{b.target}:{b.tip}") for a, b in pairs]
    cached = ledger.cached_merges(list(dict.fromkeys(keys)))
    answers = {key: MergeCheck(clean, tuple(files)) for key, (clean, files) in cached.items()}
    todo = [(key, pair) for key, pair in zip(keys, pairs, strict=True) if key not in answers]
    todo = list({key: (key, pair) for key, pair in todo}.values())
    if todo:
        workers = min(len(todo), os.cpu_count() or 2)
        with ThreadPoolExecutor(max_workers=workers) as pool:
            found = list(pool.map(lambda item: compare(ctx, *item[1]), todo))
        answers.update((key, check) for (key, _), check in zip(todo, found, strict=True))
        ledger.cache_merges(
            [
                (*key, check.clean, list(check.files))
                for (key, _), check in zip(todo, found, strict=True)
                if check.problem is None
            ]
        )
    return [answers[key] for key in keys]


def radar(ctx: RepoContext, ledger: Ledger, tasks: list[Task]) -> Radar:
    """The radar of the repo's live tasks (each with its branch tip) now: each task with work of
    its own against its target, and each pair of such tasks with the same target, their own
    work against each other's."""
    branches = history.branch_tips(ctx.root)
    tips = [
        (task, tip)
        for task in tasks
        if task.live and (tip := branches.get(task.branch)) is not None
    ]
    works = own_work(ctx, tips, branches)
    targets = [(w.task, w.target, w.tip) for w in works]
    checks = merge_checks(ctx, ledger, [(target, tip) for _, target, tip in targets])
    pairs = [(a, b) for a, b in combinations(works, 2) if a.task.target == b.task.target]
    compared = pair_checks(ctx, ledger, pairs)
    return Radar(
        repo_root=str(ctx.root),
        overlaps=(
            *(
                Overlap(task.name, task.id, None, None, target, tip, checks[target, tip])
                for task, target, tip in targets
            ),
            *(
                Overlap(a.task.name, a.task.id, b.task.name, b.task.id, a.tip, b.tip, check)
                for (a, b), check in zip(pairs, compared, strict=True)
            ),
        ),
    )
