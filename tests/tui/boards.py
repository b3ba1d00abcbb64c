"""Fixed boards for the snapshot tests: a read model with every state a task can be in, made of
the domain's own values, and a stand-in for the service's read methods that serves them.

The board renders only what the service returns, so a snapshot of a fixed read model is the
board's rendering, pinned: the clock, the ids, the paths and the pane's screen never change.
The live behaviour (the same screens fed by real git and tmux) is in `test_board.py`.
"""

from __future__ import annotations

from typing import Any

from laneboard.core.domain.agents import AgentState, State
from laneboard.core.domain.cleanup import Blocker, BlockerKind
from laneboard.core.domain.lanes import Lease, LeaseKind, LeaseState, WaitKind, WaitReason
from laneboard.core.domain.models import Actor, Event, Repo, Task, TaskState
from laneboard.core.domain.review import (
    Change,
    CommitInfo,
    Committed,
    FileChange,
    MergeCheck,
    Overlap,
    Pending,
    Review,
)
from laneboard.core.domain.verdict import Reason, Verdict
from laneboard.core.domain.views import (
    BoardConfig,
    BoardSnapshot,
    Commit,
    GitState,
    LaneView,
    RepoBoard,
    TaskView,
)
from laneboard.tui.board.feed import Update

NOW = 1_800_000_000.0
"""The frozen clock of every snapshot (ages are counted from it)."""
OK = Verdict(ok=True)


def repo(number: int, name: str) -> Repo:
    return Repo(number, f"/src/{name}/.git", f"/src/{name}", name, NOW - 86400)


def task(
    number: int, name: str, state: TaskState, repo_id: int = 1, ago: float = 60, **more: Any
) -> Task:
    root = {1: "/src/shop", 2: "/src/api"}[repo_id]
    fields: dict[str, Any] = {
        "id": f"{number:012x}",
        "repo_id": repo_id,
        "name": name,
        "state": state,
        "base_ref": "refs/heads/main",
        "base_sha": "1" * 40,
        "branch": f"lb/{name}/work",
        "branch_created_by_us": True,
        "branch_tip_at_creation": "1" * 40,
        "area": f"{root}/.worktrees",
        "worktree_path": f"{root}/.worktrees/{name}",
        "admin_name": name,
        "worktree_created_by_us": True,
        "identity": None,
        "created_at": NOW - 3600 - number * 60,
        "updated_at": NOW - ago,
        "target": "main",
        "agent_profile": "claude",
        "tmux_pane": f"%{number}",
        "tmux_socket": "/tmp/tmux-1000/default",
    }
    fields.update(more)
    return Task(**fields)


def lease(seq: int, lane: str | None, state: LeaseState, command: tuple[str, ...]) -> Lease:
    waiting = state is LeaseState.WAITING
    return Lease(
        seq=seq,
        repo_id=1,
        lane=lane,
        kind=LeaseKind.EXEC,
        state=state,
        holder_pid=4000 + seq,
        holder_start=1,
        command=command,
        created_at=NOW - 50,
        admitted_at=None if waiting else NOW - 42,
        wait_reason=WaitReason(WaitKind.CONFLICT, 1, ("make", "migrate")) if waiting else None,
    )


def clean(ahead: int = 0, behind: int = 0, **counts: int) -> GitState:
    return GitState(
        present=True,
        head="2" * 40,
        ahead=ahead,
        behind=behind,
        last_commit=Commit("2" * 40, "work", NOW - 120),
        **counts,
    )


def busy_update() -> Update:
    """Two repositories and a task in every state the board tells apart."""
    shop, api = repo(1, "shop"), repo(2, "api")
    working = State(AgentState.WORKING, source="hook")
    views = [
        TaskView(
            task(1, "checkout-flow", TaskState.RUNNING, ago=5),
            shop,
            clean(2, modified=3, untracked=1),
            agent=working,
        ),
        TaskView(
            task(2, "login-fix", TaskState.RUNNING, ago=30),
            shop,
            clean(1),
            agent=State(AgentState.WAITING, source="hook"),
        ),
        TaskView(task(3, "search-index", TaskState.READY_FOR_REVIEW, ago=300), shop, clean(4)),
        TaskView(
            task(4, "cart-merge", TaskState.RUNNING, ago=90),
            shop,
            clean(1, 2, conflicted=2),
            agent=State(AgentState.IDLE, source="screen"),
        ),
        TaskView(
            task(5, "flaky-tests", TaskState.RUNNING, ago=700),
            shop,
            clean(),
            agent=State(AgentState.EXITED, 1, source="tmux"),
        ),
        TaskView(
            task(6, "perf", TaskState.RUNNING, repo_id=2, ago=4000),
            api,
            clean(),
            agent=State(AgentState.LOST, source="tmux"),
        ),
        TaskView(
            task(7, "docs", TaskState.PAUSED, repo_id=2, ago=8000, agent_state="paused"),
            api,
            clean(staged=2),
        ),
        TaskView(
            task(8, "spike", TaskState.RETAINED, repo_id=2, ago=90000, agent_state="stopped"),
            api,
            clean(3, 7),
        ),
        TaskView(
            task(9, "queued-one", TaskState.QUEUED, repo_id=2, ago=20, tmux_pane=None),
            api,
            clean(),
        ),
        TaskView(
            task(
                10,
                "moved-away",
                TaskState.PROVISIONED,
                ago=50000,
                tmux_pane=None,
                agent_profile=None,
            ),
            shop,
            GitState(present=False, problem="moved"),
            verdict=Verdict(False, Reason.MISSING, "no directory at the path"),
        ),
    ]
    lanes_shop = (
        LaneView("root", None),
        LaneView("integration", None),
        LaneView(
            "checkout-flow",
            "000000000001",
            running=(lease(3, "000000000001", LeaseState.RUNNING, ("cargo", "test")),),
        ),
        LaneView(
            "search-index",
            "000000000003",
            waiting=(lease(4, "000000000003", LeaseState.WAITING, ("make", "lint")),),
        ),
    )
    with_lanes = {
        "000000000001": lanes_shop[2],
        "000000000003": lanes_shop[3],
    }
    views = [
        TaskView(v.task, v.repo, v.git, with_lanes.get(v.task.id, LaneView(v.task.name, v.task.id)),
                 v.verdict or OK, v.agent)
        for v in views
    ]  # fmt: skip
    boards = (
        RepoBoard(shop, lanes_shop, tuple(v for v in views if v.task.repo_id == 1)),
        RepoBoard(
            api,
            (LaneView("root", None), LaneView("integration", None)),
            tuple(v for v in views if v.task.repo_id == 2),
        ),
    )
    snapshot = BoardSnapshot(at=NOW, slots=4, used=1, repos=boards, cursor=99)
    radar = {
        "000000000003": (overlap(),),
        "000000000004": (overlap(), overlap(target=True)),
    }
    return Update(snapshot, radar)


def overlap(*, target: bool = False) -> Overlap:
    if target:
        return Overlap("cart-merge", "000000000004", None, None, "4" * 40, "1" * 40,
                       MergeCheck(False, ("cart.py",)))  # fmt: skip
    return Overlap("search-index", "000000000003", "cart-merge", "000000000004", "3" * 40,
                   "4" * 40, MergeCheck(False, ("search/index.py",)))  # fmt: skip


def empty_update() -> Update:
    return Update(BoardSnapshot(at=NOW, slots=4, used=0, repos=(), cursor=0), {})


SCREEN = (
    "\x1b[1mFake Claude Code\x1b[0m (session 5b0c…)\n"
    "\x1b[32m●\x1b[0m Read cart.py, checkout.py\n"
    "\x1b[32m●\x1b[0m Edited checkout.py (+12 -3)\n"
    "Do you want to proceed?\n"
    "\x1b[36m\u276f Yes\x1b[0m\n"  # Claude's marker
    "  No (esc to cancel)\n"
)
PATCH = (
    b"diff --git a/search/index.py b/search/index.py\n"
    b"index 1111111..2222222 100644\n"
    b"--- a/search/index.py\n+++ b/search/index.py\n"
    b"@@ -1,4 +1,6 @@\n import re\n+import unicodedata\n \n def tokens(text):\n"
    b"-    return text.split()\n+    text = unicodedata.normalize('NFKC', text)\n"
    b"+    return re.findall(r'\\w+', text.lower())\n"
)


class StaticSource:
    """The service's read methods, answering with the fixed values above."""

    def __init__(self, update: Update, theme: str | None = None) -> None:
        self.update = update
        self.theme = theme
        self.commented: list[tuple[str, str, str]] = []
        """(task id, PATH:LINE, text) of each comment the board made."""

    def board_config(self) -> BoardConfig:
        return BoardConfig(self.theme, False, {}, 200)

    def repos(self) -> list[Repo]:
        return [board.repo for board in self.update.snapshot.repos]

    def profiles(self) -> list[str]:
        return ["aider", "claude", "codex", "gemini", "opencode"]

    def agent_choices(self) -> tuple[list[tuple[str, bool]], str | None]:
        installed = {"claude", "codex"}
        return [(name, name in installed) for name in self.profiles()], "claude"

    def root_of(self, path: Any) -> str | None:
        return None

    def screen(self, task_id: str, *, lines: int = 200) -> str:
        return SCREEN

    def log(self, where: Any, task_id: str) -> tuple[Task, list[Event]]:
        found = next(
            v.task for b in self.update.snapshot.repos for v in b.tasks if v.task.id == task_id
        )
        kinds = ["task.intent", "branch.created", "worktree.created", "agent.started"]
        events = [
            Event(i + 1, task_id, found.repo_id, NOW - 3600 + i, kind, Actor.CLI, {})
            for i, kind in enumerate(kinds)
        ]
        events.append(
            Event(9, task_id, found.repo_id, NOW - 30, "agent.state", Actor.CONTROLLER,
                  {"state": "waiting", "source": "hook"})
        )  # fmt: skip
        return found, events

    def review(self, where: Any, task_id: str) -> tuple[Task, Repo, Review]:
        found, _ = self.log(where, task_id)
        files = (
            FileChange("search/index.py", Change.MODIFIED, added=3, removed=1),
            FileChange("search/test_index.py", Change.ADDED, added=24, removed=0),
            FileChange("docs/search.md", Change.RENAMED, "docs/find.md", 92, 2, 2),
        )
        commits = (
            CommitInfo("3" * 40, "normalize tokens before indexing", "Agent", "a@x", NOW - 400),
            CommitInfo("5" * 40, "tests for unicode queries", "Agent", "a@x", NOW - 350),
        )
        review = Review(
            target="main",
            target_sha="1" * 40,
            merge_base="1" * 40,
            tip="3" * 40,
            committed=Committed(commits, files),
            ahead=2,
            behind=0,
            uncommitted=(Pending("notes.txt", ".M"),),
            untracked=("scratch.log",),
        )
        return found, self.repos()[0], review

    def review_since(self, where: Any, task_id: str) -> None:
        return None

    def comments(self, where: Any, task_id: str) -> list[Any]:
        return []

    def comment(self, where: Any, task_id: str, at: str, text: str) -> Any:
        from laneboard.core.domain.reviewloop import Comment, CommentState, Side

        self.commented.append((task_id, at, text))
        path, _, line = at.rpartition(":")
        return Comment(len(self.commented), task_id, path, int(line), Side.NEW, "3" * 40, text,
                       "", NOW, CommentState.OPEN)  # fmt: skip

    def patch(self, where: Any, task_id: str, paths: tuple[str, ...] = ()) -> bytes:
        return PATCH

    def discard_preview(self, where: Any, task_id: str) -> tuple[Blocker, ...]:
        return (
            Blocker(BlockerKind.UNTRACKED, "untracked file: notes/plan.md", "notes/plan.md"),
            Blocker(BlockerKind.UNCOMMITTED, "uncommitted change: cart.py", "cart.py"),
        )

    def save_theme(self, name: str) -> None:
        self.theme = name

    def close(self) -> None:
        pass
