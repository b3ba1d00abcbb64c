"""The task table: a line-API scroll view that caches one `Strip` per row and repaints only the
rows whose text changed (a `DataTable` re-renders every visible cell on any update,
../shared/AGENTS.md section 5).

Attributes down, messages up: the app sets the rows (`show`), the table posts `Selected` when
the cursor lands on another task. The first line is the column header and stays put while the
rows scroll under it. Colours come from the theme through component classes (no hex here).
"""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from textual.binding import Binding
from textual.geometry import Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from laneboard.core.domain.attention import Attention
from laneboard.tui.board.rows import GAP, Column, Row, fit

ATTENTION_CLASS = {
    Attention.WAITING: "tasks--waiting",
    Attention.CONFLICTED: "tasks--conflicted",
    Attention.FAILED: "tasks--failed",
    Attention.LOST: "tasks--lost",
    Attention.FINISHED: "tasks--finished",
    Attention.REVIEW: "tasks--review",
    Attention.NONE: "tasks--row",
}


MANY_LINES = 20
"""More changed rows than this repaint the whole table at once."""


def clip(text: str, width: int) -> str:
    """`text` in exactly `width` cells: padded, or cut with an ellipsis."""
    if len(text) <= width:
        return text.ljust(width)
    return text[: max(0, width - 1)] + "…"


class TaskTable(ScrollView, can_focus=True):
    """Every task on the board, one line each, with a cursor."""

    COMPONENT_CLASSES = {
        "tasks--header",
        "tasks--row",
        "tasks--cursor",
        *ATTENTION_CLASS.values(),
        "tasks--git-dirty",
        "tasks--git-clean",
        "tasks--lane-running",
        "tasks--lane-waiting",
        "tasks--radar",
    }
    DEFAULT_CSS = """
    TaskTable { height: 1fr; background: $surface; }
    TaskTable > .tasks--header { color: $text-muted; text-style: bold; }
    TaskTable > .tasks--row { color: $foreground; }
    TaskTable > .tasks--cursor { background: $block-cursor-background; text-style: bold; }
    TaskTable > .tasks--waiting { color: $lb-waiting; text-style: bold; }
    TaskTable > .tasks--conflicted { color: $lb-conflicted; text-style: bold; }
    TaskTable > .tasks--failed { color: $lb-failed; text-style: bold; }
    TaskTable > .tasks--lost { color: $lb-lost; text-style: bold; }
    TaskTable > .tasks--finished { color: $lb-working; text-style: bold; }
    TaskTable > .tasks--review { color: $lb-review; text-style: bold; }
    TaskTable > .tasks--git-dirty { color: $lb-dirty; }
    TaskTable > .tasks--git-clean { color: $lb-clean; }
    TaskTable > .tasks--lane-running { color: $lb-lane-running; }
    TaskTable > .tasks--lane-waiting { color: $lb-lane-waiting; }
    TaskTable > .tasks--radar { color: $lb-conflicted; }
    """
    BINDINGS = [
        Binding("down,j", "cursor(1)", "Down", show=False, id="board.down"),
        Binding("up,k", "cursor(-1)", "Up", show=False, id="board.up"),
        Binding("pagedown", "cursor(10)", show=False),
        Binding("pageup", "cursor(-10)", show=False),
        Binding("home,g", "cursor(-100000)", show=False),
        Binding("end,G", "cursor(100000)", show=False),
    ]

    cursor: reactive[int] = reactive(0, repaint=False)
    """The index of the selected row."""

    class Selected(Message):
        """The cursor is on another task (or on none: the board is empty)."""

        def __init__(self, table: TaskTable, row: Row | None) -> None:
            super().__init__()
            self.table = table
            self.row = row

        @property
        def control(self) -> TaskTable:
            return self.table

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.rows: list[Row] = []
        self.many_repos = False
        self._columns: tuple[Column, ...] = ()
        self._cache: dict[str, tuple[tuple[object, ...], Strip]] = {}
        self._selected: str | None = None

    # --- attributes down ------------------------------------------------------------------

    @property
    def selected(self) -> Row | None:
        return self.rows[self.cursor] if 0 <= self.cursor < len(self.rows) else None

    def show(self, rows: list[Row], *, many_repos: bool) -> None:
        """Show `rows` in this order; the cursor stays on the same task when it is still
        there. Only the lines whose row changed are repainted."""
        old = {row.task_id: (i, row) for i, row in enumerate(self.rows)}
        if many_repos != self.many_repos:  # a REPO column comes or goes: every line changes
            self.many_repos = many_repos
            self._columns = ()
            self._cache.clear()
            self.refresh()
        self.rows = rows
        self.virtual_size = Size(0, len(rows) + 1)  # (see `on_resize`)
        position = next((i for i, r in enumerate(rows) if r.task_id == self._selected), None)
        if position is None:
            position = min(self.cursor, max(0, len(rows) - 1))
        moved = position != self.cursor
        self.set_reactive(TaskTable.cursor, position)
        if moved:
            self._keep_visible(position)
        changed = [
            index
            for index, row in enumerate(rows)
            if moved
            or (before := old.get(row.task_id)) is None
            or before[0] != index
            or before[1].cells != row.cells
        ]
        if len(rows) < len(old) or len(changed) > MANY_LINES:
            self.refresh()
        else:
            for index in changed:
                self.refresh_line(index + 1)
        chosen = self.selected
        chosen_id = chosen.task_id if chosen else None
        if chosen_id != self._selected:
            self._selected = chosen_id
            self.post_message(self.Selected(self, chosen))

    def select(self, task_id: str) -> None:
        for index, row in enumerate(self.rows):
            if row.task_id == task_id:
                self.cursor = index
                return

    # --- the cursor -------------------------------------------------------------------------

    def action_cursor(self, step: int) -> None:
        if self.rows:
            self.cursor = max(0, min(len(self.rows) - 1, self.cursor + step))

    def _keep_visible(self, index: int) -> bool:
        """Scroll so the row `index` is on screen; whether it scrolled."""
        body = self.size.height - 1
        top = self.scroll_offset.y
        if index < top:
            self.scroll_to(y=index, animate=False)
        elif body > 0 and index >= top + body:
            self.scroll_to(y=index - body + 1, animate=False)
        else:
            return False
        self.refresh()
        return True

    def watch_cursor(self, old: int, new: int) -> None:
        if not self._keep_visible(new):  # only the two rows whose look changed
            self.refresh_line(old + 1)
            self.refresh_line(new + 1)
        chosen = self.selected
        self._selected = chosen.task_id if chosen else None
        self.post_message(self.Selected(self, chosen))

    def on_resize(self) -> None:
        self._columns = ()
        self._cache.clear()
        # The virtual size holds only the height: every line is as wide as the table (nothing
        # scrolls sideways), and a width in it would make each resize (the first one included,
        # once Textual knows the terminal's size) a second full layout of the screen.

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._cache.clear()

    # --- rendering --------------------------------------------------------------------------

    def columns(self) -> tuple[Column, ...]:
        if not self._columns:
            self._columns = fit(self.size.width or 80, many_repos=self.many_repos)
        return self._columns

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        if y == 0:
            text = "".join(clip(c.title, c.width) + " " * GAP for c in self.columns())
            style = self.get_component_rich_style("tasks--header")
            return Strip([Segment(clip(text, width), style)], width)
        index = self.scroll_offset.y + y - 1
        if index >= len(self.rows):
            return Strip.blank(width, self.rich_style)
        row = self.rows[index]
        cursor = index == self.cursor and self.has_focus_within_app
        signature = (tuple(row.cells.values()), row.attention, cursor, width, self.columns())
        cached = self._cache.get(row.task_id)
        if cached is not None and cached[0] == signature:
            return cached[1]
        strip = self._render_row(row, cursor, width)
        self._cache[row.task_id] = (signature, strip)
        return strip

    @property
    def has_focus_within_app(self) -> bool:
        """The cursor shows whenever the board screen is up (it is the only list there)."""
        return True

    def _render_row(self, row: Row, cursor: bool, width: int) -> Strip:
        base = self.get_component_rich_style(ATTENTION_CLASS[row.attention])
        plain = self.get_component_rich_style("tasks--row")
        if cursor:
            under = self.get_component_rich_style("tasks--cursor")
            base, plain = base + under, plain + under
        segments: list[Segment] = []
        used = 0
        for column in self.columns():
            text = clip(row.cells.get(column.key, ""), column.width) + " " * GAP
            style = self._cell_style(column.key, row, base, plain, cursor)
            segments.append(Segment(text, style))
            used += len(text)
        if used < width:
            segments.append(Segment(" " * (width - used), plain))
        return Strip(segments, width).crop(0, width)

    def _cell_style(self, key: str, row: Row, base: Style, plain: Style, cursor: bool) -> Style:
        if key in ("mark", "name", "state") or (
            row.attention is not Attention.NONE and key in ("agent",)
        ):
            return base
        extra: str | None = None
        if key == "git":
            extra = (
                "tasks--git-clean" if row.cells["git"].startswith("clean") else "tasks--git-dirty"
            )
        elif key == "lane" and row.cells["lane"].startswith("running"):
            extra = "tasks--lane-running"
        elif key == "lane" and row.cells["lane"].startswith("waiting"):
            extra = "tasks--lane-waiting"
        elif key == "radar" and row.cells["radar"]:
            extra = "tasks--radar"
        if extra is None:
            return plain
        style = self.get_component_rich_style(extra)
        if cursor:
            style += self.get_component_rich_style("tasks--cursor")
        return style
