"""Confinement of agent panes and lane commands (DESIGN.md section 5a), as pure decisions: which
paths a confined command may write, the bubblewrap argv that says so, and whether a task runs
confined under the repo's policy.

Pure: paths in, argv out. The adapter (`core.adapters.confine`) finds the paths, probes bwrap
and caches the answer.

What a confined command sees: the filesystem as the user sees it (`--dev-bind / /`: the real
`/dev`, `/proc`, terminals, tmux, the user's tools and caches), with read-only bind mounts over
the root checkout (the whole directory: its files, the worktree area inside it and every
worktree created there later, since a bind mount covers what is created below it afterwards),
the worktree area when it lies outside the root, the common git dir when it lies outside the
root, and every other registered worktree elsewhere. On top of those, writable again: the
task's own worktree, the common dir's `objects/`, `refs/` and `logs/`, and the task's own admin
dir (what commit, branch, tag and fetch write). So `config`, `hooks/`, `info/`, `packed-refs`
and every other admin dir stay read-only; so do the parts of laneboard's state dir that decide
how later commands run (`Layout.protected`), while the ledger, lane wake-ups, event files and
logs stay writable (a lane command or hook inside writes them). A guard against mistakes and
stray writes, not a security boundary: a determined process can reach the same files through
other means (another tmux pane, a daemon it talks to, the ledger it may write).

Signals: bwrap waits for its command but does not pass signals on, so it is started with
SIGHUP, SIGINT, SIGQUIT and SIGTERM ignored and the command is started by
`env --default-signal`, which sets them back: the command gets them (from its process group)
exactly as it would unconfined, and bwrap reports its exit status (128+N for signal N).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from enum import StrEnum

from laneboard.core.domain.values import value

SIGNALS = "HUP,INT,QUIT,TERM"
TRAMPOLINE = 'trap "" HUP INT QUIT TERM; exec "$@"'
"""Ignores the signals bwrap would die of, then becomes bwrap (ignored signals survive exec)."""
CONFINED_ENV = "LANEBOARD_CONFINED"
"""Set inside a confined command to its task id: a lane command run from a confined pane is
confined already (nesting bwrap would fail in an unprivileged user namespace)."""


def no_maintenance(env: Mapping[str, str]) -> dict[str, str]:
    """Variables that add `gc.auto=0` and `maintenance.auto=false` to the git configuration of
    a command with environment `env` (after any `GIT_CONFIG_*` entries it has already):
    repository-wide maintenance never starts inside a task.

    The result is whole: it repeats the entries `env` has, numbered from 0, because a pane
    does not inherit the caller's environment (it gets the tmux server's, plus these), and a
    count naming keys the pane lacks makes every git command there fail. Applied twice (a
    child spawned from a task's pane) it adds nothing more."""
    raw = env.get("GIT_CONFIG_COUNT", "")
    count = int(raw) if raw.isdigit() else 0
    entries: list[tuple[str, str]] = []
    for n in range(count):
        key, setting = env.get(f"GIT_CONFIG_KEY_{n}"), env.get(f"GIT_CONFIG_VALUE_{n}")
        if key is not None and setting is not None:
            entries.append((key, setting))
    for wanted in (("gc.auto", "0"), ("maintenance.auto", "false")):
        if wanted not in entries:
            entries.append(wanted)
    added: dict[str, str] = {}
    for n, (key, setting) in enumerate(entries):
        added[f"GIT_CONFIG_KEY_{n}"] = key
        added[f"GIT_CONFIG_VALUE_{n}"] = setting
    added["GIT_CONFIG_COUNT"] = str(len(entries))
    return added


class Mode(StrEnum):
    """`[confine] mode`: whether tasks of a repo run confined."""

    REQUIRED = "required"
    """Confine, or refuse to start the agent (or the lane command)."""
    AUTO = "auto"
    """Confine when bwrap works here; else run unconfined and say so."""
    OFF = "off"
    """Never confine."""


@value
class Layout:
    """The paths that decide a task's mounts (real paths, no symlinks)."""

    root: str
    common_dir: str
    area: str
    worktree: str
    admin_dir: str
    other_worktrees: tuple[str, ...] = ()
    """Every other registered worktree of the repo (the root excluded)."""
    protected: tuple[str, ...] = ()
    """Files and directories kept read-only on top of everything else: laneboard's own state
    that decides how later commands run (its config cache, the probe's verdict, the git guard,
    hooks, shims, agents' settings, the user's config file) and the task's own
    `config.worktree` (which `extensions.worktreeConfig` would let it fill with
    `core.fsmonitor` for the next git run there, yours included)."""


def _inside(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip(os.sep) + os.sep)


def read_only(layout: Layout) -> list[str]:
    """The trees mounted read-only, outermost first; each is a directory that exists."""
    trees = [layout.root]
    for extra in (layout.area, layout.common_dir, *layout.other_worktrees):
        if not any(_inside(extra, tree) for tree in trees):
            trees.append(extra)
    return trees


def writable(layout: Layout) -> list[str]:
    """The trees mounted writable again on top of the read-only ones."""
    common = layout.common_dir.rstrip(os.sep)
    return [
        layout.worktree,
        *(os.path.join(common, name) for name in ("objects", "refs", "logs")),
        layout.admin_dir,
    ]


def bwrap_argv(bwrap: str, layout: Layout, argv: Sequence[str]) -> list[str]:
    """The argv that runs `argv` confined to `layout` (bwrap started with the signals it would
    die of ignored, the command with them restored)."""
    mounts = ["--dev-bind", "/", "/"]
    for tree in read_only(layout):
        mounts += ["--ro-bind", tree, tree]
    for tree in writable(layout):
        mounts += ["--bind-try", tree, tree]
    for path in layout.protected:
        mounts += ["--ro-bind-try", path, path]
    return [
        "/bin/sh",
        "-c",
        TRAMPOLINE,
        "laneboard-confine",
        bwrap,
        *mounts,
        "--",
        "env",
        f"--default-signal={SIGNALS}",
        "--",
        *argv,
    ]


@value
class Probe:
    """Whether bwrap works on this machine, and if not, why and how to fix it."""

    works: bool
    bwrap: str | None = None
    reason: str | None = None


@value
class Decision:
    """How one task's agent or lane command runs."""

    confined: bool
    note: str | None = None
    """Why it runs unconfined (or why it may not run), for `show`, `ls`, `doctor`."""
    refused: bool = False


def decide(mode: Mode, probe: Probe) -> Decision:
    """Confined when the policy asks for it and bwrap works; `required` without a working bwrap
    is refused; `auto` then runs unconfined, saying why."""
    if mode is Mode.OFF:
        return Decision(False, "confine.mode is off")
    if probe.works:
        return Decision(True)
    reason = probe.reason or "bwrap does not work here"
    if mode is Mode.REQUIRED:
        return Decision(False, f"confine.mode is required, but {reason}", refused=True)
    return Decision(False, reason)
