"""The channel's two ends: the server laneboard runs outside a sandbox (in the warden of an
agent's pane, or in `laneboard exec` for its lane command), and the client a `laneboard` inside
the sandbox talks through (DESIGN.md section 5a; the frames and the accepted requests are in
`core.domain.channel`).

The server binds `channel.sock` in a directory of its own (mode 0700, in laneboard's state,
which no sandbox sees) that is mounted read-only into its one sandbox. Who calls is the
server's own fact: its task. Each connection is served on a thread of its own; a bad request
(garbage, a frame too long, a closed socket, an unknown request) gets one refusal and the
connection closes, and the server goes on. A `run` request runs `laneboard ARGV` outside, as a
process of the server's, with the server's own environment plus the caller's task
(`CALLER_ENV`, which scopes it), in the caller's worktree; its stdout and stderr come back as
they are written and its exit code last. If the caller goes away, the command is interrupted
(SIGINT: provisioning rolls back). A `lease` request holds the caller's own worktree lane while
the caller runs its command in the sandbox (`LeaseDesk`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from laneboard.core.domain.channel import (
    CALLER_ENV,
    CHUNK,
    MAX_REQUEST,
    ChannelError,
    Decoder,
    Op,
    Request,
    document,
    frame,
    message,
    request,
)
from laneboard.core.domain.confine import CHANNEL_ENV, CHANNEL_SOCKET
from laneboard.core.domain.errors import LaneboardError
from laneboard.core.domain.lanes import LEASE_ENV, LEDGER_ENV, MARKERS

FIRST_FRAME_SECONDS = 30.0
"""How long a connection may take to send its request."""


def peer_pid(conn: socket.socket) -> int:
    """The connecting process, as this side's PID namespace numbers it (the kernel translates
    it: a caller's own claims are never read)."""
    raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, _uid, _gid = struct.unpack("3i", raw)
    return int(pid)


class Connection:
    """One caller's connection as the server sees it: frames in, frames out."""

    def __init__(self, conn: socket.socket) -> None:
        self.conn = conn
        self.decoder = Decoder(MAX_REQUEST)
        self.pending: list[tuple[bytes, bytes]] = []
        self.send_lock = threading.Lock()
        self.closed = False

    def send(self, data: bytes) -> bool:
        with self.send_lock:
            if self.closed:
                return False
            try:
                self.conn.sendall(data)
                return True
            except OSError:
                self.closed = True
                return False

    def answer(self, **fields: Any) -> bool:
        return self.send(message(fields))

    def next(self) -> dict[str, Any] | None:
        """The next request or control message; None when the caller closed."""
        while not self.pending:
            try:
                data = self.conn.recv(65536)
            except OSError:
                return None
            if not data:
                return None
            self.pending += self.decoder.feed(data)
        kind, payload = self.pending.pop(0)
        return document(kind, payload)


class Server:
    """Serves one caller (its task) on `<directory>/channel.sock` until `close()`."""

    def __init__(
        self,
        directory: Path,
        task_id: str,
        task_name: str,
        *,
        cwd: str,
        env: dict[str, str],
        leases: Callable[[Connection, Request, int], None] | None = None,
        ledger: Path | None = None,
    ) -> None:
        self.directory = directory
        self.ledger = ledger
        self.task_id = task_id
        self.task_name = task_name
        self.cwd = cwd
        self.env = {k: v for k, v in env.items() if k not in (*_SANDBOX_ONLY, *MARKERS)}
        self.env[CALLER_ENV] = task_id
        self.env["LANEBOARD_TASK"] = task_id
        self.leases = leases
        self.sock = bind(directory)
        self._thread = threading.Thread(target=self._accept, name="channel", daemon=True)
        self._stopped = False

    def start(self) -> Server:
        self._thread.start()
        return self

    def close(self) -> None:
        self._stopped = True
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        with contextlib.suppress(OSError):
            (self.directory / CHANNEL_SOCKET).unlink()

    def _accept(self) -> None:
        while not self._stopped:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                if self._stopped:
                    return
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            link = Connection(conn)
            try:
                pid = peer_pid(conn)
                conn.settimeout(FIRST_FRAME_SECONDS)
                first = link.next()
                conn.settimeout(None)
                if first is None:
                    return
                asked = request(first)
                if asked.op is Op.WHOAMI:
                    link.answer(task=self.task_id, name=self.task_name)
                elif asked.op is Op.RUN:
                    self._run(link, asked, pid)
                elif self.leases is None:
                    link.answer(refused="this channel holds no lanes")
                else:
                    self.leases(link, asked, pid)
            except (ChannelError, LaneboardError) as err:
                link.answer(refused=str(err))
            except (OSError, ValueError) as err:
                link.answer(refused=f"the channel failed: {err}")
            finally:
                # The answer is the end: the caller sees it closed, and a thread still
                # reading from it (`_listen`) wakes (a plain close would leave both waiting).
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)

    def _run(self, link: Connection, asked: Request, peer: int) -> None:
        env = dict(self.env)
        chain = self._claimed(asked.outer, peer)
        if chain:
            # The caller runs inside a lane command: the command run for it is nested in the
            # same lease (it must not wait for a lane that waits for it).
            env[LEASE_ENV] = chain
            if self.ledger is not None:
                env[LEDGER_ENV] = os.path.realpath(self.ledger)
        proc = subprocess.Popen(
            [sys.executable, "-P", "-m", "laneboard.tui.cli", *asked.argv],
            cwd=self.cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        pumps = [
            threading.Thread(target=_pump, args=(proc.stdout, b"O", link), daemon=True),
            threading.Thread(target=_pump, args=(proc.stderr, b"E", link), daemon=True),
        ]
        for pump in pumps:
            pump.start()
        listener = threading.Thread(target=_listen, args=(link, proc), daemon=True)
        listener.start()
        code = proc.wait()
        for pump in pumps:
            pump.join()
        link.answer(exit=code if code >= 0 else 128 - code)

    def _claimed(self, chain: str, peer: int) -> str:
        """The leases of `chain` (a caller's `$LANEBOARD_LEASE`) that really are around the
        caller: running, with their command among the caller's ancestors."""
        if not chain or self.ledger is None:
            return ""
        from laneboard.core.adapters import procs
        from laneboard.core.adapters.db import Database
        from laneboard.core.adapters.leases import lease_from_row
        from laneboard.core.domain.lanes import LeaseState

        above = procs.ancestors(peer)
        kept: list[str] = []
        database = Database(self.ledger)
        try:
            for named in chain.split(","):
                if not named.isdigit():
                    continue
                row = database.conn.execute(
                    "SELECT * FROM leases WHERE seq = ?", (int(named),)
                ).fetchone()
                if row is None:
                    continue
                lease = lease_from_row(row)
                if lease.state is LeaseState.RUNNING and lease.child_pid in above:
                    kept.append(named)
        finally:
            database.close()
        return ",".join(kept)


_SANDBOX_ONLY = ("GIT_OBJECT_DIRECTORY", "GIT_ALTERNATE_OBJECT_DIRECTORIES", CHANNEL_ENV)


def _pump(stream: Any, kind: bytes, link: Connection) -> None:
    while chunk := stream.read1(CHUNK):
        link.send(frame(kind, chunk))
    stream.close()


def _listen(link: Connection, proc: subprocess.Popen[bytes]) -> None:
    """The caller's Ctrl-C passes on; the caller gone interrupts the command."""
    while True:
        try:
            said = link.next()
        except (ChannelError, OSError):
            said = None
        if said is None:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGINT)
            return
        if said.get("op") == "signal" and said.get("signal") in ("INT", "TERM"):
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(getattr(signal, f"SIG{said['signal']}"))


def _say(link: Connection, **fields: Any) -> None:
    link.answer(**fields)


def bind(directory: Path) -> socket.socket:
    """A listening socket at `<directory>/channel.sock` (the directory made private to the
    user). Bound through the directory's descriptor, so a long state path does not hit the
    socket path limit."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(directory, 0o700)
    with contextlib.suppress(FileNotFoundError):
        (directory / CHANNEL_SOCKET).unlink()
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(f"/proc/self/fd/{fd}/{CHANNEL_SOCKET}")
    finally:
        os.close(fd)
    sock.listen(16)
    return sock


# --- the client, inside a sandbox -----------------------------------------------------------


class Client:
    """One request to the channel and what comes back."""

    def __init__(self, path: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.sock.connect(path)
        except OSError as err:
            self.sock.close()
            raise LaneboardError(f"laneboard's channel does not answer ({path}): {err}") from None
        self.decoder = Decoder(1 << 30)
        self.pending: list[tuple[bytes, bytes]] = []

    def send(self, **fields: Any) -> None:
        self.sock.sendall(message(fields))

    def receive(self) -> tuple[bytes, bytes] | None:
        """The next frame; None once the server closed. Interruptible (Ctrl-C) without losing
        a frame."""
        while not self.pending:
            data = self.sock.recv(65536)
            if not data:
                return None
            self.pending += self.decoder.feed(data)
        return self.pending.pop(0)

    def answer(self) -> dict[str, Any]:
        """The next control message; a refusal raised as the error it names."""
        got = self.receive()
        if got is None:
            raise LaneboardError("laneboard's channel closed without an answer")
        found = document(*got)
        if "refused" in found:
            error = LaneboardError(str(found["refused"]))
            error.exit_code = int(found.get("code", 1))
            raise error
        return found

    def close(self) -> None:
        self.sock.close()


def whoami(path: str) -> dict[str, Any]:
    """The caller's task as its channel knows it (`task`, `name`)."""
    client = Client(path)
    try:
        client.send(op="whoami")
        return client.answer()
    finally:
        client.close()


def run(path: str, argv: list[str]) -> int:
    """`laneboard ARGV` run outside through the channel: its output passed on as it comes,
    Ctrl-C passed on to it; its exit code."""
    client = Client(path)
    out = sys.stdout.buffer
    err = sys.stderr.buffer
    try:
        client.send(op="run", argv=argv, outer=os.environ.get(LEASE_ENV, ""))
        while True:
            try:
                got = client.receive()
            except KeyboardInterrupt:
                with contextlib.suppress(OSError):
                    client.send(op="signal", signal="INT")
                continue
            if got is None:
                raise LaneboardError("laneboard's channel closed before the command ended")
            kind, payload = got
            if kind == b"O":
                out.write(payload)
                out.flush()
            elif kind == b"E":
                err.write(payload)
                err.flush()
            else:
                found = document(kind, payload)
                if "refused" in found:
                    raise LaneboardError(str(found["refused"]))
                if "exit" in found:
                    return int(found["exit"])
    finally:
        client.close()


# --- leases for a caller's lane commands ----------------------------------------------------


class LeaseDesk:
    """The server side of `lease`: the caller's `laneboard exec --lane` holds the caller's own
    worktree lane, and only that one, while it runs its command in the sandbox.

    The lease is held by this process for the caller, with the caller's process (as this side
    numbers it) as its command once the caller says it started one; a caller that claims to run
    under an outer lease (`$LANEBOARD_LEASE`) is checked against the process tree like any
    process outside. A caller that goes away while waiting withdraws its lease; one that goes
    away while running releases it once its command's group is gone."""

    def __init__(
        self, ledger: Path, task_id: str, task_name: str, repo_id: int, slots: int, cap: int | None
    ) -> None:
        self.ledger = ledger
        self.task_id = task_id
        self.task_name = task_name
        self.repo_id = repo_id
        self.slots = slots
        self.cap = cap

    def __call__(self, link: Connection, asked: Request, peer: int) -> None:
        import queue

        from laneboard.core.adapters import procs
        from laneboard.core.adapters.db import Database
        from laneboard.core.adapters.leases import Cancel, LeaseStore, hold
        from laneboard.core.domain.errors import WaitTimeout
        from laneboard.core.domain.lanes import LeaseKind

        if asked.lane not in (self.task_id, self.task_name):
            raise ChannelError(
                f"lane {asked.lane} is not {self.task_name}'s: a confined command runs only in "
                "its own task's lane"
            )
        said: queue.Queue[dict[str, Any] | None] = queue.Queue()
        cancel = Cancel()

        def listen() -> None:
            while True:
                try:
                    got = link.next()
                except (ChannelError, OSError):
                    got = None
                said.put(got)
                if got is None:
                    cancel.cancel()
                    return

        threading.Thread(target=listen, daemon=True).start()
        database = Database(self.ledger)
        command = list(asked.argv) or ["?"]
        try:
            store = LeaseStore(database, self.slots)
            with hold(
                store,
                repo_id=self.repo_id,
                lane=self.task_id,
                kind=LeaseKind.EXEC,
                command=command,
                repo_cap=self.cap,
                timeout=asked.timeout,
                on_wait=lambda lease: _say(link, waiting=str(lease.wait_reason or "waiting")),
                cancel=cancel,
                claim=(asked.outer, peer),
            ) as held:
                link.answer(
                    admitted=held.lease.seq,
                    inherited=held.inherited,
                    ledger=store.ledger,
                )
                while True:
                    got = said.get()
                    if got is None:
                        break
                    if got.get("op") == "started" and isinstance(got.get("pid"), int):
                        outer = procs.child_named(peer, got["pid"])
                        if outer is not None:
                            held.record_child(outer, bool(got.get("session")))
                    elif got.get("op") == "exit" and isinstance(got.get("code"), int):
                        held.exit_code = got["code"]
                        break
        except WaitTimeout as err:
            link.answer(refused=str(err), code=err.exit_code)
        finally:
            cancel.close()
            database.close()
