"""Finalize of a host's task into a repository on this machine (`finalize HOST:TASK --merge
--fetch-into PATH`, docs/hosts.md): the task's branch is fetched over the host's ssh connection,
integrated only when the fetched tip is the SHA reviewed there, through a local task whose
journal records where it came from; the host's task is left in review there."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import git, make_repo, run_cli
from tests.sshd import Remote, remote

__all__ = ["remote"]  # the fixture
pytestmark = pytest.mark.tmux


def commit(worktree: Path, name: str, text: str) -> str:
    (worktree / name).write_text(text)
    git(worktree, "add", name)
    git(worktree, "commit", "-q", "-m", f"add {name}")
    return git(worktree, "rev-parse", "HEAD")


def test_a_hosts_reviewed_task_is_fetched_and_merged_here_exactly_at_its_reviewed_sha(
    tmp_path: Path, remote: Remote
) -> None:
    here = make_repo(tmp_path / "here")
    there = tmp_path / "host" / "repo"
    there.parent.mkdir(parents=True, exist_ok=True)
    git(tmp_path, "clone", "-q", str(here), str(there))
    made = run_cli("new", "t", "--host", "build", "--repo", str(there), "--no-start", cwd=here)
    assert made.code == 0, made.err
    worktree = there / ".worktrees" / "t"
    main_before = git(here, "rev-parse", "main")

    not_yet = run_cli("finalize", "build:t", "--merge", "--fetch-into", str(here), cwd=tmp_path)
    assert not_yet.code == 1 and "has not been reviewed there" in not_yet.err, not_yet

    reviewed = commit(worktree, "feature.txt", "made on the host\n")
    assert run_cli("review", "build:t", "--mark", cwd=tmp_path).code == 0
    moved = commit(worktree, "later.txt", "after the review\n")
    refused = run_cli("finalize", "build:t", "--merge", "--fetch-into", str(here), cwd=tmp_path)
    assert refused.code == 1, refused
    assert f"is at {moved}, not at the reviewed {reviewed}" in refused.err
    assert refused.err.count("\n") == 1
    assert git(here, "rev-parse", "main") == main_before  # nothing integrated
    assert git(here, "for-each-ref", "refs/laneboard/fetched") == ""  # nor kept
    assert json.loads(run_cli("ls", "--json", cwd=here).out)["tasks"] == []

    git(worktree, "reset", "-q", "--hard", reviewed)  # back to what was reviewed
    done = run_cli(
        "finalize", "build:t", "--merge", "--fetch-into", str(here), "--json", cwd=tmp_path
    )
    assert done.code == 0, done.err
    document = json.loads(done.out)
    assert document["name"] == "build-t" and document["state"] == "finalized"
    assert document["reviewed_sha"] == reviewed
    assert git(here, "show", "main:feature.txt") == "made on the host"
    assert git(here, "merge-base", "--is-ancestor", reviewed, "main") == ""
    assert "stays in review on host build" in " ".join(document.get("notes") or [])

    log = json.loads(run_cli("log", "build-t", "--json", cwd=here).out)
    fetched = next(e for e in log["events"] if e["kind"] == "host.fetched")
    assert fetched["data"]["host"] == "build" and fetched["data"]["reviewed"] == reviewed
    there_now = json.loads(remote.laneboard("--repo", str(there), "ls", "--json").out)
    assert [(t["name"], t["state"]) for t in there_now["tasks"]] == [("t", "provisioned")]
