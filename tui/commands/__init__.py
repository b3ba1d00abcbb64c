"""The command line's handlers, one module per group of commands. Each handler parses nothing
(the parser in `tui.parser` did), calls the service opened at the composition root
(`tui.root`), prints through `tui.output`, and returns the exit code. Imports are made inside
each handler: `laneboard exec`, run for every shimmed tool, loads only what it uses."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from laneboard.tui.parser import Handler


def handlers() -> dict[str, Handler]:
    """Every command's handler by its name (`core.service.commands` declares the commands)."""
    from laneboard.tui.commands import cleanup, hosts, integrate, lanes, tasks, views

    found: dict[str, Handler] = {}
    for group in (tasks, views, cleanup, lanes, integrate, hosts):
        for name in dir(group):
            if name.startswith("cmd_"):
                found[name.removeprefix("cmd_")] = getattr(group, name)
    return found
