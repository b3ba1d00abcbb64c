"""ssh to a host: one multiplexed master connection per host (`ControlMaster`), opened on first
use with a timeout, shared by every command laneboard runs there (DESIGN.md section 13).

What it owns: the master's control socket (in a directory of the state dir, or, when that path
is too long for a Unix socket, in a private directory under the system's temporary dir named by
it), and the ssh client processes it starts. It never stores a key or a password (`BatchMode`:
ssh never asks), and with a host's `ssh_config` it reads that file alone (`ssh -F`).

Failures: ssh's own failure (exit 255: no route, refused, authentication, the connection lost)
and a read that outlives its timeout are `Unreachable`, with ssh's reason. A remote command's
own exit code is passed on as it is. A master that died (killed, the network dropped) is found
dead by `ssh -O check` and opened again by the next command; a command that finds the socket
dead meanwhile connects on its own (`ControlMaster=no` falls back to a direct connection).
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import subprocess
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from laneboard.core.adapters.git import run_git
from laneboard.core.adapters.locks import held
from laneboard.core.domain.errors import GitError
from laneboard.core.domain.hosts import (
    SSH_FAILED,
    Host,
    Unreachable,
    control_argv,
    control_options,
    master_argv,
    remote_argv,
    ssh_reason,
)

PERSIST = 600.0
"""Seconds the master stays up after its last command (the board keeps it busy)."""
STREAM_END = 2.0
"""Seconds a stream's ssh client has to end once its stdin is closed, before it is killed."""
CHECK_TIMEOUT = 5.0
"""Seconds `ssh -O check` may take: it only talks to the local socket."""
_SOCKET_MAX = 100
"""A Unix socket path must fit in 108 bytes; `%C` adds 41."""

Sink = Callable[[bytes], None]


def control_dir(state_dir: Path) -> Path:
    """Where the control sockets live: `<state dir>/ssh`, or a private directory under the
    temporary dir named by a hash of it when that path is too long for a socket."""
    import hashlib  # (only with hosts: 1.5 ms to import)

    wanted = state_dir / "ssh"
    if len(os.fsencode(wanted)) + 41 <= _SOCKET_MAX:
        return wanted
    digest = hashlib.sha256(os.fsencode(state_dir.resolve())).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"laneboard-ssh-{os.getuid()}-{digest}"


def _private_dir(path: Path) -> None:
    """Make `path` a directory only this user can enter (the sockets let anyone who reaches
    them run commands as the user on the host), refusing one someone else made."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    seen = os.lstat(path)
    if not os.path.isdir(path) or os.path.islink(path) or seen.st_uid != os.getuid():
        raise Unreachable(f"{path}: not a directory of this user's: refusing its ssh sockets")
    if seen.st_mode & 0o077:
        os.chmod(path, 0o700)


class Connection:
    """The ssh connection to one host. Safe to use from several threads: each command is an ssh
    client process of its own over the shared master; opening the master is serialized."""

    def __init__(self, host: Host, state_dir: Path, *, persist: float = PERSIST) -> None:
        self.host = host
        self.dir = control_dir(state_dir)
        self.persist = persist
        self._opening = threading.Lock()

    @property
    def control_path(self) -> str:
        """The master's socket: one per host name and destination (a host whose destination
        changed gets a new master, never the old one's connection)."""
        import hashlib

        key = f"{self.host.destination}\0{self.host.ssh_config or ''}"
        return str(self.dir / f"{self.host.name}-{hashlib.sha256(key.encode()).hexdigest()[:8]}")

    def _env(self) -> dict[str, str]:
        # A terminal's SSH_ASKPASS must not pop up a dialog: BatchMode already says no, this
        # keeps an askpass helper from being started at all.
        env = dict(os.environ)
        env.pop("SSH_ASKPASS", None)
        env["SSH_ASKPASS_REQUIRE"] = "never"
        return env

    def master_pid(self) -> int | None:
        """The pid of the live master connection, or None when there is none."""
        try:
            done = subprocess.run(
                control_argv(self.host, self.control_path, "check"),
                capture_output=True,
                text=True,
                timeout=CHECK_TIMEOUT,
                env=self._env(),
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        match = re.search(r"pid=(\d+)", done.stderr)
        return int(match[1]) if done.returncode == 0 and match else None

    def open(self) -> None:
        """Open the master connection unless one is up; `Unreachable` when the host does not
        answer within its connect timeout."""
        with self._opening:
            if self.master_pid() is not None:
                return
            _private_dir(self.dir)
            # Between processes too: two masters for one socket would leave the loser running
            # as a plain connection in the background.
            with held(f"ssh-{self.host.name}"):
                if self.master_pid() is None:
                    self._open_master()

    def _open_master(self) -> None:
        # A master killed outright leaves its socket behind; ssh would not take the path over.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.control_path)
        # The master forks once authenticated and keeps the stderr it was given: a file,
        # never a pipe (a pipe would stay open, and a reader wait, as long as it lives).
        with tempfile.TemporaryFile(dir=self.dir) as errors:
            try:
                done = subprocess.run(
                    master_argv(self.host, self.control_path, self.persist),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=errors,
                    timeout=self.host.connect_timeout + 5,
                    env=self._env(),
                    check=False,
                )
            except subprocess.TimeoutExpired:
                raise self._unreachable(f"no answer in {self.host.connect_timeout:g}s") from None
            except OSError as err:
                raise self._unreachable(f"ssh: {err.strerror}") from None
            if done.returncode != 0:
                errors.seek(0)
                said = errors.read().decode(errors="replace")
                raise self._unreachable(ssh_reason(said))

    def close(self) -> None:
        """End the master connection (commands under way on it end too)."""
        subprocess.run(
            control_argv(self.host, self.control_path, "exit"),
            capture_output=True,
            timeout=CHECK_TIMEOUT,
            env=self._env(),
            check=False,
        )

    def _unreachable(self, why: str) -> Unreachable:
        return Unreachable(f"host {self.host.name} ({self.host.destination}) unreachable: {why}")

    def run(
        self, words: Sequence[str], *, timeout: float | None = None
    ) -> subprocess.CompletedProcess[bytes]:
        """Run the host's laneboard with `words`, its output captured; `Unreachable` when ssh
        failed or no answer came within `timeout` (default: the host's)."""
        return self._captured(
            remote_argv(self.host, self.control_path, words, tty=False),
            timeout if timeout is not None else self.host.timeout,
        )

    def run_shell(
        self, line: str, *, timeout: float | None = None, input: bytes | None = None
    ) -> subprocess.CompletedProcess[bytes]:
        """Run `line` with the host's shell (a probe of `host check`, an install), output
        captured; `input` is its standard input (none by default)."""
        argv = [
            "ssh",
            *control_options(self.host, self.control_path),
            "-o",
            "ControlMaster=no",
            "-T",
            self.host.destination,
            "--",
            line,
        ]
        return self._captured(
            argv, timeout if timeout is not None else self.host.timeout, input=input
        )

    def _captured(
        self, argv: list[str], timeout: float, *, input: bytes | None = None
    ) -> subprocess.CompletedProcess[bytes]:
        self.open()
        try:
            done = subprocess.run(
                argv,
                stdin=subprocess.DEVNULL if input is None else None,
                input=input,
                capture_output=True,
                timeout=timeout,
                env=self._env(),
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise self._unreachable(f"no answer in {timeout:g}s") from None
        if done.returncode == SSH_FAILED:
            raise self._unreachable(ssh_reason(done.stderr.decode(errors="replace")))
        return done

    def stream(self, words: Sequence[str]) -> subprocess.Popen[bytes]:
        """Start the host's laneboard with `words` and hand back the ssh client: its stdout is
        what the command prints, as it prints it; closing its stdin ends the command there (it
        reads its standard input to learn that its reader went away). `Unreachable` when the
        master cannot be opened; what ssh says later is on the process's stderr."""
        self.open()
        return subprocess.Popen(
            remote_argv(self.host, self.control_path, words, tty=False),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=self._env(),
        )

    def end(self, process: subprocess.Popen[bytes]) -> None:
        """End a stream: its stdin closed (the command there ends), then its ssh client, killed
        if it has not ended within `STREAM_END` seconds."""
        with contextlib.suppress(OSError):
            if process.stdin is not None:
                process.stdin.close()
        try:
            process.wait(timeout=STREAM_END)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def unreachable(self, said: str) -> Unreachable:
        """The host as unreachable, for the reason in what ssh said (its stderr)."""
        return self._unreachable(ssh_reason(said))

    def fetch(self, root: Path, repo: str, branch: str, into: str, timeout: float) -> str:
        """Fetch `branch` of the host's repository at `repo` into the ref `into` of the local
        repository `root`, over this connection (git's ssh is this host's ssh, with its config
        file and master socket), objects checked (`transfer.fsckObjects`) and no hook run; the
        SHA it fetched. `GitError` with git's reason when the fetch failed."""
        from laneboard.core.adapters.integrate import network

        self.open()
        ssh = shlex.join(
            ["ssh", *control_options(self.host, self.control_path), "-o", "ControlMaster=no"]
        )
        done = network(
            [
                "-c", f"core.sshCommand={ssh}",
                "-c", "transfer.fsckObjects=true",
                "fetch", "--no-tags", "--no-write-fetch-head", "--no-recurse-submodules",
                f"{self.host.destination}:{repo}", f"+refs/heads/{branch}:{into}",
            ],
            root,
            timeout,
        )  # fmt: skip
        if done.returncode != 0:
            said = done.stderr.decode(errors="replace").strip().splitlines()
            raise GitError(
                f"git fetch from host {self.host.name}: {said[-1] if said else 'failed'}"
            )
        found = run_git(
            ["rev-parse", "--verify", "--end-of-options", f"{into}^{{commit}}"], cwd=root
        )
        return found.stdout.decode().strip()

    def forward(self, words: Sequence[str], *, tty: bool, out: Sink, err: Sink) -> int:
        """Run the host's laneboard with `words` as if here: its stdout and stderr passed on as
        they come (to `out` and `err`; with `tty`, this terminal is its terminal), its exit code
        returned. ssh's own failure is `Unreachable`; what ssh said then is its reason, never
        passed on as if the command had said it."""
        self.open()
        argv = remote_argv(self.host, self.control_path, words, tty=tty)
        if tty:
            code = subprocess.call(argv, env=self._env())
            if code == SSH_FAILED:
                raise self._unreachable("the connection failed or was lost")
            return code
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=self._env(),
        )
        assert process.stdout is not None and process.stderr is not None
        held: list[bytes] = []

        def stderr_lines() -> None:
            assert process.stderr is not None
            for line in process.stderr:
                # laneboard's own lines (and their indented details) go on at once; anything
                # else may be ssh's, which is only known once ssh says it failed.
                if line.startswith((b"laneboard: ", b"  ")) and not held:
                    err(line)
                else:
                    held.append(line)

        reader = threading.Thread(target=stderr_lines, daemon=True)
        reader.start()
        while chunk := os.read(process.stdout.fileno(), 65536):
            out(chunk)
        code = process.wait()
        reader.join()
        if code == SSH_FAILED:
            raise self._unreachable(ssh_reason(b"".join(held).decode(errors="replace")))
        for line in held:
            err(line)
        return code
