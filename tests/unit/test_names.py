"""Task names and branch names are checked before anything touches the disk."""

from __future__ import annotations

import subprocess

import pytest
from hypothesis import given
from hypothesis import strategies as st

from laneboard.core.domain.names import (
    NameError_,
    branch_for,
    check_branch_prefix,
    check_task_name,
    ref_name_problem,
)


@pytest.mark.parametrize(
    "name",
    ["fix-login", "a", "0", "v1.2_rc-3", "a" * 63, "x.y", "a-", "a_"],
)
def test_accepts_valid_task_names(name: str) -> None:
    assert check_task_name(name) == name
    assert branch_for("lb", name) == f"lb/{name}/work"


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("", "empty"),
        ("..", "not allowed"),
        ("a..b", "'..'"),
        ("a/b", "not allowed"),
        ("-x", "not allowed"),
        (".x", "not allowed"),
        ("x.lock", ".lock"),
        ("x.", "ends with '.'"),
        ("Upper", "not allowed"),
        ("has space", "not allowed"),
        ("a" * 64, "64 characters"),
        ("a" * 200, "200 characters"),
        ("x@{1}", "not allowed"),
        ("ü", "not allowed"),
    ],
)
def test_refuses_bad_task_names_with_one_line(name: str, why: str) -> None:
    with pytest.raises(NameError_) as err:
        check_task_name(name)
    message = str(err.value)
    assert why in message
    assert "\n" not in message


@pytest.mark.parametrize("prefix", ["lb", "agents/lb", "team.x"])
def test_accepts_branch_prefixes(prefix: str) -> None:
    assert check_branch_prefix(prefix) == prefix


@pytest.mark.parametrize("prefix", ["", "-lb", "lb/", "/lb", "a..b", "a b", "x.lock", ".x", "a//b"])
def test_refuses_branch_prefixes(prefix: str) -> None:
    with pytest.raises(NameError_):
        check_branch_prefix(prefix)


def _git_accepts(ref: str) -> bool:
    result = subprocess.run(["git", "check-ref-format", ref], capture_output=True, check=False)
    return result.returncode == 0


@given(st.text(alphabet="ab./-_:~^@{}*?[\\ \x7f\x01l", min_size=1, max_size=12))
def test_ref_rules_agree_with_git(ref: str) -> None:
    """Our ref check and `git check-ref-format` agree on every sampled name."""
    full = f"refs/heads/{ref}"
    assert (ref_name_problem(full) is None) == _git_accepts(full), full


def test_a_name_that_looks_like_a_task_id_is_refused() -> None:
    """A name equal to another task's id would make `--lane X` ambiguous."""
    with pytest.raises(NameError_, match="looks like a task id"):
        check_task_name("0123456789ab")
    assert check_task_name("0123456789abc") == "0123456789abc"
