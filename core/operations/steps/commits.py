"""Reading a task's commits: the commits and changed files between two SHAs (cached in the
ledger by the pair, which never names anything else), what a worktree has checked out, and the
refusal of merge commits an integration would flatten."""

from __future__ import annotations

from pathlib import Path

from laneboard.core.adapters import history, safefs
from laneboard.core.adapters.git import run_git
from laneboard.core.adapters.ledger import Ledger
from laneboard.core.adapters.repo import RepoContext
from laneboard.core.domain.errors import LaneboardError
from laneboard.core.domain.models import Task
from laneboard.core.domain.review import Committed


def committed(ctx: RepoContext, ledger: Ledger, base: str, tip: str) -> Committed:
    """The commits and changed files from `base` to `tip`, from the cache when it has them."""
    cached = ledger.cached_review(base, tip)
    if cached is not None:
        return Committed.from_dict(cached)
    found = Committed(history.commits(ctx.root, base, tip), history.changes(ctx.root, base, tip))
    ledger.cache_review(base, tip, found.as_dict())
    return found


def checked_out(admin: Path | None) -> str | None:
    """The ref a worktree's HEAD names (`refs/heads/...`), read without following a link;
    None when HEAD is detached, missing or not a plain file."""
    raw = None if admin is None else safefs.read_regular(admin / "HEAD", 4096)
    if raw is None or not raw.startswith(b"ref: "):
        return None
    return raw[5:].strip().decode(errors="replace")


def refuse_merges(ctx: RepoContext, task: Task, onto: str, tip: str) -> None:
    """A rebase redoes merge commits by merging again, which drops whatever a merge commit
    itself changed (a resolution, an amendment): a branch that holds merges is not rebased."""
    base = history.merge_base(ctx.root, onto, tip) or onto
    merges = run_git(["rev-list", "--merges", f"{base}..{tip}"], cwd=ctx.root).stdout.split()
    if merges:
        raise LaneboardError(
            f"{task.name}: its branch holds {len(merges)} merge commit(s) (the newest "
            f"{merges[0].decode()[:12]}); a rebase could drop what they changed: use "
            "`finalize --merge` (strategy merge or squash) instead"
        )
