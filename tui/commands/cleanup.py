"""Commands that stop or remove a task and bring one back: retain, discard, restore."""

from __future__ import annotations

from typing import TYPE_CHECKING

from laneboard.tui.commands.common import (
    STOPPING,
    print_wait,
    repo_arg,
    report,
    said_if_slow,
)
from laneboard.tui.root import open_service

if TYPE_CHECKING:
    import argparse

    pass


def cmd_retain(args: argparse.Namespace) -> int:
    with said_if_slow(f"{args.name}: {STOPPING}"):
        done = open_service().retain(repo_arg(args), args.name)
    if not done.changed:
        return report(args, done, "already retained; nothing to do")
    return report(args, done, f"retained; {done.task.worktree_path} and {done.task.branch} kept")


def cmd_discard(args: argparse.Namespace) -> int:
    done = open_service().discard(repo_arg(args), args.name, force=args.force, on_wait=print_wait)
    saved = (
        f"; saved in {done.snapshot} (laneboard restore {done.task.name})" if done.snapshot else ""
    )
    return report(args, done, f"discarded{saved}", snapshot=done.snapshot)


def cmd_restore(args: argparse.Namespace) -> int:
    done = open_service().restore(
        repo_arg(args), args.name, as_name=args.as_name, on_wait=print_wait
    )
    return report(args, done, f"restored at {done.task.worktree_path} on {done.task.branch}")
