"""Confinement of agent panes, lane commands, setups and gates (DESIGN.md section 5a), as pure
decisions: what a confined process sees and may write (the mounts, as a list of what is
allowed, each with why), the bubblewrap argv that says so, the seccomp filter it runs under,
and whether a task runs confined under the repo's policy.

Pure: paths in, argv and bytes out. The adapter (`core.adapters.confine`) finds the paths,
probes bwrap and caches the answer; the warden (`core.adapters.warden`) runs a pane's sandbox
and serves its channel.

The threat model: the agent, and everything it starts, is untrusted code running as the user.
So the sandbox is a list of what is allowed, in this order (later mounts cover earlier ones):

1. the filesystem as the user sees it, writable (home, caches, tools, network config: what the
   user's own permissions allow), but `/sys` read-only;
2. a private `/dev` (no other terminal: nothing to inject keys into), a private `/proc` in a
   PID namespace of its own (no `/proc/<pid>/root` of an outside process, no outside process
   to signal or trace), a private `/tmp` (no tmux, X11 or other socket that lives there);
3. every registered repository read-only: its root checkout, common git dir, worktree area and
   every other worktree;
4. writable again, for its own work only: its worktree, its admin dir (HEAD, index, reflog),
   its own ref namespace (`refs/heads/<prefix>/<task>/` and its reflogs), its own object
   directory (new objects; the common store is read-only to it);
5. laneboard's state and config directories masked, and lent back piece by piece: the hook
   script, its own agent settings, its own shims and git guard (read-only), its own event
   file (writable), its channel (a socket directory, read-only);
6. the sockets of everything that runs commands for the user masked: the tmux servers', the
   session bus and service manager (`$XDG_RUNTIME_DIR`), `screen`'s.

The channel (`core.domain.channel`) is the one way out: requests laneboard accepts, scoped to
the caller's subtree, served outside.

Signals: bwrap waits for its command but does not pass signals on, so it is started with
SIGHUP, SIGINT, SIGQUIT and SIGTERM ignored and the command is started by
`env --default-signal`, which sets them back: the command gets them (from its process group)
exactly as it would unconfined, and bwrap reports its exit status (128+N for signal N). The
command is not PID 1 of its namespace (bwrap's own init is, which reaps): when it exits, the
kernel ends everything else in the sandbox, `setsid` daemons included.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Mapping, Sequence
from enum import StrEnum

from laneboard.core.domain.values import value

SIGNALS = "HUP,INT,QUIT,TERM"
TRAMPOLINE = 'trap "" HUP INT QUIT TERM; exec "$@"'
"""Ignores the signals bwrap would die of, then becomes bwrap (ignored signals survive exec)."""
CONFINED_ENV = "LANEBOARD_CONFINED"
"""Set inside a confined command to its task id (information for the command; never trusted:
what is confined is decided by the mounts, and who is calling by the channel's socket)."""
CHANNEL_DIR = "/tmp/.laneboard"
"""Where a sandbox sees its channel's directory (read-only; the socket is `channel.sock`)."""
CHANNEL_SOCKET = "channel.sock"
CHANNEL_ENV = "LANEBOARD_CHANNEL"
UNSET = (
    "TMUX",
    "TMUX_PANE",
    "DBUS_SESSION_BUS_ADDRESS",
    "DISPLAY",
    "WAYLAND_DISPLAY",
    "XAUTHORITY",
    "LANEBOARD_TMUX_SOCKET",
)
"""Variables that would name a command runner outside (masked anyway; unset so that nothing
inside tries them and fails strangely)."""


def no_maintenance(env: Mapping[str, str], also: Sequence[tuple[str, str]] = ()) -> dict[str, str]:
    """Variables that add `gc.auto=0` and `maintenance.auto=false` (and the settings `also`
    names) to the git configuration of a command with environment `env` (after any
    `GIT_CONFIG_*` entries it has already): repository-wide maintenance never starts inside a
    task.

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
    for wanted in (("gc.auto", "0"), ("maintenance.auto", "false"), *also):
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
    """The paths that decide one sandbox's mounts (real paths, no symlinks). Every tuple may be
    empty; a path that does not exist is skipped (`--*-try`)."""

    worktree: str
    """Its own worktree (a task's, or finalize's scratch worktree): writable."""
    admin_dir: str
    """The worktree's admin dir under the common dir: writable (HEAD, index, reflog)."""
    repos: tuple[str, ...] = ()
    """Every registered repository's trees (roots, common dirs, worktree areas, other
    worktrees), outermost first: read-only."""
    namespace: tuple[str, ...] = ()
    """Its own ref directories (`refs/heads/<prefix>/<task>`, `logs/refs/heads/<...>`):
    writable."""
    objects: str | None = None
    """Its own object directory (`GIT_OBJECT_DIRECTORY`): writable. The common store is an
    alternate it reads."""
    sealed: tuple[str, ...] = ()
    """Files inside writable trees kept read-only: its `config.worktree` (which
    `extensions.worktreeConfig` would let it fill with `core.fsmonitor` for the next git run
    there, yours included) and the marker that keeps its ref directories from being removed."""
    masked: tuple[str, ...] = ()
    """Directories hidden behind an empty tmpfs: laneboard's state and config directories, the
    runtime dir of the session bus and service manager, tmux's socket directories."""
    sockets: tuple[str, ...] = ()
    """Single sockets hidden (by /dev/null mounted over them): a tmux server's socket outside
    the masked directories."""
    lent: tuple[str, ...] = ()
    """Pieces of what is masked lent back read-only: the hook script, its agent settings, its
    shims, the git guard; and your ssh agent's socket (it signs with your keys, as your own
    permissions allow; it runs nothing)."""
    private: tuple[tuple[str, str], ...] = ()
    """(laneboard's directory, the name in the worktree it is bound over): what the agent keeps
    for itself where it writes into the worktree (aider's tags cache), kept out of it."""
    owned: tuple[str, ...] = ()
    """Pieces of the masked state lent back writable: its event file, its agent's own data
    directory (aider's history), its object directory."""
    kept: tuple[str, ...] = ()
    """Paths under `/tmp` the sandbox needs writable (a home there): bound into its private
    `/tmp` first, so the read-only mounts still cover what lies below them."""
    trusted: tuple[str, ...] = ()
    """What runs or configures code outside, kept read-only inside wherever it lies (a home is
    writable, and one under /tmp is kept): laneboard's own install and interpreter, the
    directories on PATH, git's global configuration (`core.fsmonitor` there would run a program
    in every git, yours and laneboard's), tmux's configuration, `~/.ssh`, the shell startup
    files. Mounted before everything of the repositories, so a task's worktree inside them is
    still its own, and after a kept home, so they cover what lies in it."""
    channel: str | None = None
    """Its channel's directory, bound read-only at `CHANNEL_DIR`."""


MADE = ".made-"
"""`private/<task>/.made-<name>` in the state dir: laneboard made `<worktree>/<name>` to bind a
profile's `private` directory over it (the warden removes both once the agent ended)."""


@value
class Mount:
    """One entry of a sandbox's list of what is allowed."""

    op: str
    """bwrap's option: `--bind-try`, `--ro-bind-try`, `--tmpfs`, `--dev`, `--proc`, ..."""
    dest: str
    """Where the sandbox sees it."""
    source: str | None
    """What is mounted there (for a bind: the path outside)."""
    why: str


def _under(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip(os.sep) + os.sep)


def mounts(layout: Layout) -> list[Mount]:
    """The sandbox as a list of what is allowed, in bwrap's order (later entries cover earlier
    ones). Everything not listed as writable is read-only or invisible."""
    found = [
        Mount("--bind", "/", "/", "the user's own files, tools and caches, as the user sees them"),
        Mount("--ro-bind", "/sys", "/sys", "kernel settings and cgroups are not the task's"),
        Mount("--dev", "/dev", None, "no other terminal to type into"),
        Mount("--proc", "/proc", None, "no outside process to reach through /proc/<pid>"),
        Mount("--tmpfs", "/tmp", None, "no tmux, X11 or other socket that lives in /tmp"),
    ]
    for path in layout.kept:
        found.append(Mount("--bind-try", path, path, "a home under /tmp"))
    for path in layout.trusted:
        found.append(Mount("--ro-bind-try", path, path, "what laneboard and git outside trust"))
    for path in layout.repos:
        found.append(Mount("--ro-bind-try", path, path, "a repository's files and git metadata"))
    found.append(Mount("--bind-try", layout.worktree, layout.worktree, "its own worktree"))
    found.append(Mount("--bind-try", layout.admin_dir, layout.admin_dir, "its HEAD and index"))
    for source, dest in layout.private:
        found.append(Mount("--bind-try", dest, source, "its agent's cache, out of the worktree"))
    for path in layout.namespace:
        found.append(Mount("--bind-try", path, path, "its own branches and their reflogs"))
    for path in layout.sealed:
        found.append(Mount("--ro-bind-try", path, path, "settings git would run code from"))
    for path in layout.masked:
        found.append(Mount("--tmpfs", path, None, "laneboard's state, or a command runner"))
    for path in layout.sockets:
        found.append(Mount("--ro-bind-try", path, "/dev/null", "a tmux server's socket"))
    for path in layout.lent:
        found.append(Mount("--ro-bind-try", path, path, "its hooks, settings, shims; ssh agent"))
    for path in layout.owned:
        found.append(Mount("--bind-try", path, path, "its event file, its agent's own data"))
    if layout.objects is not None:
        found.append(Mount("--bind-try", layout.objects, layout.objects, "its new objects"))
    if layout.channel is not None:
        found.append(Mount("--ro-bind", CHANNEL_DIR, layout.channel, "its channel to laneboard"))
    for path in layout.masked:  # once what is lent back is mounted in it: nothing to write
        found.append(Mount("--remount-ro", path, None, "nothing is written where a mask is"))
    return found


def bwrap_argv(
    bwrap: str,
    layout: Layout,
    argv: Sequence[str],
    *,
    cwd: str | None = None,
    seccomp_fd: int | None = None,
) -> list[str]:
    """The argv that runs `argv` confined to `layout` (bwrap started with the signals it would
    die of ignored, the command with them restored). `seccomp_fd`: an inherited descriptor
    holding `seccomp_filter()`'s program."""
    options = ["--unshare-pid", "--die-with-parent"]
    for mount in mounts(layout):
        options.append(mount.op)
        if mount.op in ("--dev", "--proc", "--tmpfs", "--remount-ro"):
            options.append(mount.dest)
        else:
            assert mount.source is not None
            options += [mount.source, mount.dest]
    for name in UNSET:
        options += ["--unsetenv", name]
    if cwd is not None:
        options += ["--chdir", cwd]
    if seccomp_fd is not None:
        options += ["--seccomp", str(seccomp_fd)]
    return [
        "/bin/sh",
        "-c",
        TRAMPOLINE,
        "laneboard-confine",
        bwrap,
        *options,
        "--",
        "env",
        f"--default-signal={SIGNALS}",
        "--",
        *argv,
    ]


# --- the seccomp filter ------------------------------------------------------------------------

_TIOCSTI = 0x5412
"""Pushes a byte into a terminal's input as if typed: with it, a process could type a command
into the shell that reads the terminal after it (CVE-2017-5226)."""
_TIOCLINUX = 0x541C
"""Can copy a virtual console's selection into its input: the same kind of typing."""
_SECCOMP_RET_ALLOW = 0x7FFF0000
_SECCOMP_RET_ERRNO = 0x00050000
_EPERM = 1
_ARCHES = {
    # machine: (audit arch, ioctl), and the 32-bit compat ABI the kernel also accepts.
    "x86_64": ((0xC000003E, 16), (0x40000003, 54)),
    "aarch64": ((0xC00000B7, 29), (0x40000028, 54)),
}
_X32 = 0x40000000
"""x86_64's x32 ABI marks its syscall numbers with this bit."""


def seccomp_filter(machine: str) -> bytes | None:
    """A classic-BPF seccomp program (bwrap's `--seccomp`) that refuses the ioctls that type
    into a terminal (`TIOCSTI`, `TIOCLINUX`; EPERM), in the native and the 32-bit ABI, and
    every x32 syscall; everything else is allowed. None for a machine it does not know (the
    adapter then names the gap)."""
    known = _ARCHES.get(machine)
    if known is None:
        return None
    ld, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06  # BPF_LD|W|ABS, JMP|JEQ|K, JMP|JGE|K, RET|K
    deny = _SECCOMP_RET_ERRNO | _EPERM
    program: list[tuple[int, int, int, int]] = []
    (native, native_ioctl), (compat, compat_ioctl) = known
    # 0-3: which ABI (anything else cannot reach this kernel: allow)
    program.append((ld, 0, 0, 4))  # 0: seccomp_data.arch
    program.append((jeq, 2, 0, native))  # 1: native -> 4
    program.append((jeq, 4, 0, compat))  # 2: compat -> 7
    program.append((ret, 0, 0, _SECCOMP_RET_ALLOW))  # 3
    # 4-6: native: x32 numbers refused; ioctl -> its request
    program.append((ld, 0, 0, 0))  # 4: seccomp_data.nr
    program.append((jge, 7, 0, _X32))  # 5: x32 -> 13 deny
    program.append((jeq, 2, 5, native_ioctl))  # 6: ioctl -> 9, else -> 12 allow
    # 7-8: compat
    program.append((ld, 0, 0, 0))  # 7: seccomp_data.nr
    program.append((jeq, 0, 3, compat_ioctl))  # 8: ioctl -> 9, else -> 12 allow
    # 9-11: the request's low 32 bits (the kernel reads it as an unsigned int)
    program.append((ld, 0, 0, 24))  # 9: seccomp_data.args[1], low word (little-endian)
    program.append((jeq, 2, 0, _TIOCSTI))  # 10: -> 13 deny, else 11
    program.append((jeq, 1, 0, _TIOCLINUX))  # 11: -> 13 deny, else 12
    program.append((ret, 0, 0, _SECCOMP_RET_ALLOW))  # 12
    program.append((ret, 0, 0, deny))  # 13
    return b"".join(struct.pack("=HBBI", *ins) for ins in _relocated(program))


def _relocated(program: list[tuple[int, int, int, int]]) -> list[tuple[int, int, int, int]]:
    """The program as written above, each jump checked against the target its comment names
    (a wrong offset would let a request through: this fails loudly instead)."""
    targets = {1: (4, 2), 2: (7, 3), 5: (13, 6), 6: (9, 12), 8: (9, 12), 10: (13, 11), 11: (13, 12)}
    for index, (code, jt, jf, _k) in enumerate(program):
        if code == 0x15 or code == 0x35:
            assert (index + 1 + jt, index + 1 + jf) == targets[index], index
    return program


# --- the policy ---------------------------------------------------------------------------------


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
