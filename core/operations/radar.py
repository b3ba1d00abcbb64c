"""The conflict radar (DESIGN.md section 7): for each live task against its target, and for
every pair of live tasks of a repo, whether merging them would conflict and in which files.

Each answer is git's own merge (`git merge-tree --write-tree`): no checkout, no worktree, no ref,
nothing written but objects. Answers are cached in the ledger by the pair of commit ids, which
never change what they merge to, so only pairs whose tip moved are computed again; those run on
a few threads (each is its own git process). Committed work only: what a worktree holds
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


def radar(ctx: RepoContext, ledger: Ledger, tasks: list[Task]) -> Radar:
    """The radar of the repo's live tasks (each with its branch tip) now."""
    branches = history.branch_tips(ctx.root)
    tips = [
        (task, tip)
        for task in tasks
        if task.live and (tip := branches.get(task.branch)) is not None
    ]
    rows: list[tuple[Task, Task | None, str, str]] = []
    for task, tip in tips:
        target = branches.get(task.target) if task.target else None
        if target is not None:
            rows.append((task, None, target, tip))
    for (a, tip_a), (b, tip_b) in combinations(tips, 2):
        rows.append((a, b, tip_a, tip_b))
    checks = merge_checks(ctx, ledger, [(ours, theirs) for _, _, ours, theirs in rows])
    return Radar(
        repo_root=str(ctx.root),
        overlaps=tuple(
            Overlap(
                task=task.name,
                task_id=task.id,
                other=other.name if other else None,
                other_id=other.id if other else None,
                ours=ours,
                theirs=theirs,
                check=checks[ours, theirs],
            )
            for task, other, ours, theirs in rows
        ),
    )
