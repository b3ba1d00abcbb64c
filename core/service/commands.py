"""Every operator command, declared once: its name, arguments, help, and the board's key and
palette entry. The command line's argparse is built from this list (`laneboard.tui.cli`), and
the board's bindings and command palette will be too, so the three never drift apart.

Pure data: importing this module costs nothing (it is on the path of every `laneboard` start).
"""

from __future__ import annotations

from typing import Literal

from laneboard.core.domain.values import value

ArgKind = Literal[
    "positional", "optional-positional", "many", "any", "flag", "option", "pair", "rest"
]


@value
class Arg:
    """One argument: a positional (`name`), an optional positional, one or more positionals
    (`many`), a flag (`--force`), an option with a value (`--base REF`), or the rest of the line
    (`-- CMD ...`)."""

    name: str
    help: str
    kind: ArgKind = "positional"
    metavar: str | None = None
    dest: str | None = None
    number: bool = False
    """The option's value is a number of seconds (a float)."""


@value
class Command:
    """One command as the CLI and the board know it."""

    name: str
    help: str
    args: tuple[Arg, ...] = ()
    json: bool = True
    """It prints a JSON document with `--json` (docs/cli.md)."""
    one_of: tuple[str, ...] = ()
    """Options of which exactly one must be given (`--lane` or `--root`)."""
    key: str | None = None
    """The board's key for it, when it acts on the selected task."""
    palette: str | None = None
    """Its entry in the board's command palette."""

    @property
    def binding(self) -> str:
        """The id a user's key map names it by (config `keys`)."""
        return f"laneboard.{self.name}"


TASK = Arg("name", "the task's name, its id, or a unique prefix of its id")
AGENT_ARGS = (
    Arg("--agent", "the agent profile (default: config agents.default)", "option", "PROFILE"),
    Arg(
        "--cmd",
        "run this command line as the agent instead of a profile",
        "option",
        "CMD",
        dest="agent_command",
    ),
    Arg("--prompt", "the agent's first prompt", "option", "TEXT"),
)

COMMANDS: tuple[Command, ...] = (
    Command(
        "init",
        "register a repository",
        (Arg("path", "a path inside the repository (default: cwd)", "optional-positional"),),
    ),
    Command(
        "new",
        "create a task: branch, worktree and its agent in a tmux pane",
        (
            Arg("name", "the new task's name"),
            Arg(
                "--base",
                "commit to start from (default: the target's tip; HEAD means HEAD here)",
                "option",
                "REF",
            ),
            Arg(
                "--target",
                "the branch it will be integrated into (default: config target, else "
                "origin/HEAD's branch, else the root's branch)",
                "option",
                "BRANCH",
            ),
            Arg(
                "--parent",
                "make it a child of this task: it starts at the parent's HEAD commit and targets "
                "the parent's branch (default inside a task's pane: that task)",
                "option",
                "TASK",
            ),
            Arg("--no-parent", "a top-level task, even inside a task's pane", "flag"),
            *AGENT_ARGS,
            Arg("--no-start", "provision only; start no agent", "flag"),
        ),
        key="n",
        palette="New task",
    ),
    Command(
        "wait",
        "wait until tasks finish (ready for review, failed, cancelled); print their records",
        (
            Arg("names", "the tasks (names, ids or id prefixes)", "many"),
            Arg("--any", "return when the first one finishes", "flag", dest="any_"),
            Arg("--timeout", "give up waiting (exit 75)", "option", "SECONDS", number=True),
        ),
    ),
    Command(
        "cancel",
        "cancel a task: before its agent starts, remove exactly what it created; after, stop "
        "the agent and keep everything",
        (
            TASK,
            Arg(
                "--children",
                "its live children: keep (default) or cancel them too",
                "option",
                "keep|cancel",
            ),
        ),
        key="c",
        palette="Cancel task",
    ),
    Command(
        "retry",
        "provision a failed or cancelled task again (same parent, base SHA, target and agent)",
        (TASK, Arg("--no-start", "provision only; start no agent", "flag")),
    ),
    Command(
        "mcp",
        "serve laneboard's delegation tools over the Model Context Protocol (stdio)",
        (
            Arg(
                "--task",
                "the task whose subtree it serves (default: $LANEBOARD_TASK, else the task "
                "whose worktree it starts in)",
                "option",
                "ID",
            ),
            Arg(
                "--config",
                "print how to add this server to claude, codex or gemini, and exit",
                "option",
                "AGENT",
            ),
        ),
        json=False,
    ),
    Command(
        "start",
        "start the agent of a provisioned (or retained) task",
        (TASK, *AGENT_ARGS),
        palette="Start agent",
    ),
    Command(
        "attach",
        "show the task's pane (switch the tmux client to it, or attach this terminal)",
        (TASK,),
        json=False,
        key="a",
        palette="Attach to pane",
    ),
    Command(
        "send",
        "type a prompt into the task's agent (after verifying its worktree), then Enter",
        (
            TASK,
            Arg("text", "what to type"),
            Arg("--when-idle", "wait until the agent is idle or waiting", "flag"),
            Arg("--timeout", "give up waiting (exit 75)", "option", "SECONDS", number=True),
        ),
        key="p",
        palette="Send prompt",
    ),
    Command(
        "shell",
        "open (or go to) a plain shell in a window next to the agent's, in its worktree",
        (TASK,),
        json=False,
        key="s",
        palette="Shell beside agent",
    ),
    Command(
        "pause",
        "stop the agent (its screen kept in the journal); keep every file",
        (
            Arg("name", "the task (or --all)", "optional-positional"),
            Arg("--all", "every running task (of this repo, or all with no repo here)", "flag"),
        ),
        key="z",
        palette="Pause agent",
    ),
    Command(
        "resume",
        "start the agent again on its pinned conversation, in the same worktree",
        (
            Arg("name", "the task (or --all)", "optional-positional"),
            Arg("--all", "every paused task, and every running one whose pane is gone", "flag"),
        ),
        key="Z",
        palette="Resume agent",
    ),
    Command(
        "signal",
        "tell laneboard what an agent is doing (for scripts and hooks)",
        (
            Arg("--task", "the task's id (default: $LANEBOARD_TASK)", "option", "ID"),
            Arg("--state", "working, waiting, idle or done", "option", "STATE"),
            Arg("--check", "a check it ran on its work: NAME=pass or NAME=fail", "option", "CHECK"),
            Arg("--message", "its summary of the work, for the parent", "option", "TEXT"),
        ),
        json=False,
    ),
    Command(
        "supervise",
        "be the controller: start queued tasks, record agent states (headless board)",
        (
            Arg(
                "--interval",
                "seconds between refreshes (default 1)",
                "option",
                "SECONDS",
                number=True,
            ),
            Arg("--once", "one refresh, then exit", "flag"),
        ),
        json=False,
    ),
    Command(
        "ls",
        "list tasks: state, what their agent does, what their worktree holds, their lane",
        (
            Arg("--all", "include retired tasks", "flag"),
            Arg("--children", "only the tasks below this one", "option", "TASK"),
            Arg("--local", "only this machine's tasks, not its hosts' (docs/hosts.md)", "flag"),
            Arg(
                "--follow",
                "with --json: stay, and print a line each time this machine's tasks change, "
                "until standard input closes (what a host's board reads; docs/hosts.md)",
                "flag",
            ),
        ),
    ),
    Command(
        "show",
        "show one task: what it did, its lane, its health",
        (TASK, Arg("--verbose", "also the ledger's ownership facts (inodes, admin dir)", "flag")),
        key="enter",
        palette="Show task",
    ),
    Command("log", "show a task's whole journal", (TASK,), key="l", palette="Task journal"),
    Command(
        "verify",
        "verify a task's worktree (exit 1 when rejected)",
        (
            TASK,
            Arg(
                "--repin",
                "after a remount changed the device number: take the new one, if nothing "
                "else changed",
                "flag",
            ),
        ),
        key="v",
        palette="Verify worktree",
    ),
    Command(
        "doctor",
        "reconcile the ledger with git; report, fix what is exact",
        (Arg("--fix", "finish or undo interrupted changes", "flag"),),
        palette="Doctor",
    ),
    Command(
        "retain",
        "stop the agent; keep worktree and branch",
        (TASK,),
        key="r",
        palette="Retain task",
    ),
    Command(
        "discard",
        "snapshot and remove a task's worktree and branch",
        (
            TASK,
            Arg(
                "--force",
                "save uncommitted, untracked and unique work in a snapshot and remove anyway "
                "(other blockers still refuse)",
                "flag",
            ),
        ),
        key="d",
        palette="Discard task",
    ),
    Command(
        "restore",
        "bring a task back from its newest snapshot",
        (
            TASK,
            Arg("--as", "restore under another name", "option", "NAME", dest="as_name"),
        ),
        palette="Restore task",
    ),
    Command(
        "review",
        "show a task's commits, changed files and diffs since the merge base with its target",
        (
            TASK,
            Arg("--patch", "also each file's diff (a binary or huge file is summarized)", "flag"),
            Arg("--file", "only this file's diff (implies --patch)", "option", "PATH"),
            Arg("--mark", "pin the branch tip now as the reviewed SHA (committed work)", "flag"),
            Arg(
                "--full",
                "the whole work since the merge base, not only what changed since your review",
                "flag",
            ),
            Arg(
                "--comment",
                "comment on a line of the reviewed SHA (PATH:LINE TEXT)",
                "pair",
                "PATH:LINE TEXT",
            ),
            Arg(
                "--side",
                "the comment's side: new (default) or old (the merge base)",
                "option",
                "SIDE",
            ),
            Arg("--comments", "list the open comments (outdated ones marked)", "flag"),
            Arg("--send", "send the open comments to the agent as one prompt, once idle", "flag"),
            Arg("--resolve", "close comment ID", "option", "ID"),
        ),
        key="R",
        palette="Review task",
    ),
    Command(
        "checkpoints",
        "a task's checkpoints: its worktree saved at the end of each agent turn",
        (
            TASK,
            Arg("--take", "take one now (none when the worktree is as the last one)", "flag"),
            Arg("--pin", "never drop checkpoint N", "option", "N"),
            Arg("--unpin", "let checkpoint N be dropped again", "option", "N"),
        ),
        palette="Task checkpoints",
    ),
    Command(
        "rewind",
        "bring a task's worktree back to checkpoint N (its current state saved first)",
        (
            TASK,
            Arg("n", "the checkpoint (default: the one before the newest)", "optional-positional"),
            Arg(
                "--fork",
                "then go on in a new conversation forked from the agent's own (claude)",
                "flag",
            ),
        ),
        key="W",
        palette="Rewind to a checkpoint",
    ),
    Command(
        "conflicts",
        "the conflict radar: which tasks conflict with their target or with each other",
        palette="Conflict radar",
    ),
    Command(
        "finalize",
        "integrate the reviewed SHA: merge it into the target here, or publish it",
        (
            Arg("name", "the task (or --all-ready)", "optional-positional"),
            Arg("--merge", "merge into the target branch here", "flag"),
            Arg("--publish", "push to the remote branch (and open a pull request)", "flag"),
            Arg("--into", "the target branch (default: the task's target)", "option", "BRANCH"),
            Arg(
                "--strategy",
                "merge (a merge commit, default: config finalize.strategy), squash or rebase",
                "option",
                "HOW",
            ),
            Arg("--all-ready", "every reviewed task of the repo, in review order", "flag"),
            Arg(
                "--fetch-into",
                "a task on a host (HOST:TASK): fetch its reviewed commit into the repository at "
                "PATH on this machine and merge it there (default: on the host; docs/hosts.md)",
                "option",
                "PATH",
            ),
            Arg("--remote", "the remote to publish to (default: origin)", "option", "REMOTE"),
            Arg("--pr", "open (or find) a pull request with gh", "flag"),
            Arg("--draft", "open the pull request as a draft", "flag"),
        ),
        one_of=("--merge", "--publish"),
        key="f",
        palette="Finalize task",
    ),
    Command(
        "queue",
        "the merge queue: reviewed tasks integrated in batches, gated once, bisected on red",
        (
            Arg("action", "add, ls, remove, run, pause, resume or cancel"),
            Arg("names", "the tasks (add, remove)", "any"),
            Arg(
                "--into", "add: the target branch (default: the task's target)", "option", "BRANCH"
            ),
            Arg("--tell", "add: when it goes back to review, tell its agent why", "flag"),
            Arg(
                "--target",
                "run, pause, resume, cancel: only this target's queue (default: every one)",
                "option",
                "BRANCH",
            ),
            Arg("--all", "ls: also the entries that left the queue", "flag", dest="all_entries"),
        ),
        key="Q",
        palette="Merge queue: add task",
    ),
    Command(
        "rebase",
        "rebase a task's branch onto its target in its own worktree (agent paused or idle)",
        (TASK,),
        key="b",
        palette="Rebase onto target",
    ),
    Command(
        "exec",
        "run a command in a lane, waiting for admission",
        (
            Arg("--lane", "the task whose worktree lane to use", "option", "NAME"),
            Arg("--root", "the repository's root lane", "flag"),
            Arg("--timeout", "give up waiting (exit 75)", "option", "SECONDS", number=True),
            Arg("--quiet", "do not say what it waits for", "flag"),
            Arg("argv", "-- CMD [ARG ...]", "rest"),
        ),
        json=False,
        one_of=("--lane", "--root"),
    ),
    Command("lanes", "show every lane: running and waiting leases, slots", palette="Lanes"),
    Command(
        "host",
        "other machines that run tasks over ssh: add, ls, check (docs/hosts.md)",
        (
            Arg("action", "add, ls or check"),
            Arg("names", "add: NAME DESTINATION; check: NAME", "any"),
            Arg(
                "--ssh-config",
                "add: the ssh config file ssh reads instead of yours (ssh -F)",
                "option",
                "FILE",
                dest="ssh_config",
            ),
            Arg(
                "--laneboard",
                "add: the command that runs laneboard on the host (default: laneboard)",
                "option",
                "CMD",
                dest="laneboard_command",
            ),
            Arg(
                "--agent",
                "check: the agent profile whose program to look for (default: agents.default)",
                "option",
                "PROFILE",
            ),
            Arg(
                "--install",
                "check: first install this laneboard there when it is missing or of another "
                "version (no package index needed; docs/hosts.md)",
                "flag",
            ),
        ),
    ),
    Command(
        "shims",
        "(re)write a task's lane shims (lanes.wrap); print the bin dir",
        (TASK,),
    ),
)


def command(name: str) -> Command:
    return next(c for c in COMMANDS if c.name == name)
