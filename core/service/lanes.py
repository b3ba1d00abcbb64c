"""The service's lean entry for `laneboard exec` (and every shim): run one command in a lane.

Kept apart from `core.service.app` so that a shimmed `cargo` or `make` pays for neither pygit2
nor pydantic (the settings are validated once per content and then read from a cache), only for
the ledger, the lease store and filesystem verification. It forks and handles signals: call it
only from a process with a single thread (the command line).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from laneboard.core.domain.lanes import Lease


def run_in_lane(
    start: Path,
    lane: str | None,
    argv: list[str],
    *,
    timeout: float | None,
    on_wait: Callable[[Lease], None] | None,
    on_note: Callable[[str], None] | None = None,
) -> int:
    """Run `argv` in `lane` (a task's name or id; None: the root lane) of the repository that
    contains `start`; return the command's exit code (128+N when signal N ended it or the
    wait)."""
    from laneboard.core.adapters.sandboxed import inside

    path = inside()
    if path is not None:  # in a task's sandbox: its lane is held outside, through its channel
        from laneboard.core.operations.exec import run_inside

        return run_inside(path, lane, argv, timeout=timeout, on_note=on_note or (lambda _: None))

    from laneboard.core.adapters.config import load_settings
    from laneboard.core.adapters.db import Database, default_path
    from laneboard.core.adapters.leases import LeaseStore
    from laneboard.core.operations import exec as runner

    database = Database(default_path())
    try:
        target = runner.resolve_target(database, start, lane)
        settings = load_settings(target.root)
        store = LeaseStore(database, settings.lanes.slots)
        try:
            return runner.run(
                store, target, settings, argv, timeout=timeout, on_wait=on_wait, on_note=on_note
            )
        except BaseException as err:
            code = runner.exit_code_for(err)
            if code is None:
                raise
            return code
    finally:
        database.close()
