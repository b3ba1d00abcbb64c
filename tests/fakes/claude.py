"""A stand-in for Claude Code, as laneboard drives it (../shared/AGENTS.md sections 1-3).

CLI: `claude.py [--settings FILE] [--session-id UUID | --resume UUID [--fork-session
[--session-id UUID]]] [--] [PROMPT]`. It runs the
hooks the settings file names (`UserPromptSubmit`, `PreToolUse`, `PermissionRequest`, `Stop`,
`SessionStart`, `SessionEnd`) the way Claude does: the command through `sh -c`, compact JSON
on stdin with `session_id`, `hook_event_name` and `cwd`. Its screen uses Claude's strings:
`esc to interrupt` while busy, `Do you want to proceed?` / `<marker> Yes` when it asks, a
bare `<marker>` prompt when idle (`MARKER`, Claude's U+276F).

Each conversation is kept in `$HOME/.fake-claude/<id>.log` (one line per prompt), and
`--resume` prints how many turns it already holds, so a test can see that the same
conversation continued. `--fork-session` resumes as Claude does: a new conversation (the
`--session-id` given, else a new id) that starts as a copy of the resumed one, which is left
as it was; `--session-id` with `--resume` but without `--fork-session` is refused, as Claude
refuses it.

Input lines: `work S` (busy S seconds, with hooks), `quiet S` (busy S seconds, printing, but
sending no hook), `ask` (a permission question; the next line answers it), `write NAME TEXT`
(a turn that writes a file in the cwd; `\\n` in TEXT is a line break), `spawn` (a helper
in its own process group that ignores SIGTERM), `exit N` (SessionEnd, then exit N); anything
else is a prompt answered at once. `FAKE_CLAUDE_IGNORE_TERM=1` ignores SIGTERM (a stubborn agent);
`FAKE_CLAUDE_LOADING=S` drops the Enter of what is typed in the S seconds after a resume
(with `FAKE_CLAUDE_LOADING_DROPS=1`, the text too, and draws none of it).
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import termios
import time
import uuid
from pathlib import Path

MARKER = "\u276f"
"""Claude's prompt and selection marker."""


class Agent:
    def __init__(self, argv: list[str]) -> None:
        self.settings: dict = {}
        self.session = str(uuid.uuid4())
        self.resumed = False
        prompt = None
        pinned = resumed = None
        fork = False
        args = list(argv)
        while args:
            arg = args.pop(0)
            if arg == "--settings":
                self.settings = json.loads(Path(args.pop(0)).read_text())
            elif arg == "--session-id":
                pinned = args.pop(0)
            elif arg == "--resume":
                resumed = args.pop(0)
                self.resumed = True
            elif arg == "--fork-session":
                fork = True
            elif arg == "--":  # the end of options: the rest is the prompt
                prompt = " ".join(args)
                break
            elif arg.startswith("-"):
                raise SystemExit(f"unknown option {arg}")
            else:
                prompt = arg
        if pinned and resumed and not fork:
            raise SystemExit("--session-id can be used with --resume only with --fork-session")
        self.session = pinned or resumed or self.session
        if fork and not pinned:
            self.session = str(uuid.uuid4())
        self.prompt = prompt
        self.log = Path(os.environ["HOME"]) / ".fake-claude" / f"{self.session}.log"
        self.log.parent.mkdir(parents=True, exist_ok=True)
        if fork and resumed:
            source = self.log.parent / f"{resumed}.log"
            self.log.write_text(source.read_text() if source.exists() else "")

    def hook(self, event: str, **fields: object) -> None:
        payload = json.dumps(
            {"session_id": self.session, "hook_event_name": event, "cwd": os.getcwd(), **fields},
            separators=(",", ":"),
        )
        for entry in self.settings.get("hooks", {}).get(event, []):
            for hook in entry.get("hooks", []):
                subprocess.run(["sh", "-c", hook["command"]], input=payload, text=True, check=False)

    def turn(self, prompt: str, seconds: float = 0.0, hooks: bool = True) -> None:
        with self.log.open("a") as handle:
            handle.write(prompt + "\n")
        if hooks:
            self.hook("UserPromptSubmit", prompt=prompt)
            self.hook("PreToolUse", tool_name="Bash")
        end = time.monotonic() + seconds
        tick = 0
        while time.monotonic() < end:  # one status line, redrawn in place, as Claude's is
            tick += 1
            print(
                f"\r\x1b[2K✻ Working on {prompt!r}… {tick} (esc to interrupt)", end="", flush=True
            )
            time.sleep(0.3)
        print(f"\r\x1b[2K● done: {prompt}", flush=True)
        if hooks:
            self.hook("Stop")

    def load(self) -> str:
        """`FAKE_CLAUDE_LOADING=S`: for S seconds after a resume the idle prompt shows while
        the conversation still loads, and what is typed then is kept in the input line but its
        Enter is lost (as Claude Code does); the text kept is returned."""
        loading = float(os.environ.get("FAKE_CLAUDE_LOADING") or 0)
        if not loading:
            return ""
        print(f"{MARKER} ", end="", flush=True)
        drops = bool(os.environ.get("FAKE_CLAUDE_LOADING_DROPS"))
        if drops:  # what it drops is not drawn either (a real one draws its own input line)
            mode = termios.tcgetattr(sys.stdin)
            quiet = list(mode)
            quiet[3] &= ~termios.ECHO
            termios.tcsetattr(sys.stdin, termios.TCSANOW, quiet)
        kept = ""
        end = time.monotonic() + loading
        while (left := end - time.monotonic()) > 0:
            if select.select([sys.stdin], [], [], left)[0]:
                got = sys.stdin.readline()
                if not got:
                    break
                kept += got.rstrip("\n")
        if drops:
            termios.tcsetattr(sys.stdin, termios.TCSANOW, mode)
            return ""
        return kept

    def run(self) -> int:
        if os.environ.get("FAKE_CLAUDE_IGNORE_TERM"):
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print(f"Fake Claude Code (session {self.session})", flush=True)
        print(f"cwd: {os.getcwd()}", flush=True)
        if self.resumed:
            turns = len(self.log.read_text().splitlines()) if self.log.exists() else 0
            print(f"resumed conversation with {turns} turns", flush=True)
        self.hook("SessionStart", source="resume" if self.resumed else "startup")
        if self.prompt:
            self.turn(self.prompt, 1.0)
        pending = self.load() if self.resumed else ""
        while True:
            try:
                line = (pending + input(f"{MARKER} {pending}")).strip()
            except EOFError:
                line = "exit 0"
            pending = ""
            command, _, rest = line.partition(" ")
            if command in ("exit", "spawn"):  # a prompt Claude takes without a turn
                self.hook("UserPromptSubmit", prompt=line)
            if command == "exit":
                self.hook("SessionEnd")
                return int(rest or 0)
            if command == "work":
                self.turn(line, float(rest or 1))
            elif command == "quiet":
                self.turn(line, float(rest or 1), hooks=False)
            elif command == "ask":
                self.hook("PermissionRequest", tool_name="Bash")
                print("Do you want to proceed?", flush=True)
                print(f"{MARKER} Yes", flush=True)
                print("  No (Esc to cancel)", flush=True)
                sys.stdin.readline()
                self.turn("approved")
            elif command == "spawn":  # a helper in a process group of its own, deaf to SIGTERM
                subprocess.Popen(
                    [sys.executable, "-c", "import signal, time; "
                     "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)"],
                    process_group=0,
                )  # fmt: skip
                print("spawned", flush=True)
            elif command == "write":  # a turn that edits a file, as Claude's turns do
                name, _, text = rest.partition(" ")
                Path(name).write_text(text.replace("\\n", "\n") + "\n")
                self.turn(f"wrote {name}")
            elif line:
                self.turn(line)


if __name__ == "__main__":
    sys.exit(Agent(sys.argv[1:]).run())
