"""Telling the operator who is away from the board: a desktop notification, and a push to a phone.

The board decides *when* (a task started needing the operator and they are not looking at the
board); this module decides *how*, and never blocks the UI thread: `notify-send` is started and
not waited for, a push is posted from a thread of its own. What it must never do: send anything
while the operator looks at the board (the caller asks `looking()` first), push anything but
what blocks (`Attention.blocks`), or push more often than `push_every` allows.

Routes (`[board] desktop`): `auto` writes the terminal's own notification (OSC 9) when the board
runs inside tmux or over ssh, where `notify-send` would reach the wrong machine's desktop or
none; else it runs `notify-send` when that is on PATH. Inside tmux the sequence is wrapped for
passthrough (tmux 3.3+ passes it on with `allow-passthrough on`, which the board sets on its
own pane).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
import urllib.request
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from laneboard.core.domain.attention import Attention

BURST = 6
"""At most this many pushes go out within one `push_every` span, whatever the tasks."""
PUSH_TIMEOUT = 10.0


def desktop_route(setting: str, env: Mapping[str, str], notify_send: str | None) -> str | None:
    """How a desktop notification goes out: `notify-send`, `osc9`, `osc777`, or None (no
    way, or turned off). `notify_send` is its path when it is installed."""
    if setting in ("osc9", "osc777"):
        return setting
    if setting == "notify-send":
        return "notify-send" if notify_send else None
    if setting != "auto":
        return None
    if env.get("TMUX") or env.get("SSH_CONNECTION") or env.get("SSH_TTY"):
        return "osc9"
    return "notify-send" if notify_send else None


def osc(route: str, title: str, body: str, *, tmux: bool) -> str:
    """The terminal's notification sequence (OSC 9 or OSC 777), wrapped for tmux passthrough
    when `tmux`. Control characters in the text are dropped: a task name must not be able to
    end the sequence and write to the terminal."""

    def clean(text: str) -> str:
        return "".join(c for c in text if c.isprintable()).replace(";", ",")

    if route == "osc777":
        sequence = f"\x1b]777;notify;{clean(title)};{clean(body)}\x07"
    else:
        sequence = f"\x1b]9;{clean(title)}: {clean(body)}\x07"
    if tmux:
        return "\x1bPtmux;" + sequence.replace("\x1b", "\x1b\x1b") + "\x1b\\"
    return sequence


@dataclass
class RateLimit:
    """Pushes allowed: one per task and kind per `every` seconds, and `burst` in any span of
    `every` seconds in all. Pure apart from the times it is given."""

    every: float
    burst: int = BURST
    last: dict[tuple[str, Attention], float] = field(default_factory=dict)
    sent: deque[float] = field(default_factory=deque)

    def allow(self, task: str, kind: Attention, now: float) -> bool:
        while self.sent and now - self.sent[0] >= self.every:
            self.sent.popleft()
        before = self.last.get((task, kind))
        if (before is not None and now - before < self.every) or len(self.sent) >= self.burst:
            return False
        self.last[(task, kind)] = now
        self.sent.append(now)
        return True


def _post(url: str, body: bytes, headers: dict[str, str]) -> None:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    with urllib.request.urlopen(request, timeout=PUSH_TIMEOUT) as answer:
        answer.read()


class Alerts:
    """The board's way to reach an operator who is not looking. `write` puts a sequence on the
    board's terminal; `post` sends one push (url, body, headers; the default uses urllib)."""

    def __init__(
        self,
        *,
        desktop: str = "auto",
        ntfy: str | None = None,
        webhook: str | None = None,
        push_every: float = 300.0,
        write: Callable[[str], None] | None = None,
        env: Mapping[str, str] | None = None,
        post: Callable[[str, bytes, dict[str, str]], None] = _post,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.env = dict(os.environ if env is None else env)
        self.route = desktop_route(
            desktop, self.env, shutil.which("notify-send", path=self.env.get("PATH"))
        )
        self.ntfy, self.webhook = ntfy, webhook
        self.limit = RateLimit(push_every)
        self.write, self.post, self.clock = write, post, clock
        self.failures: list[str] = []
        """Why pushes failed (the board shows the first, once)."""
        self._passthrough = False

    @property
    def inside_tmux(self) -> bool:
        return bool(self.env.get("TMUX"))

    def board_visible(self) -> bool:
        """Inside tmux: whether the board's pane is in the current window of a session a
        client is attached to (the terminal's own focus events are off in many set-ups).
        Outside tmux: True (the terminal's focus events decide)."""
        pane = self.env.get("TMUX_PANE")
        if not self.inside_tmux or not pane:
            return True
        try:
            shown = subprocess.run(
                [
                    "tmux",
                    "display-message",
                    "-p",
                    "-t",
                    pane,
                    "#{window_active}#{session_attached}",
                ],
                capture_output=True,
                text=True,
                timeout=2,
                check=False,
                env=self.env,
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return True
        return shown.startswith("1") and shown[1:] not in ("", "0")

    def desktop(self, title: str, body: str) -> str | None:
        """Show a desktop notification; how it went out (None: no route)."""
        route = self.route
        if route == "notify-send":
            try:
                subprocess.Popen(
                    ["notify-send", "--app-name=laneboard", title, body],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    env=self.env,
                    start_new_session=True,
                )
            except OSError:
                return None
            return route
        if route in ("osc9", "osc777") and self.write is not None:
            if self.inside_tmux and not self._passthrough:
                self._passthrough = True
                self._allow_passthrough()
            self.write(osc(route, title, body, tmux=self.inside_tmux))
            return route
        return None

    def _allow_passthrough(self) -> None:
        pane = self.env.get("TMUX_PANE")
        if pane:
            subprocess.run(
                ["tmux", "set-option", "-p", "-t", pane, "allow-passthrough", "on"],
                capture_output=True,
                timeout=2,
                check=False,
                env=self.env,
            )

    def push(self, kind: Attention, task: str, repo: str, message: str) -> bool:
        """Push to the configured ntfy topic and webhook, from a thread, when `kind` blocks and
        the rate limit allows; whether anything was sent."""
        targets = [url for url in (self.ntfy, self.webhook) if url]
        if not targets or not kind.blocks or not self.limit.allow(task, kind, self.clock()):
            return False
        text = f"{message} ({repo})"
        sends: list[tuple[str, bytes, dict[str, str]]] = []
        if self.ntfy:
            headers = {"Title": f"laneboard: {task}", "Tags": kind.label.replace(" ", "_")}
            sends.append((self.ntfy, text.encode(), headers))
        if self.webhook:
            body = {"task": task, "repo": repo, "kind": kind.label, "message": text}
            sends.append(
                (self.webhook, json.dumps(body).encode(), {"Content-Type": "application/json"})
            )
        threading.Thread(target=self._send, args=(sends,), daemon=True).start()
        return True

    def _send(self, sends: list[tuple[str, bytes, dict[str, str]]]) -> None:
        for url, body, headers in sends:
            try:
                self.post(url, body, headers)
            except Exception as err:  # noqa: BLE001 (a push that fails never stops the board)
                self.failures.append(f"push to {url} failed: {err}")
