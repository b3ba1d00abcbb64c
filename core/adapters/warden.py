"""The warden: the process of a confined agent's pane, outside the agent's sandbox.

`python -P -m laneboard.core.adapters.warden PLAN` is the pane's own command (tmux starts it in
the task's worktree; `-P` keeps that directory off the module path: nothing the agent writes
there is ever imported here). It

- serves the task's channel (`core.adapters.channel`: its requests run outside, scoped to the
  task's subtree; its lane commands hold the task's lane);
- moves the objects the agent's git writes into the common store as they appear, verified
  (`core.adapters.taskobjects`), and once more when the agent ends;
- runs the agent in its sandbox (bwrap, its own PID namespace, the seccomp filter) in the
  pane's terminal, and waits for it;
- records the agent's exit status in the task's event file (tmux loses one now and then) and
  exits with it, so the pane shows it as well.

Signals: SIGTERM and SIGINT reach the agent from the pane's process group; the warden outlives
them (a handler that does nothing) so the agent has its whole grace to quit and the status is
recorded. A hang-up (the pane killed, the server gone) ends the sandbox and then the warden:
the warden kills every process of its session until none is left (the sandbox's PID
namespace init among them, so `setsid` daemons inside end with it). `--die-with-parent` alone
is not enough: a bwrap child that forks while its parent dies can miss the parent-death
signal and run on orphaned. The hang-up's handler runs at once whichever of the warden's
threads the kernel gave the signal to (`process.wait_handling_signals`).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from laneboard.core.adapters import channel, confine, process, procs, taskobjects, vault
from laneboard.core.domain.agents import NOT_ATTENDED
from laneboard.core.domain.confine import MADE, Layout

MODULE = "laneboard.core.adapters.warden"


def argv(plan: dict[str, Any]) -> list[str]:
    """The pane's command for `plan` (see `main`)."""
    return [sys.executable, "-P", "-m", MODULE, json.dumps(plan)]


def main(raw: str) -> int:
    """Run the sandbox a plan describes: `task`, `name`, `repo_id`, `bwrap`, `layout` (the
    fields of `Layout`), `command` (the agent's argv), `cwd`, `common_dir`, `objects`,
    `events`, `state`, `ledger`, `slots`, `cap`."""
    plan = json.loads(raw)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: None)
    signal.signal(signal.SIGHUP, _hang_up)
    fields: dict[str, Any] = {
        k: tuple(tuple(x) if isinstance(x, list) else x for x in v) if isinstance(v, list) else v
        for k, v in plan["layout"].items()
    }
    layout = Layout(**fields)
    state = Path(plan["state"])
    desk = channel.LeaseDesk(
        Path(plan["ledger"]), plan["task"], plan["name"], plan["repo_id"], plan["slots"],
        plan["cap"],
    )  # fmt: skip
    server = channel.Server(
        Path(str(layout.channel)),
        plan["task"],
        plan["name"],
        cwd=plan["cwd"],
        env=dict(os.environ),
        leases=desk,
        ledger=Path(plan["ledger"]),
    ).start()
    common = Path(plan["common_dir"])
    refs = [Path(p) for p in plan["refs"]]
    keeper = vault.tip_keeper(
        Path(plan["vault"]), common, plan["task"], refs, Path(layout.admin_dir)
    )
    watcher = taskobjects.Watcher(
        Path(plan["objects"]), common / "objects", also=(*refs, Path(layout.admin_dir)),
        after=keeper,
    ).start()  # fmt: skip
    stream = _event_stream()
    env = confine.environment(
        layout, dict(os.environ), common_dir=Path(plan["common_dir"]), task_id=plan["task"],
        state=state, settled=True,
    )  # fmt: skip
    for name in NOT_ATTENDED:  # the operator is at this pane (as `domain.agents.WRAPPER`)
        env.pop(name, None)
    code = 1
    try:
        with confine.seccomp_fd() as fd:
            run = confine.bwrap_argv(
                plan["bwrap"], layout, plan["command"], cwd=plan["cwd"], seccomp_fd=fd
            )
            proc = subprocess.Popen(
                run, env=env, cwd=plan["cwd"], pass_fds=() if fd is None else (fd,)
            )
            code = process.wait_handling_signals(proc)
            code = code if code >= 0 else 128 - code
    except SystemExit as hung:  # the hang-up (`_hang_up`)
        code = int(hung.code or 0)
        raise
    finally:
        for source, dest in layout.private:  # the empty directory laneboard made, if empty
            with contextlib.suppress(OSError):
                os.rmdir(dest)
                made = Path(source)
                os.unlink(made.parent / f"{MADE}{made.name}")
        watcher.stop()
        server.close()
        if stream is not None and stream.poll() is None:
            stream.terminate()
        try:
            with open(plan["events"], "a") as events:
                events.write(f"exited\t-\t{code}\n")
        except OSError:
            pass
    return code


def _hang_up(*_: Any) -> None:
    """The pane is gone: kill the rest of this session (again and again, a process forking
    as its parent dies is found on the next pass), then end with 128 + SIGHUP, recorded."""
    me = os.getpid()
    session = os.getsid(0)
    for _attempt in range(500):
        others = [pid for pid in procs.members(sid=session) if pid != me]
        if not others:
            break
        for pid in others:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)
    raise SystemExit(128 + signal.SIGHUP)


def _event_stream() -> subprocess.Popen[bytes] | None:
    """The reader of an agent's server-sent event stream (opencode), beside the agent."""
    if not os.environ.get("LANEBOARD_EVENT_STREAM"):
        return None
    return subprocess.Popen(
        [sys.executable, "-P", "-m", "laneboard.core.adapters.eventstream"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
