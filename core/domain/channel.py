"""The channel: the one way a confined task asks anything of laneboard (DESIGN.md section 5a).

A per-task Unix socket, bound into that task's sandbox alone and served outside by laneboard.
The server knows its caller's task by the socket the request came through, never by anything
the request says. This module is the channel's pure part: the frames on the wire, the requests
it accepts (anything else gets one line and a closed connection), and the commands a caller may
run outside, each scoped to its own subtree. Everything not listed here is refused.

Frames: one kind byte, a 4-byte big-endian length, the payload. `J` is a JSON object (a request
or an answer), `O` and `E` are bytes of the outside command's stdout and stderr. A request frame
larger than `MAX_REQUEST` is refused before it is read.
"""

from __future__ import annotations

import json
import struct
from enum import StrEnum
from typing import Any

from laneboard.core.domain.errors import LaneboardError
from laneboard.core.domain.values import value

CALLER_ENV = "LANEBOARD_CALLER"
"""Set by the channel's server (outside) on the command it runs for a caller: the caller's task
id. It only ever narrows what a command may do (`check`): a command run without it, by the
operator, is not scoped."""
MAX_REQUEST = 256 * 1024
"""The largest frame a caller may send (a prompt goes on a command line, 128 KiB at most)."""
CHUNK = 64 * 1024
HEADER = struct.Struct(">cI")
KINDS = (b"J", b"O", b"E")


class ChannelError(LaneboardError):
    """A frame the channel does not accept, or a request it refuses."""


def frame(kind: bytes, payload: bytes) -> bytes:
    return HEADER.pack(kind, len(payload)) + payload


def message(document: dict[str, Any]) -> bytes:
    return frame(b"J", json.dumps(document).encode())


class Decoder:
    """Frames out of a byte stream; `ChannelError` for a kind it does not know or a frame
    longer than `limit` (before reading it)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.buffer = b""

    def feed(self, data: bytes) -> list[tuple[bytes, bytes]]:
        self.buffer += data
        found: list[tuple[bytes, bytes]] = []
        while len(self.buffer) >= HEADER.size:
            kind, size = HEADER.unpack_from(self.buffer)
            if kind not in KINDS:
                raise ChannelError("not a laneboard channel frame")
            if size > self.limit:
                raise ChannelError(f"a message of {size} bytes; the limit is {self.limit}")
            end = HEADER.size + size
            if len(self.buffer) < end:
                break
            found.append((kind, self.buffer[HEADER.size : end]))
            self.buffer = self.buffer[end:]
        return found


def document(kind: bytes, payload: bytes) -> dict[str, Any]:
    """A `J` frame's object; `ChannelError` for anything else."""
    if kind != b"J":
        raise ChannelError("expected a request")
    try:
        found = json.loads(payload.decode("utf-8", "surrogateescape"))
    except ValueError:
        raise ChannelError("a request that is not JSON") from None
    if not isinstance(found, dict):
        raise ChannelError("a request that is not a JSON object")
    return found


class Op(StrEnum):
    """What a caller may ask for: nothing else is accepted."""

    RUN = "run"
    """Run one laneboard command outside, scoped to the caller's subtree (`ALLOWED`)."""
    LEASE = "lease"
    """Hold the caller's own worktree lane while it runs a command in its sandbox."""
    WHOAMI = "whoami"
    """The caller's task (for `laneboard mcp` inside: whose subtree it serves)."""


@value
class Request:
    op: Op
    argv: tuple[str, ...] = ()
    lane: str | None = None
    outer: str = ""
    """`$LANEBOARD_LEASE` of the caller (a claim the server checks, never trusts)."""
    timeout: float | None = None


def request(found: dict[str, Any]) -> Request:
    """The request in a caller's first frame, checked field by field."""
    try:
        op = Op(str(found.get("op")))
    except ValueError:
        raise ChannelError(f"unknown request {found.get('op')!r}") from None
    argv = found.get("argv", [])
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        raise ChannelError("argv must be a list of strings")
    if op is Op.RUN and not argv:
        raise ChannelError("an empty command")
    lane = found.get("lane")
    if lane is not None and not isinstance(lane, str):
        raise ChannelError("lane must be a string")
    outer = found.get("outer") or ""
    if not isinstance(outer, str):
        raise ChannelError("outer must be a string")
    timeout = found.get("timeout")
    if timeout is not None and (
        not isinstance(timeout, (int, float)) or not 0 <= timeout < float("inf")
    ):
        raise ChannelError("timeout must be a number of seconds")
    if op is Op.LEASE and lane is None:
        raise ChannelError("a lease names its lane")
    return Request(op, tuple(argv), lane, outer, None if timeout is None else float(timeout))


# --- what a caller may run outside ----------------------------------------------------------


class Reach(StrEnum):
    """Which tasks a command may name."""

    SELF = "itself"
    BELOW = "a task below it"
    SUBTREE = "itself or a task below it"


@value
class Rule:
    """One command a confined task may run outside, and on what."""

    why: str
    reach: Reach
    names: tuple[str, ...] = ()
    """The parsed arguments (argparse dests) that name tasks."""
    refused: tuple[str, ...] = ()
    """Flags and options it may not give (dests), each the operator's alone."""


ALLOWED: dict[str, Rule] = {
    "new": Rule("delegate: a child task of its own", Reach.SUBTREE, ("parent",), ("no_parent",)),
    "retry": Rule("provision a failed child again", Reach.BELOW, ("name",)),
    "wait": Rule("wait for its children's completion records", Reach.BELOW, ("names",)),
    "signal": Rule("say what it does, report its checks and summary", Reach.SELF, ("task",)),
    "ls": Rule("list its subtree", Reach.SUBTREE, ("children",), ("all",)),
    "show": Rule("read a task of its subtree", Reach.SUBTREE, ("name",), ("verbose",)),
    "log": Rule("read a journal of its subtree", Reach.SUBTREE, ("name",)),
    "review": Rule("read a child's work", Reach.BELOW, ("name",), ("mark",)),
    "send": Rule("prompt a child's agent", Reach.BELOW, ("name",)),
    "cancel": Rule("cancel a child", Reach.BELOW, ("name",)),
}
"""Every command a caller may run through the channel, with why it is needed. Discard,
restore, finalize, rebase, `exec --root`, pause, resume, retain and everything on a parent, a
sibling or another repository are refused: they are the operator's."""


def refused(command: str | None, caller: str) -> str | None:
    """Why `command` is refused outright to `caller` (a task's name), or None."""
    if command is None:
        return f"the board does not run inside task {caller}'s sandbox; open it outside"
    if command == "exec":
        return (
            f"`exec` runs lane commands in the caller's own sandbox (task {caller}); "
            "it is not run outside"
        )
    if command not in ALLOWED:
        return (
            f"`{command}` is not allowed from inside task {caller}'s sandbox; "
            "run it from your own terminal or the board"
        )
    return None


def out_of_reach(reach: Reach, caller: str, ref: str) -> str:
    """The refusal for a task `ref` outside the caller's reach."""
    where = {
        Reach.SELF: f"task {caller} itself",
        Reach.BELOW: f"a task below {caller}",
        Reach.SUBTREE: f"{caller} or a task below it",
    }[reach]
    return f"{ref!r} is not {where}: refused from {caller}'s sandbox"


def flag_refusal(command: str, dest: str, caller: str) -> str:
    option = "--" + dest.replace("_", "-")
    return f"`{command} {option}` is the operator's; refused from task {caller}'s sandbox"
