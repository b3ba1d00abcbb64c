"""Pure pieces of delegation: the git settings a pane gets, the tree order `ls` prints, the
checks a completion record keeps, and the lifecycle of a cancel."""

from __future__ import annotations

import pytest

from laneboard.core.domain.confine import no_maintenance
from laneboard.core.domain.lifecycle import IllegalTransition, check_transition, is_terminal
from laneboard.core.domain.models import Actor, Event, Repo, TaskState
from laneboard.core.domain.views import TaskView, latest_checks
from laneboard.tui.output import as_tree, tree_names
from tests.tui.boards import task


def test_no_maintenance_repeats_what_the_caller_had_and_adds_nothing_twice() -> None:
    outer = {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "core.pager", "GIT_CONFIG_VALUE_0": "cat"}
    once = no_maintenance(outer)
    assert once["GIT_CONFIG_COUNT"] == "3"
    assert (once["GIT_CONFIG_KEY_0"], once["GIT_CONFIG_VALUE_0"]) == ("core.pager", "cat")
    keys = {once[f"GIT_CONFIG_KEY_{n}"] for n in range(3)}
    assert keys == {"core.pager", "gc.auto", "maintenance.auto"}
    assert no_maintenance(once) == once  # a child spawned from a pane: the same three
    assert no_maintenance({"GIT_CONFIG_COUNT": "x"})["GIT_CONFIG_COUNT"] == "2"


def test_as_tree_puts_each_child_under_its_parent_and_keeps_the_order_given() -> None:
    repo = Repo(1, "/r/.git", "/r", "r", 0.0)
    a, b = task(1, "a", TaskState.RUNNING), task(2, "b", TaskState.RUNNING)
    a1 = task(3, "a1", TaskState.RUNNING, parent_id=a.id)
    a11 = task(4, "a11", TaskState.RUNNING, parent_id=a1.id)
    orphan = task(5, "o", TaskState.RUNNING, parent_id="gone00000000")
    views = [TaskView(t, repo) for t in (a11, b, a1, orphan, a)]
    ordered = as_tree(views)
    assert [v.task.name for v in ordered] == ["b", "o", "a", "a1", "a11"]
    names = tree_names(ordered)
    assert [names[v.task.id] for v in ordered] == ["b", "o", "a", "└─ a1", "  └─ a11"]


def test_latest_checks_keeps_the_newest_result_of_each_name() -> None:
    def reported(seq: int, name: str, result: str) -> Event:
        return Event(
            seq, "t", 1, float(seq), "check.reported", Actor.CLI, {"name": name, "result": result}
        )

    events = [reported(1, "unit", "fail"), reported(2, "lint", "pass"), reported(3, "unit", "pass")]
    checks = latest_checks(events)
    assert [(c.name, c.passed) for c in checks] == [("unit", True), ("lint", True)]


def test_only_a_task_no_agent_was_handed_can_be_cancelled() -> None:
    for state in (TaskState.PROVISIONED, TaskState.QUEUED):
        check_transition(state, TaskState.CANCELLING)
    for state in (TaskState.RUNNING, TaskState.PAUSED, TaskState.READY_FOR_REVIEW):
        with pytest.raises(IllegalTransition):
            check_transition(state, TaskState.CANCELLING)
    check_transition(TaskState.PROVISIONING, TaskState.CANCELLED)
    check_transition(TaskState.CANCELLING, TaskState.CANCELLED)
    assert is_terminal(TaskState.CANCELLED) and not is_terminal(TaskState.CANCELLING)
