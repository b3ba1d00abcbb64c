"""Finalize by publishing: exactly the reviewed SHA is pushed (a local bare repository is the
remote), the remote ref is checked, a branch laneboard did not push is never overwritten, and
the pull request goes through `gh` (a stand-in on PATH that records its argv)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.conftest import git

GH = """#!{python}
import json, os, sys
with open(os.environ["GH_LOG"], "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
if sys.argv[1:3] == ["pr", "list"]:
    print(os.environ.get("GH_EXISTING", "[]"))
elif sys.argv[1:3] == ["pr", "create"]:
    print("Creating pull request...", file=sys.stderr)
    print("https://example.invalid/pulls/7")
"""


@pytest.fixture
def remote(repo: Path, tmp_path: Path) -> Path:
    bare = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    git(repo, "remote", "add", "origin", str(bare))
    git(repo, "push", "-q", "origin", "main")
    return bare


@pytest.fixture
def gh(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "gh-bin"
    bin_dir.mkdir()
    script = bin_dir / "gh"
    script.write_text(GH.format(python=sys.executable))
    script.chmod(0o755)
    import os

    return {"PATH": f"{bin_dir}:{os.environ['PATH']}", "GH_LOG": str(tmp_path / "gh.log")}


def reviewed_task(cli, repo: Path, name: str = "p") -> str:  # type: ignore[no-untyped-def]
    assert cli("new", name, "--no-start").code == 0
    w = repo / ".worktrees" / name
    (w / f"{name}.txt").write_text("work\n")
    git(w, "add", "-A")
    git(w, "commit", "-q", "-m", f"{name} work")
    assert cli("review", name, "--mark").code == 0
    return git(w, "rev-parse", "HEAD")


def show(cli, name: str) -> dict:  # type: ignore[no-untyped-def]
    return json.loads(cli("show", name, "--json").out)


def test_publish_pushes_exactly_the_reviewed_sha_and_keeps_the_worktree(
    repo: Path, cli, remote: Path
) -> None:  # type: ignore[no-untyped-def]
    sha = reviewed_task(cli, repo)
    done = cli("finalize", "p", "--publish")
    assert done.code == 0, done.err
    assert git(remote, "rev-parse", "refs/heads/lb/p/work") == sha
    task = show(cli, "p")
    assert (task["state"], task["disposition"], task["finalized_sha"]) == (
        "finalized",
        "published",
        sha,
    )
    assert task["retired_at"] is None and (repo / ".worktrees" / "p").is_dir()
    assert git(repo, "rev-parse", "main") == git(remote, "rev-parse", "main")  # main untouched
    # The operator ends it later: the worktree goes, the task stays published.
    assert cli("discard", "p").code == 0
    task = show(cli, "p")
    assert (task["state"], task["disposition"]) == ("finalized", "published")
    assert task["retired_at"] is not None and not (repo / ".worktrees" / "p").exists()


def test_a_remote_branch_laneboard_did_not_push_is_never_overwritten(
    repo: Path, cli, remote: Path
) -> None:  # type: ignore[no-untyped-def]
    reviewed_task(cli, repo)
    theirs = git(repo, "rev-parse", "main")
    git(repo, "push", "-q", "origin", f"{theirs}:refs/heads/lb/p/work")
    refused = cli("finalize", "p", "--publish")
    assert refused.code == 1 and "laneboard did not push" in refused.err
    assert git(remote, "rev-parse", "refs/heads/lb/p/work") == theirs
    assert show(cli, "p")["state"] == "provisioned"


def test_a_remote_that_ends_up_elsewhere_fails_the_check(repo: Path, cli, remote: Path) -> None:  # type: ignore[no-untyped-def]
    reviewed_task(cli, repo)
    main = git(repo, "rev-parse", "main")
    hook = remote / "hooks" / "post-receive"
    hook.write_text(f"#!/bin/sh\ngit update-ref refs/heads/lb/p/work {main}\n")
    hook.chmod(0o755)
    failed = cli("finalize", "p", "--publish")
    assert failed.code == 1 and "not the reviewed" in failed.err
    assert show(cli, "p")["state"] == "ready_for_review"
    hook.unlink()
    # What is there now is not what laneboard pushed: a retry refuses to overwrite it.
    again = cli("finalize", "p", "--publish")
    assert again.code == 1 and "laneboard did not push" in again.err
    assert git(remote, "rev-parse", "refs/heads/lb/p/work") == main


def test_after_a_timeout_laneboard_looks_and_moves_its_own_branch_only_with_a_lease(
    repo: Path, cli, remote: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    first = reviewed_task(cli, repo)
    flag = tmp_path / "network-is-slow"
    slow = tmp_path / "upload-pack.sh"
    slow.write_text(f'#!/bin/sh\nif [ -e {flag} ]; then sleep 5; fi\nexec git-upload-pack "$@"\n')
    slow.chmod(0o755)
    git(repo, "config", "remote.origin.uploadpack", str(slow))
    hook = remote / "hooks" / "post-receive"
    hook.write_text(f"#!/bin/sh\ntouch {flag}\n")
    hook.chmod(0o755)
    (repo / ".laneboard.toml").write_text("[finalize]\nnetwork_timeout = 1\n")
    failed = cli("finalize", "p", "--publish")
    assert failed.code == 1 and "timed out" in failed.err
    assert git(remote, "rev-parse", "refs/heads/lb/p/work") == first  # it had landed
    assert show(cli, "p")["state"] == "ready_for_review"

    hook.unlink()
    flag.unlink()
    w = repo / ".worktrees" / "p"
    (w / "more.txt").write_text("more\n")
    git(w, "add", "-A")
    git(w, "commit", "-q", "-m", "after the first publish")
    assert cli("review", "p", "--mark").code == 0
    done = cli("finalize", "p", "--publish")
    assert done.code == 0, done.err
    assert git(remote, "rev-parse", "refs/heads/lb/p/work") == git(w, "rev-parse", "HEAD")
    events = json.loads(cli("log", "p", "--json").out)["events"]
    pushes = [e["data"]["argv"] for e in events if e["kind"] == "publish.pushing"]
    assert f"--force-with-lease=refs/heads/lb/p/work:{first}" in pushes[-1]
    assert not any(a in ("--force", "-f") for argv in pushes for a in argv)


def test_a_rejected_push_fails_clearly_and_leaves_the_task_in_review(
    repo: Path, cli, remote: Path
) -> None:  # type: ignore[no-untyped-def]
    reviewed_task(cli, repo)
    hook = remote / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'no pushes today' >&2\nexit 1\n")
    hook.chmod(0o755)
    failed = cli("finalize", "p", "--publish")
    assert failed.code == 1 and "git push to origin failed" in failed.err
    assert show(cli, "p")["state"] == "ready_for_review"
    assert git(remote, "branch", "--list", "lb/p/work") == ""


def test_pr_is_created_with_gh_and_its_url_recorded(
    repo: Path, cli, remote: Path, gh: dict[str, str]
) -> None:  # type: ignore[no-untyped-def]
    reviewed_task(cli, repo)
    done = cli("finalize", "p", "--publish", "--pr", "--draft", env=gh)
    assert done.code == 0, done.err
    calls = [json.loads(line) for line in Path(gh["GH_LOG"]).read_text().splitlines()]
    assert calls[0][:4] == ["pr", "list", "--head", "lb/p/work"] and "--base" in calls[0]
    create = calls[1]
    assert create[:4] == ["pr", "create", "--head", "lb/p/work"]
    assert create[create.index("--base") + 1] == "main" and "--draft" in create
    assert show(cli, "p")["pr_url"] == "https://example.invalid/pulls/7"
    assert "pull request https://example.invalid/pulls/7" in done.out


def test_an_existing_pr_is_found_not_opened_again(
    repo: Path, cli, remote: Path, gh: dict[str, str]
) -> None:  # type: ignore[no-untyped-def]
    reviewed_task(cli, repo)
    env = {**gh, "GH_EXISTING": '[{"url": "https://example.invalid/pulls/3"}]'}
    assert cli("finalize", "p", "--publish", "--pr", env=env).code == 0
    calls = [json.loads(line) for line in Path(gh["GH_LOG"]).read_text().splitlines()]
    assert [c[:2] for c in calls] == [["pr", "list"]]
    assert show(cli, "p")["pr_url"] == "https://example.invalid/pulls/3"


def test_without_gh_the_exact_command_is_printed_and_no_pr_recorded(
    repo: Path, cli, remote: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    reviewed_task(cli, repo)
    empty = tmp_path / "no-gh"
    empty.mkdir()
    import os

    path = ":".join(p for p in os.environ["PATH"].split(":") if not (Path(p) / "gh").exists())
    done = cli("finalize", "p", "--publish", "--pr", env={"PATH": path})
    assert done.code == 0, done.err
    assert "gh is not installed; no pull request was opened. Run: gh pr create" in done.err
    assert "--head lb/p/work" in done.err and "--base main" in done.err
    assert show(cli, "p")["pr_url"] is None
    kinds = [e["kind"] for e in json.loads(cli("log", "p", "--json").out)["events"]]
    assert "pr.not_opened" in kinds


@pytest.mark.parametrize(
    ("point", "state"),
    [("publish.after_intent", "ready_for_review"), ("publish.after_push", "finalized")],
)
def test_crash_during_publish_then_doctor_fix(
    repo: Path, cli, remote: Path, point: str, state: str
) -> None:  # type: ignore[no-untyped-def]
    sha = reviewed_task(cli, repo)
    crashed = cli("finalize", "p", "--publish", env={"LANEBOARD_FAULT": point})
    assert crashed.code == -9
    assert show(cli, "p")["state"] == "finalizing"
    assert cli("doctor", "--fix").code == 0
    assert show(cli, "p")["state"] == state
    if state == "finalized":
        assert git(remote, "rev-parse", "refs/heads/lb/p/work") == sha
    else:
        assert cli("finalize", "p", "--publish").code == 0  # and it can be published again
