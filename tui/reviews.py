"""How the CLI shows a review and the conflict radar: JSON documents (docs/cli.md) and text.

Values only: the patch text is given, never read here.
"""

from __future__ import annotations

import shlex
import unicodedata
from typing import Any

from laneboard.core.domain.models import Repo, Task
from laneboard.core.domain.review import FileChange, Radar, Review, Since
from laneboard.core.domain.reviewloop import Checkpoint, Comment
from laneboard.tui.output import age, iso, schema

LETTER = {
    "added": "A",
    "modified": "M",
    "deleted": "D",
    "renamed": "R",
    "copied": "C",
    "type-changed": "T",
    "unmerged": "U",
}


def shown(text: str) -> str:
    """`text` safe to print on a terminal: control and format characters (escape sequences,
    carriage returns, newlines, bidirectional overrides) written as escapes, so a file name or
    commit subject cannot rewrite or hide the lines around it."""
    return "".join(
        char.encode("unicode_escape").decode()
        if unicodedata.category(char) in ("Cc", "Cf")
        else char
        for char in text
    )


def patch_summary(change: FileChange, base: str, tip: str) -> str | None:
    """Why a file's diff is summarized instead of shown (binary, submodule, huge), else None."""
    path = shown(change.path)
    if change.submodule:
        return f"submodule {path} changed (not shown)"
    if change.binary:
        return f"binary file {path} {change.change.value} (not shown)"
    if change.huge:
        lines = (change.added or 0) + (change.removed or 0)
        return (
            f"{path}: {lines} lines changed, too many to show here "
            f"(git diff {base[:12]} {tip[:12]} -- {shown(shlex.quote(change.path))})"
        )
    return None


def review_document(
    task: Task,
    repo: Repo,
    seen: Review,
    patches: dict[str, str | None] | None = None,
    since: Since | None = None,
) -> dict[str, Any]:
    """`review/1`: the task's commits, files (+/- counts as `git diff --numstat -M`), what is
    uncommitted, and, with `--patch`, each file's diff (null when summarized)."""
    files = []
    for change in seen.committed.files:
        entry = change.as_dict()
        if patches is not None:
            entry["patch"] = patches.get(change.path)
            entry["summary"] = patch_summary(change, seen.merge_base, seen.tip)
        files.append(entry)
    return {
        "schema": schema("review"),
        "id": task.id,
        "name": task.name,
        "repo": repo.root,
        "branch": task.branch,
        "target": seen.target,
        "target_sha": seen.target_sha,
        "merge_base": seen.merge_base,
        "tip": seen.tip,
        "ahead": seen.ahead,
        "behind": seen.behind,
        "reviewed_sha": seen.reviewed_sha,
        "reviewed_at": iso(seen.reviewed_at),
        "reviewed_current": seen.reviewed_current,
        "commits": [{**c.as_dict(), "at": iso(c.at)} for c in seen.committed.commits],
        "files": files,
        "added": sum(f.added or 0 for f in seen.committed.files),
        "removed": sum(f.removed or 0 for f in seen.committed.files),
        "uncommitted": [{"path": p.path, "code": p.code} for p in seen.uncommitted],
        "untracked": list(seen.untracked),
        "worktree_problem": seen.worktree_problem,
        "since": since_json(since),
    }


def since_json(since: Since | None) -> dict[str, Any] | None:
    """What changed since the reviewed SHA, for `review/1`'s `since` (null: nothing new)."""
    if since is None:
        return None
    found: dict[str, Any] = {"reviewed": since.reviewed, "kind": since.kind}
    if since.committed is not None:
        found["commits"] = [{**c.as_dict(), "at": iso(c.at)} for c in since.committed.commits]
        found["files"] = [f.as_dict() for f in since.committed.files]
    found["range_diff"] = since.range_diff
    return found


def since_text(task: Task, seen: Review, since: Since, patch: str | None = None) -> str:
    """Only what changed since the operator's review (`--full` shows everything)."""
    lines = [
        f"{task.name}: since your review at {since.reviewed[:12]} "
        f"({'rebased since: commits compared' if since.kind == 'range-diff' else 'on top of it'})"
        " (`--full` shows the whole work)"
    ]
    if since.committed is not None:
        commits, files = since.committed.commits, since.committed.files
        lines.append(f"new commits: {len(commits)}")
        lines += [f"  {c.sha[:12]}  {shown(c.subject)}" for c in commits]
        lines.append(f"files:       {len(files)} changed")
        lines += [_file_line(f) for f in files]
    elif since.range_diff is not None:
        lines.append(shown(since.range_diff.rstrip("\n")) or "  (every commit as reviewed)")
    if seen.uncommitted or seen.untracked:
        count = len(seen.uncommitted) + len(seen.untracked)
        lines.append(f"not committed: {count} file(s) (not part of the review)")
    if patch:
        lines.append(patch.rstrip("\n"))
    return "\n".join(lines)


def comments_document(found: list[tuple[Comment, bool]]) -> dict[str, Any]:
    return {
        "schema": schema("comments"),
        "comments": [
            {
                "id": c.id,
                "path": c.path,
                "line": c.line,
                "side": c.side.value,
                "sha": c.sha,
                "text": c.text,
                "line_text": c.line_text,
                "state": c.state.value,
                "outdated": stale,
                "created_at": iso(c.created_at),
                "sent_at": iso(c.sent_at),
            }
            for c, stale in found
        ],
    }


def comments_text(found: list[tuple[Comment, bool]]) -> str:
    lines = []
    for c, stale in found:
        mark = " (outdated: the line changed)" if stale else ""
        lines.append(f"#{c.id} {shown(c.path)}:{c.line} [{c.state.value}]{mark}: {shown(c.text)}")
    return "\n".join(lines)


def checkpoints_document(task: Task, found: list[Checkpoint]) -> dict[str, Any]:
    return {
        "schema": schema("checkpoints"),
        "task": task.name,
        "task_id": task.id,
        "checkpoints": [
            {
                "n": c.n,
                "ref": c.ref,
                "sha": c.sha,
                "at": iso(c.created_at),
                "turn": c.turn,
                "files": c.files,
                "bytes": c.bytes,
                "pinned": c.pinned,
            }
            for c in found
        ],
    }


def checkpoints_text(task: Task, found: list[Checkpoint], now: float | None = None) -> str:
    if not found:
        return f"{task.name} has no checkpoint yet (one is taken at the end of each agent turn)"
    lines = [f"{task.name}: {len(found)} checkpoint(s), newest last"]
    for c in found:
        pin = "  pinned" if c.pinned else ""
        lines.append(
            f"  {c.n:>3}  {age(c.created_at, now)} ago  {c.files} file(s) changed  "
            f"{shown(c.turn)}{pin}"
        )
    return "\n".join(lines)


def _file_line(change: FileChange) -> str:
    letter = LETTER[change.change.value]
    if change.similarity is not None:
        letter += str(change.similarity)
    counts = "bin" if change.binary else f"+{change.added or 0} -{change.removed or 0}"
    if change.submodule:
        counts = "submodule"
    name = shown(f"{change.old_path} -> {change.path}" if change.old_path else change.path)
    if change.mode_changed:
        name += f" (mode {change.old_mode} -> {change.new_mode})"
    return f"  {letter:<5}{counts:<14}{name}"


def review_text(task: Task, seen: Review, now: float | None = None) -> str:
    against = seen.target or "its base"
    lines = [
        f"{task.name} ({task.id}): {task.branch} -> {against}",
        f"range:       {seen.merge_base[:12]}..{seen.tip[:12]} "
        f"({seen.ahead} ahead, {seen.behind} behind {against})",
    ]
    if seen.reviewed_sha is None:
        lines.append("reviewed:    not yet (`--mark` pins the tip)")
    else:
        when = f"{age(seen.reviewed_at, now)} ago" if seen.reviewed_at else ""
        status = "the tip now" if seen.reviewed_current else "the branch moved since"
        lines.append(f"reviewed:    {seen.reviewed_sha[:12]} {when} ({status})")
    commits = seen.committed.commits
    lines.append(f"commits:     {len(commits)}")
    for c in commits:
        lines.append(
            f"  {c.sha[:12]}  {shown(c.subject)}  ({shown(c.author)}, {age(c.at, now)} ago)"
        )
    files = seen.committed.files
    added = sum(f.added or 0 for f in files)
    removed = sum(f.removed or 0 for f in files)
    lines.append(f"files:       {len(files)} changed, +{added} -{removed}")
    lines += [_file_line(f) for f in files]
    if seen.uncommitted or seen.untracked:
        lines.append("not committed (not part of the review; finalize refuses it):")
        lines += [f"  {p.code:<5}{shown(p.path)}" for p in seen.uncommitted]
        lines += [f"  ??   {shown(path)}" for path in seen.untracked]
    if seen.worktree_problem:
        lines.append(f"worktree:    {seen.worktree_problem}")
    return "\n".join(lines)


def conflicts_document(report: list[tuple[Repo, Radar]]) -> dict[str, Any]:
    """`conflicts/1`: per repo, each task with work of its own against its target (`other`
    null), and each pair of them with the same target, on their own work."""
    return {
        "schema": schema("conflicts"),
        "repos": [
            {
                "repo": repo.root,
                "overlaps": [
                    {
                        "task": o.task,
                        "task_id": o.task_id,
                        "other": o.other,
                        "other_id": o.other_id,
                        "against_target": o.other is None,
                        "ours": o.ours,
                        "theirs": o.theirs,
                        "clean": o.check.clean,
                        "files": list(o.check.files),
                        "problem": o.check.problem,
                    }
                    for o in radar.overlaps
                ],
            }
            for repo, radar in report
        ],
    }


def conflicts_text(report: list[tuple[Repo, Radar]], targets: dict[str, str | None]) -> str:
    """Conflicts first, then how many pairs merge cleanly."""
    lines: list[str] = []
    for repo, radar in report:
        lines.append(repo.root)
        clean = 0
        for o in radar.overlaps:
            other = o.other or f"target {targets.get(o.task_id) or '?'}"
            if o.check.clean and o.check.problem:
                lines.append(f"  {o.task} <-> {other}: {shown(o.check.problem)}")
                continue
            if o.check.clean:
                clean += 1
                continue
            why = shown(o.check.problem or ", ".join(o.check.files))
            lines.append(f"  {o.task} <-> {other}: conflict in {why}")
        total = len(radar.overlaps)
        if not total:
            lines.append("  no tasks with commits to compare")
        else:
            lines.append(f"  {clean} of {total} merges clean")
    return "\n".join(lines) if lines else "no repositories"
