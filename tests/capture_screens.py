"""Capture a real agent's screens again, for a newer version of it (by hand).

    .venv/bin/python -m tests.capture_screens claude [--out DIR]

Runs the agent installed by `.ci/install-agents` (its version in `tests/realagents.py`) in a
private tmux server, in a throwaway git repository and HOME, against the fake model API, and
writes each screen it reaches to `DIR/<agent>-<version>/<state>--<what>.txt` (default DIR:
tests/screens): its trust question, its sign-in or auth screen (Codex, Gemini), its start-up
questions (aider), then idle at start, busy, the turn done, a permission, the answered turn.
`tests/unit/test_screen_rules.py` tests the profile's screen rules over every file there:
after a capture, read the new screens, fix the profile's rules, and drop the old version's
directory once nothing needs it.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tests.fakes.modelapi import ASK, HOLD, ModelAPI
from tests.realagents import VERSIONS, program, setup

SCREENS = Path(__file__).resolve().parent / "screens"


class Pane:
    """One agent in a window of a private tmux server."""

    def __init__(self, socket: str, name: str, cwd: Path, argv: list[str], env: dict[str, str]):
        self.socket, self.name = socket, name
        line = shlex.join(["env", *(f"{k}={v}" for k, v in env.items()), *argv])
        self.tmux("new-session", "-d", "-x", "120", "-y", "40", "-s", name, "-c", str(cwd), line)

    def tmux(self, *args: str) -> str:
        done = subprocess.run(
            ["tmux", "-L", self.socket, "-f", "/dev/null", *args],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        return done.stdout

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-J", "-t", self.name)

    def settled(self, within: float = 40.0, still: float = 1.5) -> str:
        """The screen once it has not changed for `still` seconds (and is not blank)."""
        end = time.monotonic() + within
        last, since = "", time.monotonic()
        while time.monotonic() < end:
            now = self.screen()
            if now != last:
                last, since = now, time.monotonic()
            elif now.strip() and time.monotonic() - since >= still:
                break
            time.sleep(0.2)
        return last

    def type(self, text: str, delay: float = 0.6) -> None:
        self.tmux("send-keys", "-t", self.name, "-l", text)
        time.sleep(delay)
        self.tmux("send-keys", "-t", self.name, "Enter")

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", self.name, *keys)

    def close(self) -> None:
        self.tmux("kill-session", "-t", self.name)


def capture(agent: str, out: Path) -> list[Path]:
    found = program(agent)
    into = out / f"{agent}-{VERSIONS[agent]}"
    into.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    api = ModelAPI().start()
    socket = f"lb-capture-{os.getpid()}"
    scratch = Path(tempfile.mkdtemp(prefix=f"lb-capture-{agent}-"))

    def save(name: str, screen: str) -> None:
        path = into / f"{name}.txt"
        path.write_text(screen)
        written.append(path)
        print(f"{path}: {len([x for x in screen.splitlines() if x.strip()])} lines")

    def run(
        label: str, *, trusted: bool = True, empty_home: bool = False, plain: bool = False
    ) -> tuple[Pane, Path]:
        home = scratch / f"home-{label}"
        home.mkdir()
        repo = scratch / f"repo-{label}"
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
        (home / ".gitconfig").write_text("[user]\n\tname = Capture\n\temail = c@example.invalid\n")
        extra, env = ([], {}) if empty_home else setup(agent, home, repo, api.url, trusted=trusted)
        if plain:  # aider's start-up questions: without the flags that skip them
            extra = [a for a in extra if a not in ("--no-gitignore", "--no-show-release-notes")]
        env = {"HOME": str(home), "TERM": "xterm-256color", **env}
        return Pane(socket, label, repo, [str(found), *extra], env), repo

    def submit(pane: Pane, text: str) -> None:
        """Type `text`; Enter again if the API has not seen it (an agent still starting
        drops an Enter)."""
        pane.type(text)
        for _ in range(3):
            end = time.monotonic() + 8
            while time.monotonic() < end:
                if any(text in p for p in api.prompts()):
                    return
                time.sleep(0.2)
            pane.keys("Enter")

    def until(pane: Pane, check: Callable[[str], bool], within: float = 40.0) -> str:
        end = time.monotonic() + within
        while time.monotonic() < end:
            screen = pane.settled(still=1.0)
            if check(screen):
                return screen
        return pane.screen()

    try:
        if agent in ("claude", "codex", "gemini"):
            pane, _ = run("trust", trusted=False)
            screen = pane.settled(still=4.0)
            if agent == "codex":  # it asks once a prompt is submitted
                pane.type("hello")
                screen = until(pane, lambda s: "rust" in s)
            save("waiting--trust", screen)
            pane.close()
        if agent in ("codex", "gemini"):
            pane, _ = run("login", empty_home=True)
            screen = pane.settled(still=2.0)
            if agent == "gemini":  # its trust question comes first
                pane.keys("Enter")
                screen = until(pane, lambda s: "authenticate" in s)
            save("waiting--sign-in" if agent == "codex" else "waiting--auth", screen)
            pane.close()
        if agent == "aider":
            pane, _ = run("questions", plain=True)
            save("waiting--gitignore-question", until(pane, lambda s: "(Y)es/(N)o" in s))
            pane.close()
        pane, _ = run("turns")
        save("idle--start", pane.settled(still=4.0))
        submit(pane, f"{HOLD} a long turn")
        time.sleep(1.5)  # the request is held: the agent shows that it works
        save("working--busy", pane.screen())
        api.release()
        save("idle--turn-done", pane.settled(still=2.0))
        submit(pane, f"{ASK} make a file")
        save("waiting--permission", pane.settled(still=2.0))
        pane.keys(*(["y", "Enter"] if agent == "aider" else ["Enter"]))
        save("idle--turn-done-after-permission", pane.settled(still=2.0))
        pane.close()
    finally:
        api.stop()
        subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True, check=False)
    return written


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("agent", choices=sorted(VERSIONS))
    parser.add_argument("--out", type=Path, default=SCREENS)
    args = parser.parse_args(argv)
    capture(args.agent, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
