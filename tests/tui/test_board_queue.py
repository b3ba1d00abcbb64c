"""What the board says of the merge queue: a task in line shows its place, one in the batch
under test says so, and the header shows the line, the gate's progress and its time left. On
the fixed board of the snapshot tests, with search-index in the batch under test and spike
second in line."""

from __future__ import annotations

from laneboard.core.domain.models import TaskState
from laneboard.core.domain.queue import EntryState, QueueEntry, QueueLine, QueueView
from laneboard.core.domain.values import replace
from laneboard.tui.board.app import BoardApp
from laneboard.tui.board.feed import Update
from tests.tui.boards import NOW, StaticSource, busy_update


def queued_update() -> Update:
    update = busy_update()
    lines = []
    boards = []
    for board in update.snapshot.repos:
        views = []
        for view in board.tasks:
            name = view.task.name
            if name in ("search-index", "spike"):
                testing = name == "search-index"
                entry = QueueEntry(
                    seq=len(lines) + 1,
                    repo_id=board.repo.id,
                    task_id=view.task.id,
                    target="main",
                    sha="3" * 40,
                    state=EntryState.TESTING if testing else EntryState.WAITING,
                    added_at=NOW - 60,
                )
                line = QueueLine(entry, name, 1 if testing else 2)
                lines.append(line)
                task = replace(view.task, state=TaskState.FINALIZING) if testing else view.task
                view = replace(view, task=task, queue=line)
            views.append(view)
        boards.append(replace(board, tasks=tuple(views)))
    queue = QueueView(tuple(lines), (), gate_started_at=NOW - 12, gate_seconds=30.0)
    boards[0] = replace(boards[0], queue=queue)
    return Update(replace(update.snapshot, repos=tuple(boards)), update.radar)


async def test_rows_and_header_show_the_queue() -> None:
    update = queued_update()
    app = BoardApp(StaticSource(update, None), clock=lambda: NOW, live=False, initial=update)
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.pause()
        states = {row.name: row.cells["state"] for row in app.rows}
        assert states["search-index"] == "in batch"
        assert states["spike"] == "queued #2"
        assert states["checkout-flow"] == "running"
        header = str(app.header.render())
        assert "queue: 1 in line, 1 in the batch, gate running" in header
        assert "s left" in header
