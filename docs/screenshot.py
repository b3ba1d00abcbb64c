"""Make docs/board.svg: the board's own screenshot (Textual's SVG export) of the fixed busy
board the snapshot tests use. Run from the checkout: `.venv/bin/python docs/screenshot.py`."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["TZ"] = "UTC"
time.tzset()

from laneboard.tui.board.app import BoardApp  # noqa: E402
from tests.tui.boards import NOW, StaticSource, busy_update  # noqa: E402


async def main() -> None:
    update = busy_update()
    app = BoardApp(StaticSource(update), clock=lambda: NOW, live=False, initial=update)
    async with app.run_test(size=(150, 40)) as pilot:
        for _ in range(3):
            await app.workers.wait_for_complete()
            await pilot.pause()
        app.save_screenshot(filename="board.svg", path=str(ROOT / "docs"))


if __name__ == "__main__":
    asyncio.run(main())
