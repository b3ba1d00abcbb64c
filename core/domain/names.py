"""Task names and the branch names derived from them.

Pure: every check here runs before anything touches the disk, so a refused name changes nothing.
The branch check follows git's `check-ref-format` rules, so a name laneboard accepts is one git
accepts too.
"""

from __future__ import annotations

import re

from laneboard.core.domain.errors import LaneboardError

TASK_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}")
TASK_ID = re.compile(r"[0-9a-f]{12}")
"""Task ids are 12 hex digits; no name may look like one, so a name or id never means two tasks."""
_REF_FORBIDDEN_CHARS = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]")


class NameError_(LaneboardError):
    """A task name or branch prefix that laneboard refuses."""


def check_task_name(name: str) -> str:
    """Return `name` if it is a valid task name, else raise with the rule it breaks."""
    if not name:
        raise NameError_("task name is empty")
    if len(name) > 63:
        raise NameError_(f"task name is {len(name)} characters long; the limit is 63")
    if not TASK_NAME.fullmatch(name):
        raise NameError_(
            f"task name {name!r} is not allowed: use lower-case letters, digits, '.', '_' and '-', "
            "starting with a letter or digit"
        )
    if ".." in name:
        raise NameError_(f"task name {name!r} contains '..'")
    if name.endswith(".lock"):
        raise NameError_(f"task name {name!r} ends with '.lock'")
    if name.endswith("."):
        raise NameError_(f"task name {name!r} ends with '.'")
    if TASK_ID.fullmatch(name):
        raise NameError_(f"task name {name!r} looks like a task id (12 hex digits)")
    return name


def ref_name_problem(ref: str) -> str | None:
    """Why `ref` breaks git's ref-name rules (`git check-ref-format`), or None if it is fine."""
    if not ref:
        return "it is empty"
    if ref == "@":
        return "it is '@'"
    if ref.startswith("/") or ref.endswith("/"):
        return "it starts or ends with '/'"
    if "//" in ref:
        return "it contains '//'"
    if ".." in ref:
        return "it contains '..'"
    if "@{" in ref:
        return "it contains '@{'"
    if ref.endswith("."):
        return "it ends with '.'"
    bad = _REF_FORBIDDEN_CHARS.search(ref)
    if bad:
        return f"it contains the character {bad.group()!r}"
    for part in ref.split("/"):
        if part.startswith("."):
            return f"its component {part!r} starts with '.'"
        if part.endswith(".lock"):
            return f"its component {part!r} ends with '.lock'"
    return None


def check_branch_prefix(prefix: str) -> str:
    """Return `prefix` if `<prefix>/<name>` can be a branch for any valid task name."""
    problem = ref_name_problem(prefix)
    if problem or prefix.startswith("-"):
        raise NameError_(f"branch prefix {prefix!r} is not allowed: {problem or 'starts with -'}")
    return prefix


BRANCH_LEAF = "work"
"""The last part of a task's branch name: `<prefix>/<name>/work`, so that the task's branches
have a directory of their own (`refs/heads/<prefix>/<name>/`), the only part of `refs/` its
sandbox may write."""


def namespace_for(prefix: str, name: str) -> str:
    """Task `name`'s ref namespace below `refs/heads/`: `<prefix>/<name>`."""
    check_task_name(name)
    check_branch_prefix(prefix)
    return f"{prefix}/{name}"


def branch_for(prefix: str, name: str) -> str:
    """The branch laneboard creates for task `name`: `<prefix>/<name>/work`, checked by git's
    rules."""
    branch = f"{namespace_for(prefix, name)}/{BRANCH_LEAF}"
    problem = ref_name_problem(f"refs/heads/{branch}")
    if problem:
        raise NameError_(f"branch {branch!r} is not a valid git branch name: {problem}")
    return branch


def namespace_of(branch: str, name: str) -> str | None:
    """The ref namespace of task `name` whose branch is `branch` (`<prefix>/<name>` for
    `<prefix>/<name>/work`); None for a branch of the form laneboard used before namespaces
    (`<prefix>/<name>`), which has no directory of its own."""
    head, _, leaf = branch.rpartition("/")
    if leaf != BRANCH_LEAF or "/" not in head or head.rpartition("/")[2] != name:
        return None
    return head


def namespaced(branch: str, name: str) -> str | None:
    """The namespaced form of an old-form branch `<prefix>/<name>` (`<prefix>/<name>/work`);
    None when `branch` is not of that form."""
    head, _, last = branch.rpartition("/")
    if not head or last != name:
        return None
    return f"{branch}/{BRANCH_LEAF}"
