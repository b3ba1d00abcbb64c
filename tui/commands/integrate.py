"""Commands of the review and integration: review, conflicts, finalize, rebase."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from laneboard.core.domain.errors import LaneboardError, UsageError
from laneboard.core.domain.models import TaskState
from laneboard.tui.commands.common import (
    here_or_all,
    page,
    print_output,
    print_wait,
    repo_arg,
    report,
)
from laneboard.tui.root import open_service

if TYPE_CHECKING:
    import argparse

    from laneboard.core.domain.views import Outcome
    from laneboard.core.service.app import Service


def _review_comments(args: argparse.Namespace) -> int | None:
    """`review --comment/--comments/--send/--resolve`: the comment actions (None: none)."""
    from laneboard.tui import output, reviews

    asked = [bool(args.comment), args.comments, args.send, args.resolve is not None]
    if not any(asked):
        if args.side:
            raise UsageError("--side is for --comment")
        return None
    if sum(asked) > 1 or args.mark or args.patch or args.file or args.full:
        raise UsageError("give one of --comment, --comments, --send, --resolve, on its own")
    service = open_service()
    where = repo_arg(args)
    if args.comment:
        at, text = args.comment
        made = service.comment(where, args.name, at, text, side=args.side or "new")
        if args.json:
            output.emit_json(reviews.comments_document([(made, False)]))
        else:
            print(f"comment #{made.id} on {made.path}:{made.line} ({made.sha[:12]})")
    elif args.send:
        sent = service.send_comments(where, args.name)
        print(f"{args.name}: {len(sent)} comment(s) sent to its agent")
    elif args.resolve is not None:
        if not args.resolve.isdigit():
            raise UsageError("--resolve takes a comment's number")
        done = service.resolve_comment(where, args.name, int(args.resolve))
        print(f"comment #{done.id}: resolved")
    else:
        found = service.comments(where, args.name)
        if args.json:
            output.emit_json(reviews.comments_document(found))
        else:
            print(reviews.comments_text(found) or f"{args.name} has no open comment")
    return 0


def cmd_review(args: argparse.Namespace) -> int:
    from laneboard.tui import output, reviews

    commented = _review_comments(args)
    if commented is not None:
        return commented
    service = open_service()
    if args.mark:
        task, repo, seen = service.mark_reviewed(repo_arg(args), args.name)
        if not args.json:
            print(f"{task.name}: reviewed {seen.tip}")
            if seen.uncommitted or seen.untracked:
                count = len(seen.uncommitted) + len(seen.untracked)
                print(
                    f"laneboard: warning: {count} uncommitted file(s) are not part of the "
                    "review; finalize refuses them until they are committed",
                    file=sys.stderr,
                )
    else:
        task, repo, seen = service.review(repo_arg(args), args.name)
    wanted = (args.file,) if args.file else None
    files = [f for f in seen.committed.files if wanted is None or f.path in wanted]
    if args.file and not files:
        raise LaneboardError(f"{task.name}: {args.file} is not among the changed files")
    show = args.patch or bool(args.file)
    if args.json:
        patches: dict[str, str | None] | None = None
        if show:
            patches = {}
            for change in files:
                if reviews.patch_summary(change, seen.merge_base, seen.tip) is None:
                    paths = (change.path, *((change.old_path,) if change.old_path else ()))
                    raw = service.patch(repo.id, task.id, paths)
                    patches[change.path] = raw.decode(errors="surrogateescape")
                else:
                    patches[change.path] = None
        since = None if args.full else service.review_since(repo.id, task.id)
        output.emit_json(reviews.review_document(task, repo, seen, patches, since))
        return 0
    if args.mark and not show:
        return 0
    since = None if args.full or args.file else service.review_since(repo.id, task.id)
    if since is not None:
        patch = None
        if show and since.committed is not None:
            raw = service.patch_between(repo.id, task.id, since.reviewed, seen.tip)
            patch = raw.decode(errors="surrogateescape")
        page(reviews.since_text(task, seen, since, patch))
        return 0
    parts = [] if args.file else [reviews.review_text(task, seen)]
    if show:
        shown: list[str] = []
        for change in files:
            summary = reviews.patch_summary(change, seen.merge_base, seen.tip)
            if summary is not None:
                parts.append(summary)
            else:
                shown += [change.path, *((change.old_path,) if change.old_path else ())]
        if shown:
            parts.append(
                service.patch(repo.id, task.id, tuple(shown)).decode(errors="surrogateescape")
            )
    page("\n".join(parts))
    return 0


def cmd_conflicts(args: argparse.Namespace) -> int:
    from laneboard.tui import reviews

    service = open_service()
    _, report = here_or_all(args, service.conflicts)
    if args.json:
        from laneboard.tui import output

        output.emit_json(reviews.conflicts_document(report))
        return 0
    targets = {
        view.task.id: view.task.target
        for repo, _ in report
        for view in service.tasks(repo.id, facts=False)
    }
    print(reviews.conflicts_text(report, targets))
    return 0


def _finalize_one(
    args: argparse.Namespace, service: Service, name: str | int, where: Path | int
) -> Outcome:
    return service.finalize(
        where,
        str(name),
        into=args.into,
        strategy=args.strategy,
        on_wait=print_wait,
        on_output=print_output,
    )


def _finalized_line(done: Outcome, into: str | None) -> str:
    task = done.task
    old, new = task.target_old or "", task.target_new or ""
    moved = "already in it" if old == new else f"{old[:12]} -> {new[:12]}"
    where = "worktree and branch removed" if not done.notes else "; ".join(done.notes)
    return f"finalized {task.finalized_sha} into {into or task.target} ({moved}); {where}"


def _finalize_fetched(args: argparse.Namespace, service: Service) -> int:
    """`finalize HOST:TASK --merge --fetch-into PATH` (docs/hosts.md)."""
    from laneboard.core.domain.hosts import split_task

    host, name = split_task(args.name or "")
    if host is None or not args.merge or args.all_ready:
        raise UsageError("--fetch-into takes one task on a host (HOST:TASK) and --merge")
    done, left = service.finalize_from_host(
        host,
        name,
        Path(args.fetch_into),
        into=args.into,
        strategy=args.strategy,
        on_wait=print_wait,
        on_output=print_output,
    )
    notes = [*done.notes, left]
    result = report(args, done, _finalized_line(done, args.into), notes=notes)
    if not args.json:
        print(f"laneboard: {left}", file=sys.stderr)
    return result


def cmd_finalize(args: argparse.Namespace) -> int:
    if args.all_ready == bool(args.name):
        raise UsageError("name a task or give --all-ready")
    if args.publish and (args.into or args.strategy or args.all_ready):
        raise UsageError(
            "--publish pushes the task's branch: --into, --strategy and --all-ready are for --merge"
        )
    if args.merge and (args.remote or args.pr or args.draft):
        raise UsageError("--remote, --pr and --draft are for --publish")
    given = (("--into", args.into), ("--strategy", args.strategy), ("--remote", args.remote))
    for option, value in given:
        if value is not None and not value.strip():
            raise UsageError(f"{option} needs a value")
    service = open_service()
    if args.fetch_into:
        return _finalize_fetched(args, service)
    where = repo_arg(args)
    if args.publish:
        done, note, remote = service.publish(
            where, args.name, remote=args.remote, pr=args.pr, draft=args.draft
        )
        line = f"published {done.task.finalized_sha} to {remote} {done.task.branch}"
        if done.task.pr_url:
            line += f"; pull request {done.task.pr_url}"
        result = report(args, done, line, notes=[note] if note else [])
        if note:
            print(f"laneboard: {note}", file=sys.stderr)
        return result
    if not args.all_ready:
        done = _finalize_one(args, service, args.name, where)
        return report(args, done, _finalized_line(done, args.into), notes=list(done.notes))
    ready = service.ready(where)
    chosen = {t.id for t in ready}
    for view in service.tasks(where, facts=False):
        task = view.task
        skipped = task.reviewed_sha and task.live and task.id not in chosen
        if skipped and task.state is not TaskState.FINALIZED:
            print(f"laneboard: skipped {task.name}: its branch moved since review", file=sys.stderr)
    if not ready:
        print("no reviewed task is ready (its branch still at the reviewed SHA)")
        return 0
    for i, task in enumerate(ready):
        try:
            done = _finalize_one(args, service, task.id, where)
        except LaneboardError as err:
            print(f"laneboard: {task.name}: {err}", file=sys.stderr)
            rest = [t.name for t in ready[i + 1 :]]
            if rest:
                print(f"laneboard: not attempted: {', '.join(rest)}", file=sys.stderr)
            return 1
        print(f"{done.task.name}: {_finalized_line(done, args.into)}")
    return 0


def cmd_rebase(args: argparse.Namespace) -> int:
    done, conflicts = open_service().rebase(repo_arg(args), args.name, on_wait=print_wait)
    if conflicts:
        raise LaneboardError(
            f"{done.task.name}: the rebase stopped with conflicts in {', '.join(conflicts)}; "
            f"resolve them in {done.task.worktree_path} (`git rebase --continue`) or "
            "`git rebase --abort` there"
        )
    tip = done.task.branch
    return report(args, done, f"rebased {tip} onto {done.task.target}")


QUEUE_ACTIONS = ("add", "ls", "remove", "run", "pause", "resume", "cancel")


def cmd_queue(args: argparse.Namespace) -> int:
    from laneboard.tui import output

    action = args.action
    if action not in QUEUE_ACTIONS:
        raise UsageError(f"queue {action}: the actions are {', '.join(QUEUE_ACTIONS)}")
    named = action in ("add", "remove")
    if named != bool(args.names):
        raise UsageError(f"queue {action} {'needs task names' if named else 'takes no names'}")
    if (args.into or args.tell) and action != "add":
        raise UsageError("--into and --tell are for `queue add`")
    if args.target and action not in ("run", "pause", "resume", "cancel"):
        raise UsageError("--target is for `queue run`, `pause`, `resume` and `cancel`")
    if args.all_entries and action != "ls":
        raise UsageError("--all is for `queue ls`")
    service = open_service()
    where = repo_arg(args)
    if action == "add":
        added = service.queue_add(where, args.names, into=args.into, tell=args.tell)
        lines = service.queue(where).lines
        for task, entry in added:
            place = next((line.position for line in lines if line.entry.seq == entry.seq), None)
            print(f"{task.name}: in line for {entry.target} at {entry.sha[:12]} (#{place})")
        print("`laneboard queue run` integrates the line")
    elif action == "remove":
        for entry in service.queue_remove(where, args.names):
            print(f"{service.task_by_id(entry.task_id).name}: taken out of the queue")
    elif action in ("pause", "resume"):
        targets = service.queue_pause(where, target=args.target, paused=action == "pause")
        said = "paused (a run stops after its batch)" if action == "pause" else "resumed"
        print(f"queue of {', '.join(targets) or 'no target'}: {said}")
    elif action == "cancel":
        removed = service.queue_cancel(where, target=args.target)
        names = [service.task_by_id(e.task_id).name for e in removed]
        print(f"queue cancelled: {', '.join(names) or 'nothing'} taken out; paused")
    elif action == "run":
        done, notes = service.queue_run(
            where, target=args.target, on_wait=print_wait, on_output=print_output
        )
        for note in notes:
            print(f"laneboard: {note}", file=sys.stderr)
        if args.json:
            output.emit_json(output.queue_run_document(done, notes))
            return 0 if not done.returned else 1
        for name in done.landed:
            print(f"{name}: landed")
        for name, why in done.deferred:
            print(f"{name}: waits for the next batch: {why}")
        for name, why in done.returned:
            print(f"{name}: back to review: {why}")
        for target in done.paused:
            print(f"queue of {target} is paused; `laneboard queue resume` starts it again")
        print(
            f"{len(done.landed)} landed, {len(done.returned)} back to review in "
            f"{done.batches} batch(es), {done.gate_runs} gate run(s)"
        )
        return 0 if not done.returned else 1
    else:
        view = service.queue(where, all_entries=args.all_entries)
        if args.json:
            output.emit_json(output.queue_document(view))
            return 0
        print(output.queue_text(view))
    return 0


def cmd_checkpoints(args: argparse.Namespace) -> int:
    from laneboard.tui import output, reviews

    given = [args.take, args.pin is not None, args.unpin is not None]
    if sum(given) > 1:
        raise UsageError("give one of --take, --pin, --unpin")
    service = open_service()
    where = repo_arg(args)
    for option, number in (("--pin", args.pin), ("--unpin", args.unpin)):
        if number is not None and not number.isdigit():
            raise UsageError(f"{option} takes a checkpoint's number")
    if args.take:
        made = service.checkpoint(where, args.name)
        print(f"checkpoint {made.n} taken" if made else "unchanged since the last checkpoint")
        return 0
    if args.pin is not None or args.unpin is not None:
        n = int(args.pin if args.pin is not None else args.unpin)
        done = service.pin_checkpoint(where, args.name, n, pinned=args.pin is not None)
        print(f"checkpoint {done.n}: {'pinned' if done.pinned else 'unpinned'}")
        return 0
    task, found = service.checkpoints(where, args.name)
    if args.json:
        output.emit_json(reviews.checkpoints_document(task, found))
    else:
        print(reviews.checkpoints_text(task, found))
    return 0


def cmd_rewind(args: argparse.Namespace) -> int:
    if args.n is not None and not args.n.isdigit():
        raise UsageError("rewind takes a checkpoint's number (`laneboard checkpoints NAME`)")
    service = open_service()
    before, to = service.rewind(
        repo_arg(args), args.name, int(args.n) if args.n is not None else None, fork=args.fork
    )
    print(
        f"{args.name}: back at checkpoint {to.n}; the state it left is checkpoint {before.n} "
        f"(`laneboard rewind {args.name} {before.n}` undoes this)"
    )
    if args.fork:
        print(
            f"{args.name}: its agent goes on in a new conversation forked from its own; the "
            "old one is kept (`laneboard log` names both: agent.forked)"
        )
    return 0
