"""The review screen: a task's commits, changed files with +/-, the selected file's diff (syntax
colour, line numbers), uncommitted and untracked files apart, the task's radar lines and its
agent's last screen. Keys step through files and hunks; mark, finalize, retain and discard are
answered to the app (`dismiss`), which runs them like any other action.

When the task was reviewed before and its branch moved since, it opens on what changed since
the reviewed SHA (the new commits and their diff, or the range-diff after a rebase); `w` shows
the whole work and back. `c` comments on a line of the highlighted file, `S` sends the open
comments to the agent as one prompt (the same service calls as `laneboard review --comment`
and `--send`); the open comments are listed, outdated ones marked.
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
from textual.widgets import Footer, Input, Label, OptionList, Static
from textual.widgets.option_list import Option

from laneboard.core.domain.errors import LaneboardError
from laneboard.core.domain.review import FileChange, Overlap, Review, Since
from laneboard.core.domain.reviewloop import Comment
from laneboard.tui.board.screens import Box, Dialog

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
        Binding("w", "whole", "Since review / whole", id="review.whole"),
        Binding("c", "comment", "Comment", id="review.comment"),
        Binding("S", "send_comments", "Send comments", id="review.send_comments"),
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
        self.since: Since | None = None
        self.whole = False
        """Showing the whole work rather than what changed since the review."""
        self.comments: list[tuple[Comment, bool]] = []
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
            since = self.service.review_since(self.repo_id, self.task_id)
            comments = self.service.comments(self.repo_id, self.task_id)
        except LaneboardError as err:
            self.app.call_from_thread(self._failed, str(err))
            return
        self.since, self.comments = since, comments
        self.app.call_from_thread(self._show, review, screen)

    def _failed(self, text: str) -> None:
        self.query_one("#summary", Static).update(f"review {self.task_name}: {text}")

    @property
    def files(self) -> tuple[FileChange, ...]:
        """The files shown: those changed since the review, or the whole work's."""
        if self.review is None:
            return ()
        if self.since is not None and not self.whole and self.since.committed is not None:
            return self.since.committed.files
        return self.review.committed.files

    def _show(self, review: Review, screen: str) -> None:
        self.review = review
        files = self.files
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
        since = None if self.whole else self.since
        if since is not None:
            commits.append(f"since your review at {since.reviewed[:8]} (w: whole)\n", style="bold")
        shown = since.committed.commits if since is not None and since.committed else None
        for commit in (shown if shown is not None else review.committed.commits)[:8]:
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
        said = (
            ("uncommitted (not part of the review):\n" + "\n".join(pending[:12])) if pending else ""
        )
        if self.comments:
            notes = [
                f"#{c.id} {c.path}:{c.line} [{c.state.value}]{' outdated' if old else ''}: {c.text}"
                for c, old in self.comments[:8]
            ]
            said = (said + "\n" if said else "") + "comments (S sends):\n" + "\n".join(notes)
        self.query_one("#pending", Static).update(said)
        lines = []
        for overlap in self.radar:
            other = partner(overlap, self.task_id)
            lines.append(f"conflicts with {other}: {', '.join(overlap.check.files[:4])}")
        self.query_one("#radar", Static).update("\n".join(lines))
        tail = "\n".join(screen.rstrip().splitlines()[-7:])
        self.query_one("#screen", Static).update(Text.from_ansi(tail) if tail else "")
        if since is not None and since.range_diff is not None:
            self._show_patch(since.range_diff or "every commit is as you reviewed it")
        elif files:
            options.highlighted = 0
        else:
            self.query_one("#patch", Static).update(
                Text("nothing committed to review", style="dim")
            )

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        if self.review is None or event.option.id is None:
            return
        change = self.files[int(event.option.id)]
        self.load_patch(change)

    @work(thread=True, exclusive=True, group="patch", exit_on_error=False)
    def load_patch(self, change: FileChange) -> None:
        since, review = None if self.whole else self.since, self.review
        try:
            if since is not None and since.committed is not None and review is not None:
                raw = self.service.patch_between(
                    self.repo_id, self.task_id, since.reviewed, review.tip
                )
                raw = _only(raw, change.path)
            else:
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

    def action_whole(self) -> None:
        """What changed since the review, or the whole work."""
        if self.review is None or self.since is None:
            self.notify("there is no earlier review to compare with", timeout=3)
            return
        self.whole = not self.whole
        self._show(self.review, "")

    def action_comment(self) -> None:
        options = self.query_one("#files", OptionList)
        index = options.highlighted
        path = self.files[index].path if index is not None and self.files else ""
        self.app.push_screen(CommentScreen(self.task_name, f"{path}:"), self._commented)

    def _commented(self, got: object) -> None:
        if isinstance(got, tuple):
            self._comment(*got)

    @work(thread=True, group="comment", exit_on_error=False)
    def _comment(self, at: str, text: str) -> None:
        try:
            made = self.service.comment(self.repo_id, self.task_id, at, text)
        except LaneboardError as err:
            self.app.call_from_thread(self.notify, str(err), severity="error", timeout=6)
            return
        self.app.call_from_thread(self.notify, f"comment #{made.id} on {at}", timeout=3)
        self.load()

    @work(thread=True, group="comment", exit_on_error=False)
    def action_send_comments(self) -> None:
        try:
            sent = self.service.send_comments(self.repo_id, self.task_id)
        except LaneboardError as err:
            self.app.call_from_thread(self.notify, str(err), severity="error", timeout=6)
            return
        self.app.call_from_thread(self.notify, f"{len(sent)} comment(s) sent", timeout=3)
        self.load()

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


def _only(patch: bytes, path: str) -> bytes:
    """The part of a unified diff about `path`."""
    parts = patch.split(b"\ndiff --git ")
    wanted = f" b/{path}".encode()
    for n, part in enumerate(parts):
        head = part.split(b"\n", 1)[0]
        if head.endswith(wanted):
            return (
                (b"" if n == 0 else b"diff --git ") + part + (b"\n" if n < len(parts) - 1 else b"")
            )
    return b""


class CommentScreen(Dialog):
    """A comment on a line of the reviewed SHA: `PATH:LINE`, then the text."""

    def __init__(self, task: str, at: str) -> None:
        super().__init__()
        self.task_name, self.at = task, at

    def compose(self) -> ComposeResult:
        with Box(classes="box"):
            yield Label(f"Comment on {self.task_name}", classes="title", markup=False)
            yield Input(
                self.at, compact=True, placeholder="PATH:LINE", id="at", select_on_focus=False
            )
            yield Input(compact=True, placeholder="the comment", id="text")
            yield Label("enter adds it · esc cancels", classes="hint", markup=False)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        at = self.query_one("#at", Input).value.strip()
        text = self.query_one("#text", Input).value.strip()
        if event.input.id == "at":
            self.query_one("#text", Input).focus()
        elif at and text:
            self.dismiss((at, text))
