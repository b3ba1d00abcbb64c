"""The service's hosts (docs/hosts.md): other machines whose tasks this laneboard shows and
drives, mixed into `Service` so the command line and the board call the same methods.

laneboard runs on each host with its own ledger, the truth for that host's tasks. Every
operation on a remote task is that laneboard's command, run over the host's one multiplexed ssh
connection (`core.adapters.ssh`); reads ask it for `--json` and the local side only aggregates.
Nothing local is changed because of a remote task or a remote failure: a host that does not
answer makes its tasks `unreachable`, shown from the last answer kept (`AnswerStore`), and its
own refusals come back as the same one line with a non-zero exit.
"""

from __future__ import annotations

import json
import shlex
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from laneboard import __version__
from laneboard.core.adapters.config import load_settings, set_user_value, state_dir
from laneboard.core.adapters.git import run_git
from laneboard.core.adapters.hosts import AnswerStore, find_host, load_hosts, save_host
from laneboard.core.adapters.locks import held
from laneboard.core.domain.agents import profiles
from laneboard.core.domain.errors import LaneboardError
from laneboard.core.domain.hosts import (
    SSH_FAILED,
    STREAM_LINE_MAX,
    Host,
    HostCheck,
    HostTasks,
    RemoteTask,
    StreamBroken,
    Tool,
    Unreachable,
    apply_stream,
    check_host_name,
    fetch_source,
    parse_check,
    refusal,
    restarted_since,
    stream_document,
)
from laneboard.core.domain.values import replace
from laneboard.core.domain.views import Outcome
from laneboard.core.service.parts import OnOutput, OnWait, ServicePart

if TYPE_CHECKING:
    import queue

    from laneboard.core.adapters.ssh import Connection

Sink = Callable[[bytes], None]
INSTALL_TIMEOUT = 600.0
"""Seconds `host check --install` may take there (sending ~15 MB and unpacking it)."""
USAGE = 2
"""The exit code of a command line laneboard does not understand (argparse's)."""
STORE_EVERY = 1.0
"""While a host streams, its answer is kept (for when it stops answering) at most this often."""

TOOLS = (
    ("laneboard", "every operation there (the same version as here)"),
    ("git", "worktrees, review and finalize (2.38 or newer)"),
    ("tmux", "the agents' panes"),
    ("bwrap", "confinement of agents (without it they run unconfined, or not at all)"),
)


class HostCommands(ServicePart):
    """`host add/ls/check`, commands forwarded to a host's laneboard, and its tasks."""

    _connections: dict[str, Connection]
    _connections_lock = threading.Lock()

    def hosts(self) -> list[Host]:
        """Every configured host, by name."""
        return list(load_hosts().values())

    def host(self, name: str) -> Host:
        """The configured host `name` (`UnknownHost` names the known ones)."""
        return find_host(name)

    def add_host(
        self,
        name: str,
        destination: str,
        *,
        ssh_config: str | None = None,
        laneboard: str | None = None,
    ) -> Host:
        """Configure a host (nothing is run there: `check_host` says what it has). An ssh
        config file is kept as its absolute path and must exist."""
        check_host_name(name)
        if not destination or destination.startswith("-") or any(c.isspace() for c in destination):
            raise LaneboardError(f"destination {destination!r}: user@host or an ssh config alias")
        config = None
        if ssh_config is not None:
            path = Path(ssh_config).expanduser().absolute()
            if not path.is_file():
                raise LaneboardError(f"--ssh-config {ssh_config}: no such file")
            config = str(path)
        host = Host(name, destination, config, laneboard or Host.laneboard)
        save_host(host)
        return host

    def connection(self, host: Host) -> Connection:
        """The host's connection, one per host in this process (its master shared by every
        laneboard process on this machine through the control socket)."""
        with self._connections_lock:
            if not hasattr(self, "_connections"):
                self._connections = {}
            found = self._connections.get(host.name)
            if found is None or found.host != host:
                from laneboard.core.adapters.ssh import Connection

                found = Connection(host, state_dir())
                self._connections[host.name] = found
            return found

    def check_host(self, name: str, agent: str | None = None) -> HostCheck:
        """What the host has of what laneboard needs there: laneboard itself (its version), git,
        tmux, bwrap and the agent's program (`agent`: a profile name, default agents.default;
        its program as this machine's profiles name it)."""
        host = self.host(name)
        program = self._agent_program(agent)
        wanted = [*TOOLS, (f"agent:{program}", "the agent the tasks run")]
        probe = _probe(host.laneboard, program)
        try:
            done = self.connection(host).run_shell(probe)
        except Unreachable as err:
            return HostCheck(host, False, (), str(err))
        tools = parse_check(done.stdout.decode(errors="replace"), wanted)
        tools = tuple(_same_version(tool) for tool in tools)
        return HostCheck(host, True, tools)

    def install_on_host(self, name: str) -> str:
        """Install this laneboard on the host, the same version with the same dependencies as
        here (`core.adapters.bundle`), without a package index: a Python environment of its own
        (`python3.X -m venv --without-pip`) under `${XDG_DATA_HOME:-~/.local/share}/laneboard/
        VERSION`, made beside its place and renamed there, with `bin/laneboard` in it; the
        host's `laneboard` setting here then names that program. Refused, with nothing changed
        there, when the host lacks this Python version or runs another platform (compiled
        parts would not load): then install it there with pip. Returns the program's path."""
        from laneboard.core.adapters import bundle

        host = self.host(name)
        connection = self.connection(host)
        python = f"python{sys.version_info.major}.{sys.version_info.minor}"
        probe = connection.run_shell(
            f"command -v {python} >/dev/null && {python} -c {shlex.quote(bundle.RUNTIME_PROBE)}"
        )
        there = probe.stdout.decode(errors="replace").strip()
        here = bundle.runtime()
        if probe.returncode != 0 or not there:
            raise LaneboardError(
                f"host {name} has no {python}, which this laneboard runs on: install {python} "
                f"there, or laneboard {__version__} with pip"
            )
        if there != here:
            raise LaneboardError(
                f"host {name} runs {there}, this laneboard {here}: its compiled parts would not "
                f"load there; install laneboard {__version__} there with pip"
            )
        with held(f"install-{name}"):  # (one install per host from this machine)
            done = connection.run_shell(
                _installer(python, __version__), input=bundle.build(), timeout=INSTALL_TIMEOUT
            )
        said = done.stdout.decode(errors="replace").strip().splitlines()
        if done.returncode != 0 or not said or said[0] != f"laneboard {__version__}":
            why = done.stderr.decode(errors="replace").strip().splitlines()
            raise LaneboardError(
                f"host {name}: the install failed: {why[-1] if why else 'no reason given'}"
            )
        program = said[-1]
        set_user_value(f"hosts.{name}", "laneboard", program)
        return program

    def _agent_program(self, agent: str | None) -> str:
        agents = load_settings(None).agents
        known = profiles(agents.profiles)
        name = agent or agents.default
        if name not in known:
            raise LaneboardError(f"no agent profile named {name!r} (known: {', '.join(known)})")
        return known[name].command[0]

    def on_host(self, name: str, words: Sequence[str], *, tty: bool, out: Sink, err: Sink) -> int:
        """Run `laneboard WORDS` on the host as if here: its output passed on as it comes, its
        exit code returned (a refusal there is its one line and exit 1 here too)."""
        return self.connection(self.host(name)).forward(words, tty=tty, out=out, err=err)

    def ask_host(self, name: str, words: Sequence[str]) -> dict[str, Any]:
        """The JSON document `laneboard WORDS --json` prints on the host; its refusal is raised
        here as the same `LaneboardError` (one line, its details, its exit code)."""
        host = self.host(name)
        done = self.connection(host).run([*words, "--json"])
        if done.returncode != 0:
            line, details = refusal(done.stderr.decode(errors="replace"))
            error = LaneboardError(f"{name}: {line}", details=details)
            error.exit_code = done.returncode
            raise error
        try:
            document: dict[str, Any] = json.loads(done.stdout)
        except ValueError:
            raise LaneboardError(f"{name}: its laneboard answered something not JSON") from None
        return document

    def host_tasks(self, *, include_retired: bool = False) -> list[HostTasks]:
        """Every host's tasks, asked of all hosts at once: fresh from each host that answers
        (and kept), else the last answer kept, every task of it `unreachable`."""
        hosts = self.hosts()
        if not hosts:
            return []
        from concurrent.futures import ThreadPoolExecutor  # (only with hosts: 3 ms to import)

        with ThreadPoolExecutor(max_workers=min(8, len(hosts))) as pool:
            return list(
                pool.map(lambda h: self.tasks_of(h, include_retired=include_retired), hosts)
            )

    def tasks_of(self, host: Host, *, include_retired: bool = False) -> HostTasks:
        """One host's tasks: fresh when it answers (and kept), else the last answer kept."""
        store = AnswerStore(state_dir())
        words = ["ls", "--local", *(["--all"] if include_retired else [])]
        try:
            document = self.ask_host(host.name, words)
            tasks = document.get("tasks")
            if not isinstance(tasks, list):
                raise LaneboardError(f"{host.name}: its laneboard's `ls --json` has no tasks")
        except LaneboardError as err:
            kept, seen = store.load(host.name)
            remote = tuple(RemoteTask(host.name, t, reachable=False) for t in kept)
            return HostTasks(host, False, remote, seen, str(err))
        now = time.time()
        if not include_retired:  # the kept answer is the live tasks, whatever `--all` saw
            store.save(host.name, tasks, at=now)
        return HostTasks(host, True, tuple(RemoteTask(host.name, t) for t in tasks), now)

    def watch_host(
        self, host: Host, post: Callable[[HostTasks], None], stop: threading.Event
    ) -> None:
        """Hand `post` the host's tasks each time they change there, until `stop` is set.

        One long-lived `ls --json --follow` of the host's laneboard runs over its connection:
        the host's own feed, woken by hook events, file changes and its tmux (one `list-panes`
        a tick while a pane lives), sends only what changed. A stream that ends, or says nothing
        (not even its heartbeat) for the host's `silent` seconds, makes the host unreachable: its
        last answer is posted as such, and the stream is opened again after the host's `poll`
        seconds. A host whose laneboard cannot stream (it refuses the command) is polled with
        `tasks_of` instead. The first answer after a reconnect says whether the host rebooted
        or its tmux server changed meanwhile (`HostTasks.restarted`)."""
        store = AnswerStore(state_dir())
        streams = True
        while not stop.is_set():
            if not streams:
                post(self.tasks_of(host))
                stop.wait(host.poll)
                continue
            try:
                why = self._follow(host, post, stop, store)
            except LaneboardError as err:  # (Unreachable: the master could not be opened)
                why = str(err)
            if why is None:
                streams = False
                continue
            if stop.is_set():
                return
            post(self.unreachable_answer(host, why))
            stop.wait(host.poll)

    def unreachable_answer(self, host: Host, why: str) -> HostTasks:
        """The host's last answer kept, every task of it `unreachable`, for reason `why`."""
        kept, seen = AnswerStore(state_dir()).load(host.name)
        remote = tuple(RemoteTask(host.name, t, reachable=False) for t in kept)
        return HostTasks(host, False, remote, seen, why)

    def _follow(
        self,
        host: Host,
        post: Callable[[HostTasks], None],
        stop: threading.Event,
        store: AnswerStore,
    ) -> str | None:
        """One stream of the host's tasks, posted as they come, until it ends or `stop`; why
        it ended (the host's to blame), or None when the host's laneboard refused to stream."""
        connection = self.connection(host)
        process = connection.stream(["ls", "--local", "--json", "--follow"])
        stdout, stderr = process.stdout, process.stderr
        assert stdout is not None and stderr is not None
        import queue  # only while a host streams

        lines: queue.Queue[bytes | StreamBroken | None] = queue.Queue()
        said: list[bytes] = []
        threading.Thread(target=_lines, args=(stdout, lines), daemon=True).start()
        threading.Thread(target=lambda: said.append(stderr.read()), daemon=True).start()
        tasks: dict[str, dict[str, Any]] = {}
        heard = time.monotonic()
        saved = 0.0
        answered = False
        restarted: str | None = None
        why = "the connection was lost"
        try:
            while not stop.is_set():
                try:
                    line = lines.get(timeout=0.5)
                except queue.Empty:
                    if time.monotonic() - heard > host.silent:
                        why = f"no answer in {host.silent:g}s"
                        break
                    continue
                if line is None:
                    break
                heard = time.monotonic()
                try:
                    if isinstance(line, StreamBroken):
                        raise line
                    document = stream_document(line)
                    if document is None:
                        continue
                    if "schema" not in document and not answered:
                        raise StreamBroken("its stream did not start with the list of tasks")
                    found = document.get("host")
                    if isinstance(found, dict):  # the first line, or a tmux server since
                        restarted = restarted_since(store.origin(host.name), found)
                        store.save(host.name, list(store.load(host.name)[0]), origin=found)
                    apply_stream(tasks, document)
                except StreamBroken as broken:
                    why = str(broken)
                    break
                answered = True
                now = time.time()
                if now - saved > STORE_EVERY:
                    store.save(host.name, list(tasks.values()), at=now)
                    saved = now
                remote = tuple(RemoteTask(host.name, t) for t in tasks.values())
                post(HostTasks(host, True, remote, now, restarted=restarted))
                restarted = None
        finally:
            if answered:  # what the host said last is what is kept, even when it is nothing
                store.save(host.name, list(tasks.values()))
            connection.end(process)
        error = b"".join(said).decode(errors="replace")
        if process.returncode == SSH_FAILED:
            return str(connection.unreachable(error)) if error.strip() else _gone(host, why)
        if not answered and process.returncode == USAGE and "--follow" in error:
            return None  # a laneboard that cannot stream: polled instead
        return _gone(host, why)

    def finalize_from_host(
        self,
        name: str,
        ref: str,
        local: Path,
        *,
        into: str | None = None,
        strategy: str | None = None,
        on_wait: OnWait = None,
        on_output: OnOutput = None,
    ) -> tuple[Outcome, str]:
        """Integrate a host's reviewed task into a repository on this machine: fetch the
        task's branch from the host (`Connection.fetch`), refuse unless the fetched tip is the
        SHA reviewed there, make a local task `HOST-NAME` at that commit (its journal records
        where it came from: `host.fetched`), mark it reviewed at it, and finalize it as any
        local task (lane, gate, compare-and-swap of the target, anchor). The host's task is
        left as it is, in review there (a second note says so). A local task of that name
        whose reviewed SHA is the same commit (an earlier attempt that stopped) is finalized
        again instead of a new one."""
        root = self.remote_repo(name, ref)
        words = ["--repo", root, "show", ref] if root else ["show", ref]
        there = self.ask_host(name, words)
        reviewed = there.get("reviewed_sha")
        task_name = str(there.get("name"))
        task_id, branch, repo = fetch_source(name, there)
        if not reviewed:
            raise LaneboardError(
                f"{name}:{task_name} has not been reviewed there: "
                f"`laneboard review {name}:{task_name} --mark` pins the SHA to integrate"
            )
        ctx = self._open(local, register=True)  # as `new` there would
        fetched_ref = f"refs/laneboard/fetched/{name}/{task_id}"
        host = self.host(name)
        fetched = self.connection(host).fetch(ctx.root, repo, branch, fetched_ref, host.timeout)
        local_name = f"{name}-{task_name}"
        try:
            if fetched != reviewed:
                raise LaneboardError(
                    f"{name}:{task_name}: its branch {branch} there is at {fetched}, not at the "
                    f"reviewed {reviewed}: review it again there (nothing was integrated)"
                )
            earlier = self._ledger().live_task(ctx.repo.id, local_name)
            if earlier is not None and earlier.reviewed_sha != reviewed:
                raise LaneboardError(
                    f"a task {local_name} is in {ctx.root} already, not at {reviewed[:12]}: "
                    "finalize or discard it first"
                )
            if earlier is None:
                # Into the target this repository's own tasks get (or `--into`): which local
                # branch moves is this machine's to say, never the host's answer.
                made = self.new(ctx.root, local_name, base=reviewed, target=into)
                self._ledger().append_event(
                    made.task.id,
                    ctx.repo.id,
                    "host.fetched",
                    self.actor,
                    {"host": name, "task_id": task_id, "name": task_name, "repo": repo,
                     "branch": branch, "reviewed": reviewed},
                )  # fmt: skip
                self.mark_reviewed(ctx.root, local_name)
        finally:
            run_git(["update-ref", "-d", fetched_ref, fetched], cwd=ctx.root, check=False)
        done = self.finalize(
            ctx.root, local_name, into=into, strategy=strategy, on_wait=on_wait,
            on_output=on_output,
        )  # fmt: skip
        left = (
            f"{name}:{task_name} stays in review on host {name}: its work is in "
            f"{done.task.target} here now (`laneboard discard {name}:{task_name}` ends it there)"
        )
        return done, left

    def remote_repo(self, name: str, ref: str) -> str | None:
        """The root of the repository on host `name` that holds task `ref` (a name, an id or
        an id prefix), from the host's last answer, else asked of it; None when it has no
        such task (its laneboard then says so itself)."""
        kept, _ = AnswerStore(state_dir()).load(name)
        found = _repo_of(kept, name, ref)
        if found is None:
            document = self.ask_host(name, ["ls", "--local", "--all"])
            found = _repo_of(document.get("tasks") or [], name, ref)
        return found


def _lines(pipe: Any, into: queue.Queue[bytes | StreamBroken | None]) -> None:
    """Hand each line of a stream on, then None at its end; a line longer than any laneboard
    sends ends it (nothing more of it is read)."""
    while line := pipe.readline(STREAM_LINE_MAX):
        if len(line) >= STREAM_LINE_MAX and not line.endswith(b"\n"):
            into.put(StreamBroken("its stream sent a line too long to be laneboard's"))
            break
        into.put(line)
    into.put(None)


def _gone(host: Host, why: str) -> str:
    return f"host {host.name} ({host.destination}) unreachable: {why}"


def _repo_of(tasks: list[dict[str, Any]], host: str, ref: str) -> str | None:
    """The repository of the live task named `ref`, else of the task whose id `ref` is (or
    starts); refused when tasks of two repositories answer to it."""
    for matches in (
        [t for t in tasks if t.get("name") == ref and t.get("retired_at") is None],
        [t for t in tasks if t.get("name") == ref],
        [t for t in tasks if len(ref) >= 4 and str(t.get("id", "")).startswith(ref)],
    ):
        repos = sorted({str(t.get("repo")) for t in matches})
        if len(repos) > 1:
            raise LaneboardError(
                f"{host}:{ref} names tasks of {len(repos)} repositories there "
                f"({', '.join(repos)}): give --repo"
            )
        if repos:
            return repos[0]
    return None


def _installer(python: str, version: str) -> str:
    """The shell line that installs the bundle on its standard input (see `install_on_host`);
    it prints the installed laneboard's version, then its path. Each install builds in a
    directory of its own; the swap into place is one at a time (`mkdir` of a lock is atomic
    there), and a failed install leaves the one in place as it was."""
    script = f"""set -e
d="${{XDG_DATA_HOME:-$HOME/.local/share}}/laneboard/{version}"
mkdir -p "$(dirname "$d")"
new="$d.new.$$"
trap 'rm -rf "$new"' EXIT
{python} -m venv --without-pip "$new"
site=$("$new/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
tar -xzf - -C "$site"
printf '#!%s\\n%s\\n' "$d/bin/python" \
  'import sys; from laneboard.tui.cli import main; sys.exit(main())' > "$new/bin/laneboard"
chmod 755 "$new/bin/laneboard"
waited=0
until mkdir "$d.lock" 2>/dev/null; do
  waited=$((waited + 1))
  if [ "$waited" -gt 600 ]; then
    echo "another install holds $d.lock (remove it if none runs)" >&2
    exit 1
  fi
  sleep 0.1
done
trap 'rm -rf "$new"; rmdir "$d.lock"' EXIT
if [ -e "$d" ]; then mv "$d" "$d.old.$$"; fi
mv "$new" "$d"
rm -rf "$d.old.$$"
"$d/bin/laneboard" --version
echo "$d/bin/laneboard"
"""
    return f"sh -c {shlex.quote(script)}"


def _probe(laneboard: str, program: str) -> str:
    """A shell line that prints `NAME<TAB>WHAT` for each tool it finds on the host."""
    agent = shlex.quote(program)
    return "; ".join(
        [
            'p() { printf \'%s\\t%s\\n\' "$1" "$2"; }',
            f'v=$({laneboard} --version 2>/dev/null) && p laneboard "$v"',
            'g=$(command -v git) && p git "$g ($(git --version))"',
            't=$(command -v tmux) && p tmux "$t ($(tmux -V))"',
            'b=$(command -v bwrap) && p bwrap "$b"',
            f'a=$(command -v {agent}) && p agent:{agent} "$a"',
            "true",
        ]
    )


def _same_version(tool: Tool) -> Tool:
    if tool.name != "laneboard" or tool.found is None:
        return tool
    there = tool.found.removeprefix("laneboard ").strip()
    if there != __version__:
        return replace(tool, problem=f"laneboard {there} there, {__version__} here")
    return tool
