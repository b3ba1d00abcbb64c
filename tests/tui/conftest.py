"""The `board` fixture of the Pilot tests (helpers in `tests/tui/pilot.py`)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from laneboard.core.domain.models import Actor
from laneboard.core.service.app import Service
from laneboard.sessions.tmux import TmuxRuntime
from laneboard.tui.board.app import BoardApp
from tests.tui.pilot import until


@pytest.fixture
def board(repo: Path, agents, server):  # type: ignore[no-untyped-def]
    """`async with board() as (app, pilot)`: the board open on the test's repo and tmux."""

    @contextlib.asynccontextmanager
    async def opened(size: tuple[int, int] = (160, 45)) -> AsyncIterator[tuple[BoardApp, Any]]:
        service = Service(actor=Actor.TUI, runtime=TmuxRuntime(Service.tmux_socket()))
        app = BoardApp(service, here=str(repo))
        app.told = []  # type: ignore[attr-defined]
        notify = app.notify

        def heard(message: str, **kwargs: Any) -> None:
            app.told.append(message)  # type: ignore[attr-defined]
            notify(message, **kwargs)

        app.notify = heard  # type: ignore[method-assign]
        async with app.run_test(size=size) as pilot:
            await until(pilot, lambda: app.update_ is not None, "the first paint")
            yield app, pilot
            await pilot.press("q")

    return opened
