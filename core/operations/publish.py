"""Finalize by publishing (DESIGN.md section 7): push exactly the reviewed SHA to the task's
branch on a remote, check that the remote has it, and open (or find) a pull request with `gh`.

Never a plain force: a new remote branch is created by a plain push; an existing one is moved
only with `--force-with-lease=<ref>:<sha>` when laneboard itself recorded that SHA there (an
earlier publish of this task), and a remote branch laneboard did not push is refused. Network
commands have a timeout; after a timeout laneboard looks (`ls-remote`) before it says anything,
since the push may have landed. The task becomes `finalized` with disposition `published`; its
worktree and branch stay (the pull request may need more work).
"""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

from laneboard.core.adapters import faults
from laneboard.core.adapters.git import run_git
from laneboard.core.adapters.integrate import network, remote_ref, timed_out
from laneboard.core.adapters.ledger import Ledger
from laneboard.core.adapters.repo import RepoContext
from laneboard.core.domain.errors import GitError, LaneboardError
from laneboard.core.domain.models import Actor, Disposition, Task, TaskState
from laneboard.core.domain.values import value


@value
class Published:
    task: Task
    remote: str
    ref: str
    sha: str
    pr_url: str | None
    pr_note: str | None
    """What the operator should know about the pull request (the command to run without gh)."""


def _recorded(ledger: Ledger, task: Task) -> set[str]:
    """The SHAs laneboard pushed (or tried to push) to the task's remote branch before: an
    earlier publish that stopped, for instance after a timeout, may have left one there."""
    return {
        str(e.data["sha"])
        for e in ledger.events(task.id)
        if e.kind in ("publish.pushing", "publish.verified") and "sha" in e.data
    }


def publish(
    ctx: RepoContext,
    ledger: Ledger,
    task: Task,
    actor: Actor,
    *,
    remote: str,
    pr: bool,
    draft: bool,
    timeout: float,
) -> Published:
    """Push the reviewed SHA (checked by `steps.integration.plan_publish` first), verify it."""
    reviewed = task.reviewed_sha
    assert reviewed is not None
    if run_git(["remote", "get-url", remote], cwd=ctx.root, check=False).returncode != 0:
        raise LaneboardError(f"no remote named {remote!r} in {ctx.root}")
    ref = f"refs/heads/{task.branch}"
    before = remote_ref(ctx.root, remote, ref, timeout)
    recorded = _recorded(ledger, task)
    if before is not None and before != reviewed and before not in recorded:
        raise LaneboardError(
            f"{remote} already has a branch {task.branch} at {before[:12]} that laneboard did "
            "not push; nothing was pushed (rename the task's branch or remove that one)"
        )
    task = ledger.update_task(
        task.id,
        actor=actor,
        kind="publish.intent",
        state=TaskState.FINALIZING,
        expect=task.state,
        data={"mode": "publish", "remote": remote, "ref": ref, "sha": reviewed, "before": before},
    )
    faults.checkpoint("publish.after_intent")
    try:
        _push(ctx, ledger, task, actor, remote, ref, reviewed, before, timeout)
        faults.checkpoint("publish.after_push")
    except BaseException as err:
        ledger.update_task(
            task.id,
            actor=actor,
            kind="publish.stopped",
            state=TaskState.READY_FOR_REVIEW,
            settled=True,
            data={"reason": str(err) or "interrupted"},
        )
        raise
    try:
        url, note = _pull_request(ctx, ledger, task, actor, pr=pr, draft=draft, timeout=timeout)
    except (LaneboardError, ValueError, KeyError) as err:  # gh said something unexpected
        url, note = None, str(err)
        ledger.append_event(task.id, ctx.repo.id, "pr.failed", actor, {"reason": note})
    return _land(ledger, task, actor, remote, ref, reviewed, url, note)


def _land(
    ledger: Ledger,
    task: Task,
    actor: Actor,
    remote: str,
    ref: str,
    reviewed: str,
    url: str | None,
    note: str | None,
) -> Published:
    done = ledger.update_task(
        task.id,
        actor=actor,
        kind="task.published",
        state=TaskState.FINALIZED,
        expect=TaskState.FINALIZING,
        settled=True,
        keep_live=True,
        disposition=Disposition.PUBLISHED.value,
        data={"remote": remote, "ref": ref, "sha": reviewed, "pr_url": url},
        finalized_sha=reviewed,
        pr_url=url,
    )
    return Published(done, remote, ref, reviewed, url, note)


def settle(ledger: Ledger, task: Task, actor: Actor) -> Task:
    """Finish or undo a publish that stopped half-way (this process owns the task): published
    when laneboard verified the remote branch after the intent, else back in review (a push
    that may have landed unverified is looked at again by the next publish)."""
    intent = ledger.last_event(task.id, "publish.intent")
    if intent is None:
        raise LaneboardError(f"task {task.name} has no publish intent in the journal")
    verified = ledger.last_event(task.id, "publish.verified")
    if verified is not None and verified.seq > intent.seq:
        data = intent.data
        return _land(ledger, task, actor, data["remote"], data["ref"], data["sha"], None, None).task
    return ledger.update_task(
        task.id,
        actor=actor,
        kind="publish.undone",
        state=TaskState.READY_FOR_REVIEW,
        settled=True,
        data={"reason": "interrupted before the remote branch was verified"},
    )


def _push(
    ctx: RepoContext,
    ledger: Ledger,
    task: Task,
    actor: Actor,
    remote: str,
    ref: str,
    sha: str,
    before: str | None,
    timeout: float,
) -> None:
    if before != sha:
        args = ["push", "--porcelain", "--no-verify", remote, f"{sha}:{ref}"]
        if before is not None:  # moving a branch laneboard pushed before, and only from there
            args.insert(1, f"--force-with-lease={ref}:{before}")
        ledger.append_event(
            task.id, ctx.repo.id, "publish.pushing", actor, {"argv": args, "sha": sha}
        )
        try:
            pushed = network(args, ctx.root, timeout)
            if pushed.returncode != 0:
                lines = pushed.stderr.decode(errors="replace").strip().splitlines()
                raise GitError(f"git push to {remote} failed: {lines[-1] if lines else '?'}")
        except GitError as err:
            # A timeout (or a dropped connection) may come after the remote took the push.
            if "timed out" not in str(err) or remote_ref(ctx.root, remote, ref, timeout) != sha:
                raise
    now = remote_ref(ctx.root, remote, ref, timeout)
    if now != sha:
        raise LaneboardError(
            f"{remote} has {task.branch} at {now or 'nothing'} after the push, not the reviewed "
            f"{sha}; the task stays in review"
        )
    ledger.append_event(task.id, ctx.repo.id, "publish.verified", actor, {"ref": ref, "sha": sha})


def _pull_request(
    ctx: RepoContext,
    ledger: Ledger,
    task: Task,
    actor: Actor,
    *,
    pr: bool,
    draft: bool,
    timeout: float,
) -> tuple[str | None, str | None]:
    """(url, note): the pull request for head/base, found or created with `gh`; without `gh`,
    the exact command to run, recorded as no pull request opened."""
    if not pr:
        return None, None
    base = task.target
    title = task.name
    body = f"laneboard task {task.name} ({task.id}), reviewed {task.reviewed_sha}"
    create = ["gh", "pr", "create", "--head", task.branch, "--title", title, "--body", body]
    if base:
        create += ["--base", base]
    if draft:
        create.append("--draft")
    gh = shutil.which("gh")
    if gh is None:
        note = f"gh is not installed; no pull request was opened. Run: {shlex.join(create)}"
        ledger.append_event(task.id, ctx.repo.id, "pr.not_opened", actor, {"command": create})
        return None, note
    listing = [gh, "pr", "list", "--head", task.branch, "--state", "open", "--json", "url"]
    if base:
        listing += ["--base", base]
    found = _gh(listing, ctx.root, timeout)
    existing = json.loads(found or "[]")
    if existing:
        found_url = str(existing[0]["url"])
        ledger.append_event(task.id, ctx.repo.id, "pr.found", actor, {"url": found_url})
        return found_url, None
    out = _gh([gh, *create[1:]], ctx.root, timeout)
    url = out.strip().splitlines()[-1] if out.strip() else None
    ledger.append_event(task.id, ctx.repo.id, "pr.opened", actor, {"url": url, "argv": create})
    return url, None


def _gh(argv: list[str], cwd: Path, timeout: float) -> str:
    what = f"gh {' '.join(argv[1:3])}"
    done = timed_out(argv, cwd, timeout, what)
    if done.returncode != 0:
        lines = done.stderr.decode(errors="replace").strip().splitlines()
        said = lines[-1] if lines else f"exit {done.returncode}"
        raise LaneboardError(f"the branch is published, but `{what}` failed: {said}")
    return done.stdout.decode(errors="replace")
