"""The review screen: a task's commits, changed files with +/-, the selected file's diff (syntax
colour, line numbers), uncommitted and untracked files apart, the task's radar lines and its
agent's last screen. Keys step through files and hunks; mark, finalize, retain and discard are
answered to the app (`dismiss`), which runs them like any other action.
"""

from __future__ import annotations

from typing import Any

from rich.syntax import Syntax
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, OptionList, Static
from textual.widgets.option_list import Option

from laneboard.core.domain.errors import LaneboardError
from laneboard.core.domain.review import FileChange, Overlap, Review

MAX_DIFF = 200_000
"""Characters of one file's diff shown at most (a huge file is summarized by the service)."""


def file_line(change: FileChange) -> str:
    counts = "binary" if change.binary else f"+{change.added or 0} -{change.removed or 0}"
    moved = f" ← {change.old_path}" if change.old_path else ""
    return f"{change.change.value[:1].upper()} {change.path}{moved}  {counts}"


class ReviewScreen(Screen[str | None]):
    """Review one task (see the module docstring)."""

    DEFAULT_CSS = """
    ReviewScreen #left { width: 46; border-right: solid $panel; }
    ReviewScreen #commits { height: auto; max-height: 10; padding: 0 1; }
    ReviewScreen #files { height: 1fr; border: none; }
    ReviewScreen #pending { height: auto; max-height: 8; padding: 0 1; color: $lb-dirty; }
    ReviewScreen #radar { height: auto; padding: 0 1; color: $lb-conflicted; }
    ReviewScreen #diff { width: 1fr; }
    ReviewScreen #screen { height: 8; border-top: solid $panel; color: $text-muted; }
    ReviewScreen #summary { height: 1; background: $panel; padding: 0 1; }
    """
    BINDINGS = [
        Binding("escape,q", "leave", "Back", id="review.back"),
        Binding("n", "file(1)", "Next file", id="review.next_file"),
        Binding("p", "file(-1)", "Prev file", id="review.prev_file"),
        Binding("right_square_bracket", "hunk(1)", "Next hunk", id="review.next_hunk"),
        Binding("left_square_bracket", "hunk(-1)", "Prev hunk", id="review.prev_hunk"),
        Binding("m", "answer('mark')", "Mark reviewed", id="review.mark"),
        Binding("f", "answer('finalize')", "Finalize", id="review.finalize"),
        Binding("r", "answer('retain')", "Retain", id="review.retain"),
        Binding("d", "answer('discard')", "Discard", id="review.discard"),
    ]

    def __init__(
        self,
        service: Any,
        repo_id: int,
        task_id: str,
        name: str,
        radar: tuple[Overlap, ...],
    ) -> None:
        super().__init__()
        self.service, self.repo_id, self.task_id, self.task_name = service, repo_id, task_id, name
        self.radar = radar
        self.review: Review | None = None
        self.hunks: list[int] = []

    def compose(self) -> ComposeResult:
        yield Static(f"review {self.task_name}: reading…", id="summary", markup=False)
        with Horizontal():
            with Vertical(id="left"):
                yield Static("", id="commits", markup=False)
                yield OptionList(id="files")
                yield Static("", id="pending", markup=False)
                yield Static("", id="radar", markup=False)
            with VerticalScroll(id="diff"):
                yield Static("", id="patch", markup=False)
        yield Static("", id="screen", markup=False)
        yield Footer()

    def on_mount(self) -> None:
        self.load()

    @work(thread=True, exclusive=True, group="review", exit_on_error=False)
    def load(self) -> None:
        try:
            _task, _repo, review = self.service.review(self.repo_id, self.task_id)
            screen = self.service.screen(self.task_id, lines=40)
        except LaneboardError as err:
            self.app.call_from_thread(self._failed, str(err))
            return
        self.app.call_from_thread(self._show, review, screen)

    def _failed(self, text: str) -> None:
        self.query_one("#summary", Static).update(f"review {self.task_name}: {text}")

    def _show(self, review: Review, screen: str) -> None:
        self.review = review
        files = review.committed.files
        reviewed = (
            "reviewed at this tip"
            if review.reviewed_current
            else (
                f"reviewed {review.reviewed_sha[:10]} (moved since)"
                if review.reviewed_sha
                else "not reviewed"
            )
        )
        self.query_one("#summary", Static).update(
            f"review {self.task_name} · {review.tip[:10]} onto {review.target or '?'} · "
            f"↑{review.ahead} ↓{review.behind} · {len(files)} files · {reviewed}"
        )
        commits = Text()
        for commit in review.committed.commits[:8]:
            commits.append(f"{commit.sha[:8]} ", style="bold")
            commits.append(f"{commit.subject[:60]}\n")
        if not review.committed.commits:
            commits.append("no commits since the merge base", style="dim")
        self.query_one("#commits", Static).update(commits)
        options = self.query_one("#files", OptionList)
        options.clear_options()
        options.add_options([Option(Text(file_line(f)), id=str(i)) for i, f in enumerate(files)])
        pending = [f"{p.code} {p.path}" for p in review.uncommitted]
        pending += [f"?? {path}" for path in review.untracked]
        self.query_one("#pending", Static).update(
            ("uncommitted (not part of the review):\n" + "\n".join(pending[:12])) if pending else ""
        )
        lines = []
        for overlap in self.radar:
            other = partner(overlap, self.task_id)
            lines.append(f"conflicts with {other}: {', '.join(overlap.check.files[:4])}")
        self.query_one("#radar", Static).update("\n".join(lines))
        tail = "\n".join(screen.rstrip().splitlines()[-7:])
        self.query_one("#screen", Static).update(Text.from_ansi(tail) if tail else "")
        if files:
            options.highlighted = 0
        else:
            self.query_one("#patch", Static).update(
                Text("nothing committed to review", style="dim")
            )

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        if self.review is None or event.option.id is None:
            return
        change = self.review.committed.files[int(event.option.id)]
        self.load_patch(change)

    @work(thread=True, exclusive=True, group="patch", exit_on_error=False)
    def load_patch(self, change: FileChange) -> None:
        try:
            raw = self.service.patch(self.repo_id, self.task_id, (change.path,))
        except LaneboardError as err:
            raw = str(err).encode()
        text = raw.decode("utf-8", errors="replace")[:MAX_DIFF]
        self.app.call_from_thread(self._show_patch, text)

    def _show_patch(self, text: str) -> None:
        self.hunks = [i for i, line in enumerate(text.splitlines()) if line.startswith("@@")]
        syntax = Syntax(text, "diff", line_numbers=True, word_wrap=False, theme="ansi_dark")
        self.query_one("#patch", Static).update(syntax)
        self.query_one("#diff", VerticalScroll).scroll_home(animate=False)

    def action_file(self, step: int) -> None:
        options = self.query_one("#files", OptionList)
        if options.option_count:
            current = options.highlighted or 0
            options.highlighted = max(0, min(options.option_count - 1, current + step))

    def action_hunk(self, step: int) -> None:
        view = self.query_one("#diff", VerticalScroll)
        here = round(view.scroll_y)
        later = [h for h in self.hunks if (h > here if step > 0 else h < here)]
        if later:
            view.scroll_to(y=later[0] if step > 0 else later[-1], animate=False)

    def action_answer(self, what: str) -> None:
        self.dismiss(what)

    def action_leave(self) -> None:
        self.dismiss(None)


def partner(overlap: Overlap, task_id: str) -> str:
    """Who `task_id` conflicts with on this radar line: the other side of the pair, whichever
    side the task is on, or its target."""
    if overlap.other_id is None:
        return "its target"
    if overlap.task_id == task_id:
        return overlap.other or overlap.other_id
    return overlap.task
