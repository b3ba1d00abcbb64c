"""Facts about live processes, read from `/proc` (Linux).

A process is named by its pid *and* its start time, so a pid reused by another program is never
mistaken for the one laneboard recorded. Reads only; never signals anything except signal 0.
"""

from __future__ import annotations

import os
import shlex
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

PROC = "/proc"
"""Where the process table is read (a test points it at an empty directory to prove that an
unreadable process table fails closed)."""


def start_time(pid: int) -> int | None:
    """Start time of `pid` in clock ticks since boot (`/proc/<pid>/stat` field 22), or None when
    the process is gone or is a zombie (it has exited; only its exit status remains)."""
    try:
        with open(f"{PROC}/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may itself contain spaces or ')'.
    fields = stat.rsplit(b")", 1)[1].split()
    if fields[0] in (b"Z", b"X"):
        return None
    return int(fields[19])


def alive(pid: int, start: int | None) -> bool:
    """True when `pid` runs and, if `start` is given, is the process that started at `start`."""
    if pid <= 0:
        return False
    current = start_time(pid)
    if current is not None:
        return start is None or current == start
    if Path(f"{PROC}/self/stat").exists():
        return False
    try:  # no /proc (macOS): existence is all we can know
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def ancestors(pid: int) -> set[int]:
    """`pid` and every process above it up to init (from `/proc/<pid>/stat` field 4)."""
    found: set[int] = set()
    while pid > 0 and pid not in found:
        found.add(pid)
        try:
            with open(f"{PROC}/{pid}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            break
        pid = int(stat.rsplit(b")", 1)[1].split()[1])
    return found


def me() -> tuple[int, int]:
    """This process's (pid, start time)."""
    pid = os.getpid()
    return pid, start_time(pid) or 0


INITIAL_PID_NAMESPACE = "pid:[4026531836]"
"""The kernel's initial PID namespace (PROC_PID_INIT_INO): outside it, other processes on the
machine are invisible."""


def unseen(*, trust_namespace: bool = False) -> str | None:
    """Why the processes inside a directory cannot all be known (None when they can): without a
    readable process table, or from a PID namespace of its own (a container, `unshare`), where
    processes outside it are invisible, "no process is inside" would be a guess.
    `trust_namespace` accepts the second (config `cleanup.trust_pid_namespace`)."""
    me = str(os.getpid())
    try:
        entries = os.listdir(PROC)
        os.readlink(f"{PROC}/{me}/cwd")
    except OSError as err:
        return f"the process table {PROC} cannot be read ({err.strerror or err})"
    if me not in entries:
        return f"{PROC} does not list this process"
    try:
        namespace = os.readlink(f"{PROC}/self/ns/pid")
    except OSError:
        namespace = INITIAL_PID_NAMESPACE
    if namespace != INITIAL_PID_NAMESPACE and not trust_namespace:
        return (
            "laneboard runs in a PID namespace of its own (a container?), so processes outside "
            "it are invisible; set cleanup.trust_pid_namespace = true if none writes here"
        )
    return None


def inside(directory: str, *, besides: Iterable[int] = ()) -> list[str]:
    """Processes (other than this one) whose working directory or an open file lies inside
    `directory`, as `pid N (name): cwd|open file PATH`. Processes whose /proc entries cannot be
    read (another user's) are not seen; laneboard runs as the operator, like the agents. Callers
    check `unseen()` first: an unreadable table yields an empty list here. `besides` are
    processes named already (an agent's pane): they and their descendants are left out (one
    agent is one blocker, not its shell, sandbox and program); a process that left their tree
    (daemonized, `setsid` and reparented) is listed. This process's own `git` children are
    not: they are its own reads (the board's look at a worktree while it removes it), never
    work of anyone else's, and laneboard runs no git that writes a worktree outside its lane."""
    named = set(besides)
    root = os.path.realpath(directory)
    prefix = root.rstrip("/") + "/"
    found: list[str] = []
    me = os.getpid()
    try:
        entries = os.listdir(PROC)
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit() or int(entry) == me:
            continue
        base = f"{PROC}/{entry}"
        try:
            with open(f"{base}/comm") as handle:
                name = handle.read().strip()
        except OSError:
            continue
        hit = _first_inside(base, root, prefix)
        if hit is None:
            continue
        above = ancestors(int(entry))
        if (named and above & named) or (name == "git" and me in above):
            continue  # an agent named already; this process's own git (the board's reads)
        found.append(f"pid {entry} ({name}): {hit}")
    return found


def _first_inside(base: str, root: str, prefix: str) -> str | None:
    def under(path: str) -> bool:
        return path == root or path.startswith(prefix)

    try:
        cwd = os.readlink(f"{base}/cwd")
    except OSError:
        cwd = ""
    if under(cwd):
        return f"cwd {cwd}"
    try:
        fds = os.listdir(f"{base}/fd")
    except OSError:
        return None
    for fd in fds:
        try:
            target = os.readlink(f"{base}/fd/{fd}")
        except OSError:
            continue
        if under(target):
            return f"open file {target}"
    return None


def members(
    *, pgid: int | None = None, sid: int | None = None, since: int | None = None
) -> list[int]:
    """Live processes in process group `pgid` or session `sid` (from `/proc/<pid>/stat` fields
    5 and 6), started no earlier than `since` (clock ticks), so a recycled id is not confused
    with the one recorded. Zombies are not counted: they have exited."""
    found: list[int] = []
    try:
        entries = os.listdir(PROC)
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"{PROC}/{entry}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] in (b"Z", b"X"):
            continue
        group, session, started = int(fields[2]), int(fields[3]), int(fields[19])
        in_it = (pgid is not None and group == pgid) or (sid is not None and session == sid)
        if in_it and (since is None or started >= since):
            found.append(int(entry))
    return found


ENVIRON_LIMIT = 8 << 20
"""Most bytes of one process's environment read (the kernel allows a quarter of the stack limit,
2 MiB with the usual 8 MiB, for arguments and environment together); past it nothing is seen."""


def environ_of(pid: int, names: Sequence[str]) -> dict[str, str] | None:
    """The values `names` have in the environment `pid`'s program was started with (what
    `/proc/<pid>/environ` shows; not what it set later), the first of each as `getenv` finds
    it; None when it cannot be read (the process is gone or another user's) or reads empty (a
    kernel thread's, or one read in the middle of an exec)."""
    try:
        with open(f"{PROC}/{pid}/environ", "rb") as handle:
            data = b"\0" + handle.read(ENVIRON_LIMIT)
    except OSError:
        return None
    if len(data) == 1:
        return None
    found: dict[str, str] = {}
    for name in names:
        key = b"\0" + name.encode() + b"="
        at = data.find(key)
        if at < 0:
            continue
        begin = at + len(key)
        end = data.find(b"\0", begin)
        found[name] = data[begin : end if end >= 0 else len(data)].decode(errors="replace")
    return found


class Marked(NamedTuple):
    """A live process whose environment carries some of the variables asked for."""

    pid: int
    start: int
    pgid: int
    sid: int
    values: dict[str, str]


_ENVIRONS: dict[tuple[int, int], dict[str, str] | None] = {}
"""What `marked` read of each process, by (pid, start time) and for `_ENVIRON_NAMES` (None: not
this user's). A program keeps the environment it was started with, so each is read once; a
process that execs another program keeps its pid and start time, and keeps what was first found
in it too. What a young process lacks is not kept (`SETTLE_TICKS`)."""
_ENVIRON_NAMES: tuple[str, ...] = ()
SETTLE_TICKS = 100
"""How young (clock ticks, a second at the usual 100 a second) a process is when what it lacks
is read again at the next look: between its fork and its exec it still shows its parent's
environment, not the one it was given."""


def _ticks() -> int:
    """Now, in the clock ticks since boot that `/proc/<pid>/stat` counts start times in."""
    clock = getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC)
    return int(time.clock_gettime(clock) * os.sysconf("SC_CLK_TCK"))


KERNEL_THREAD = 0x00200000
"""`PF_KTHREAD` in `/proc/<pid>/stat`'s flags: a kernel thread (root's, with no environment)."""
EXEC_WAIT = 2.0
"""Seconds a process of this user may read empty (in the middle of an exec: its new command
line shows a moment before its new environment) before it is taken as carrying nothing."""


def _settled_environ(pid: int, names: Sequence[str]) -> tuple[dict[str, str] | None, bool]:
    """`environ_of` of one of this user's processes, read again while it reads empty and still
    lives (caught in the middle of an exec, on a loaded machine for a while): a lease's
    `setsid` child read then would count as gone, and its lane be freed while it works. The
    flag: it read empty for all of `EXEC_WAIT` (its environment is empty: keep that answer)."""
    end = time.monotonic() + EXEC_WAIT
    values = environ_of(pid, names)
    while values is None and os.path.exists(f"{PROC}/{pid}/stat"):
        if time.monotonic() >= end:
            return None, True
        time.sleep(0.002)
        values = environ_of(pid, names)
    return values, False


def marked(names: tuple[str, ...], *, since: int) -> list[Marked]:
    """Live processes of this user, started no earlier than `since` (clock ticks since boot),
    whose environment has any of `names`. Only younger processes of this user have their
    environment read at all, and each only once (`_ENVIRONS`), so a look at a table of
    hundreds of processes costs one `stat` read each. Zombies have exited: never counted."""
    global _ENVIRON_NAMES
    if names != _ENVIRON_NAMES:
        _ENVIRONS.clear()
        _ENVIRON_NAMES = names
    found: list[Marked] = []
    live: set[tuple[int, int]] = set()
    uid = os.getuid()
    settled = _ticks() - SETTLE_TICKS
    try:
        entries = os.listdir(PROC)
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"{PROC}/{entry}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
            if fields[0] in (b"Z", b"X"):
                continue
            pgid, sid, started = int(fields[2]), int(fields[3]), int(fields[19])
            kernel = int(fields[6]) & KERNEL_THREAD
        except (OSError, IndexError, ValueError):
            continue
        key = (int(entry), started)
        live.add(key)
        if started < since or kernel:
            continue
        if key in _ENVIRONS:
            values = _ENVIRONS[key]
        else:
            try:
                mine = os.stat(f"{PROC}/{entry}").st_uid == uid
            except OSError:
                continue
            values, waited = _settled_environ(key[0], names) if mine else (None, False)
            if not mine or waited or (values is not None and (values or started <= settled)):
                _ENVIRONS[key] = values
        if values:
            found.append(Marked(key[0], started, pgid, sid, values))
    for gone in _ENVIRONS.keys() - live:
        del _ENVIRONS[gone]
    return found


def command_line(pid: int) -> str:
    """`pid`'s command line as a shell would quote it (its name when it has none, a kernel
    thread's), or `?` when it is gone."""
    try:
        with open(f"{PROC}/{pid}/cmdline", "rb") as handle:
            raw = handle.read(4096)
        if raw:
            return shlex.join(a.decode(errors="replace") for a in raw.rstrip(b"\0").split(b"\0"))
        with open(f"{PROC}/{pid}/comm") as text:
            return text.read().strip()
    except OSError:
        return "?"


def group_alive(pgid: int | None, sid: int | None, since: int | None) -> bool:
    """Some process of the group (or session) a command started still runs."""
    if pgid is None and sid is None:
        return False
    if sid is None and pgid is not None:
        try:
            os.killpg(pgid, 0)  # cheap: no group at all means no member at all
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
    return bool(members(pgid=pgid, sid=sid, since=since))


def child_named(parent: int, inner: int) -> int | None:
    """The child of `parent` that its own PID namespace numbers `inner` (a sandbox's process,
    as this side numbers it), from `/proc/<pid>/status`'s `NSpid`; None when there is none."""
    try:
        threads = os.listdir(f"{PROC}/{parent}/task")
    except OSError:
        return None
    for tid in threads:
        try:
            with open(f"{PROC}/{parent}/task/{tid}/children") as handle:
                children = handle.read().split()
        except OSError:
            continue
        for child in children:
            try:
                with open(f"{PROC}/{child}/status") as handle:
                    status = handle.read()
            except OSError:
                continue
            for line in status.splitlines():
                if line.startswith("NSpid:") and line.split()[-1] == str(inner):
                    return int(child)
    return None


def wait_gone(leader: int, since: int | None, *, deadline: float) -> bool:
    """Wait until no live process is left in the process group or session `leader` led (one
    ended by the kernel, a sandbox's, is gone a moment after its leader); True when none is,
    False when some still are after `deadline` seconds (the caller goes on either way)."""
    end = time.monotonic() + deadline
    while members(pgid=leader, sid=leader, since=since):
        if time.monotonic() > end:
            return False
        time.sleep(0.01)
    return True
