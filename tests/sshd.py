"""A real OpenSSH server on the loopback address for the hosts tests, and the "remote" laneboard
it serves: the same machine, reached only through ssh, with state of its own.

Everything is made in the test's temporary directory: the server's host key, the client key
it authorizes, the client's ssh config file (passed as `ssh -F`, so neither `~/.ssh` nor
`/etc/ssh/ssh_config` is read) with a known-hosts file that holds exactly the server's key, and
a wrapper that runs laneboard on the "host" with its own `HOME`, `LANEBOARD_HOME`, git config
and tmux socket (sshd gives a session the login's environment, not the test's). The login's
shell does not read its rc files (`SetEnv SHLVL=1`): on the development machine root's
`.bashrc` runs `pyenv rehash`, which waits on a lock other processes hold.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, CliResult, run_cli

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
DEADLINE = 20.0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _descendants(root: int) -> list[int]:
    """Every live process below `root` (the server's connection processes), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rpartition(")")[2].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


class Sshd:
    """One sshd on 127.0.0.1:`port`, started and stopped by the test (`stop` ends every
    connection it serves too, as a host that goes away does)."""

    def __init__(self, where: Path) -> None:
        self.where = where
        where.mkdir(parents=True)
        for key in ("host_key", "client_key"):
            subprocess.run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(where / key)],
                check=True,
            )
        shutil.copy(where / "client_key.pub", where / "authorized_keys")
        self.port = _free_port()
        self.process: subprocess.Popen[bytes] | None = None
        user = os.environ.get("USER") or subprocess.check_output(["id", "-un"], text=True).strip()
        (where / "sshd_config").write_text(
            f"Port {self.port}\nListenAddress 127.0.0.1\nHostKey {where / 'host_key'}\n"
            f"AuthorizedKeysFile {where / 'authorized_keys'}\nPidFile {where / 'sshd.pid'}\n"
            "StrictModes no\nUsePAM no\nPasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\n"
            "LogLevel ERROR\nMaxStartups 100\nMaxSessions 100\n"
            # bash started by sshd reads the login's ~/.bashrc unless it is not a top-level
            # shell: the test's commands must not run (or wait on) the account's own rc files.
            "SetEnv SHLVL=1\n"
        )
        host_key = (where / "host_key.pub").read_text().split()
        (where / "known_hosts").write_text(f"[127.0.0.1]:{self.port} {host_key[0]} {host_key[1]}\n")
        self.config = where / "ssh_config"
        self.config.write_text(
            "Host remote\n  HostName 127.0.0.1\n"
            f"  Port {self.port}\n  User {user}\n  IdentityFile {where / 'client_key'}\n"
            "  IdentitiesOnly yes\n"
            f"  UserKnownHostsFile {where / 'known_hosts'}\n  GlobalKnownHostsFile /dev/null\n"
            "  StrictHostKeyChecking yes\n"
        )

    def set_env(self, env: dict[str, str]) -> None:
        """Give every session `env` (sshd's one `SetEnv` line): a program run there without the
        host's wrapper still has the host's isolated HOME and state. Before `start`."""
        words = " ".join(f"{key}={value}" for key, value in env.items())
        assert " " not in "".join(env.values()), env
        config = self.where / "sshd_config"
        config.write_text(
            config.read_text().replace("SetEnv SHLVL=1\n", f"SetEnv SHLVL=1 {words}\n")
        )

    def start(self) -> None:
        if os.geteuid() == 0:  # sshd run by root wants its privilege separation directory
            Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        self.process = subprocess.Popen(
            [SSHD, "-D", "-f", str(self.where / "sshd_config"), "-E", str(self.where / "log")],
            start_new_session=True,
        )
        end = time.monotonic() + DEADLINE
        while True:
            with socket.socket() as probe, contextlib.suppress(OSError):
                probe.connect(("127.0.0.1", self.port))
                return
            if self.process.poll() is not None or time.monotonic() > end:
                log = (self.where / "log").read_text() if (self.where / "log").exists() else ""
                raise AssertionError(f"sshd did not start: {log}")
            time.sleep(0.02)

    def stop(self) -> None:
        """Kill the server and every connection it serves (their sessions' commands end too)."""
        if self.process is None:
            return
        for pid in [*_descendants(self.process.pid), self.process.pid]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.process.wait()
        self.process = None


class Remote:
    """The "host": laneboard run by `wrapper` with state of its own, reached over `sshd`."""

    def __init__(self, where: Path, sshd: Sshd) -> None:
        self.sshd = sshd
        self.home = where / "home"
        self.home.mkdir(parents=True)
        self.lbhome = where / "lbhome"
        self.socket = f"lb-remote-{os.getpid()}-{where.parent.name}"
        gitconfig = self.home / ".gitconfig"
        gitconfig.write_text(
            "[user]\n\tname = Remote Operator\n\temail = remote@example.invalid\n"
            "[init]\n\tdefaultBranch = main\n"
        )
        self.env = {
            "HOME": str(self.home),
            "LANEBOARD_HOME": str(self.lbhome),
            "LANEBOARD_TMUX_SOCKET": self.socket,
            "GIT_CONFIG_GLOBAL": str(gitconfig),
            "GIT_CONFIG_NOSYSTEM": "1",
            "XDG_CONFIG_HOME": str(self.home / ".config"),
            "XDG_STATE_HOME": str(self.home / ".local" / "state"),
            "XDG_CACHE_HOME": str(self.home / ".cache"),
            "PYTHONPATH": str(REPO_ROOT),
            "PYTHONPYCACHEPREFIX": os.environ.get("PYTHONPYCACHEPREFIX", ""),
        }
        self.wrapper = where / "laneboard-on-host"
        exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in self.env.items())
        self.wrapper.write_text(
            "#!/bin/sh\n" + exports + "unset TMUX TMUX_PANE\n"
            f'exec {shlex.quote(sys.executable)} -P -m laneboard "$@"\n'
        )
        self.wrapper.chmod(0o755)

    def laneboard(self, *args: str, cwd: Path | None = None) -> CliResult:
        """laneboard run on the host directly (not over ssh): what the host itself says."""
        done = subprocess.run(
            [str(self.wrapper), *args],
            cwd=cwd or self.home,
            capture_output=True,
            text=True,
            check=False,
            timeout=DEADLINE,
        )
        return CliResult(done.returncode, done.stdout, done.stderr)

    def use_fake_agent(self) -> None:
        """Make the host's `claude` profile the stand-in Claude Code of the tests."""
        from tests.conftest import FAKE

        self.lbhome.mkdir(parents=True, exist_ok=True)
        (self.lbhome / "config.toml").write_text(
            f"[agents.profiles.claude]\ncommand = {json.dumps(FAKE)}\n"
        )

    def followers(self) -> list[int]:
        """The pids of the host's `ls --follow` processes (by their command line and their
        `LANEBOARD_HOME`)."""
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
                env = (entry / "environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"--follow" in argv and f"LANEBOARD_HOME={self.lbhome}".encode() in env:
                found.append(int(entry.name))
        # (a child it is forking for git or tmux has its command line until it runs them)
        return [pid for pid in found if _parent(pid) not in found]

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, check=False)


def _parent(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


def add_host(name: str, remote: Remote, laneboard: Path, cwd: Path) -> None:
    """Configure host `name`: `remote`'s sshd, with `laneboard` as its laneboard command."""
    added = run_cli(
        "host", "add", name, "remote", "--ssh-config", str(remote.sshd.config),
        "--laneboard", str(laneboard), cwd=cwd,
    )  # fmt: skip
    assert added.code == 0, added.err


def shut(host: Remote, sshd: Sshd, tmp_path: Path) -> None:
    """End a host: its tmux server, its sshd, and the local control sockets made outside
    `tmp_path` (when the state dir's path was too long for a socket)."""
    from laneboard.core.adapters.ssh import control_dir

    host.close()
    sshd.stop()
    sockets = control_dir(Path(os.environ["LANEBOARD_HOME"]))
    if not sockets.is_relative_to(tmp_path):
        shutil.rmtree(sockets, ignore_errors=True)


@pytest.fixture
def remote(tmp_path: Path) -> Iterator[Remote]:
    """A host named `build`: its sshd started, its laneboard configured (`host add`)."""
    sshd = Sshd(tmp_path / "sshd")
    sshd.start()
    host = Remote(tmp_path / "host", sshd)
    add_host("build", host, host.wrapper, tmp_path)
    try:
        yield host
    finally:
        shut(host, sshd, tmp_path)
