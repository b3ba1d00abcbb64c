"""The names laneboard writes into git for a task: its branch's reflog message and its
worktree's lock reason. Both are proofs, after a crash, that laneboard created what carries
them, so every reader and writer takes them from here."""

from __future__ import annotations

LOCK_PREFIX = "laneboard: initializing task "


def lock_reason(task_id: str) -> str:
    """The `git worktree lock` reason that marks a worktree as being created by this task. It is
    the proof, after a crash, that laneboard created the worktree and its branch."""
    return f"{LOCK_PREFIX}{task_id}"


def branch_message(task_id: str) -> str:
    """The reflog message of a branch laneboard creates for a task."""
    return f"laneboard: create branch for task {task_id}"
