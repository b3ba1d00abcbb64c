"""The vault and the verified move of a task's objects (docs/confine.md), with real git: what
laneboard keeps survives the repository losing its refs and a `gc`; what a task plants in its
object directory never reaches the common store unless it is what its name says."""

from __future__ import annotations

import json
import os
import subprocess
import zlib
from hashlib import sha1
from pathlib import Path

import pytest

from tests.conftest import doc, git


def _discarded_with_work(repo: Path, cli) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    """Task `t` with a commit and an untracked file, force-discarded: (its id, the snapshot)."""
    made = doc(cli("new", "t", "--no-start", "--json"))
    worktree = repo / ".worktrees" / "t"
    (worktree / "work.txt").write_text("committed\n")
    git(worktree, "add", "work.txt")
    git(worktree, "commit", "-q", "-m", "work")
    (worktree / "notes.txt").write_text("untracked\n")
    done = doc(cli("discard", "t", "--force", "--json"))
    return made["id"], done["snapshot"]


def test_restore_reads_from_the_vault_after_the_repository_lost_the_snapshot_and_gc_ran(
    repo: Path, cli
) -> None:  # type: ignore[no-untyped-def]
    _task, ref = _discarded_with_work(repo, cli)
    git(repo, "update-ref", "-d", ref)
    git(repo, "reflog", "expire", "--expire=now", "--all")
    git(repo, "gc", "-q", "--prune=now")
    assert git(repo, "for-each-ref", "refs/laneboard/snapshots") == ""
    restored = cli("restore", "t")
    assert restored.code == 0, restored.err
    worktree = repo / ".worktrees" / "t"
    assert (worktree / "work.txt").read_text() == "committed\n"
    assert (worktree / "notes.txt").read_text() == "untracked\n"


DAMAGE = {
    # the snapshot ref made a link to the checked-out branch: a fetch through it moved `main`
    "symbolic to main": lambda repo, ref, sha: git(repo, "symbolic-ref", ref, "refs/heads/main"),
    # a link to nothing: a fetch through it made the branch the restore then refused to reuse
    "symbolic to the task's branch": lambda repo, ref, sha: git(
        repo, "symbolic-ref", ref, "refs/heads/lb/t/work"
    ),
    "symbolic to a new branch": lambda repo, ref, sha: git(
        repo, "symbolic-ref", ref, "refs/heads/ghost"
    ),
    # an annotated tag that peels to the snapshot is not the ref doctor checks
    "a tag of it": lambda repo, ref, sha: git(
        repo, "update-ref", ref, git(repo, "mktag", input=_tag(sha))
    ),
    # gone, with a branch that git's short-name lookup would take for it
    "gone, a look-alike under refs/heads": lambda repo, ref, sha: (
        git(repo, "update-ref", "-d", ref),
        git(repo, "update-ref", f"refs/heads/{ref}", sha),
    ),
}


def _tag(sha: str) -> str:
    return f"object {sha}\ntype commit\ntag x\ntagger t <t@t> 0 +0000\n\nx\n"


@pytest.mark.parametrize("damage", DAMAGE)
def test_restore_puts_back_the_exact_snapshot_ref_and_writes_nothing_through_it(
    repo: Path, cli, damage: str
) -> None:  # type: ignore[no-untyped-def]
    """Check (`snapshot.find`, `vault.bring_back`): restore trusts only the exact ref, stored
    as it was written (no link, no tag, no short-name lookup). Anything else is put back from
    the vault, through no link: no branch moves or appears, and doctor finds nothing after."""
    _task, ref = _discarded_with_work(repo, cli)
    sha = git(repo, "rev-parse", ref)
    branches = git(repo, "for-each-ref", "--format=%(refname) %(objectname)", "refs/heads")
    DAMAGE[damage](repo, ref, sha)
    after_damage = git(repo, "for-each-ref", "--format=%(refname) %(objectname)", "refs/heads")

    restored = cli("restore", "t", "--as", "u")

    assert restored.code == 0, restored.err
    worktree = repo / ".worktrees" / "u"
    assert (worktree / "work.txt").read_text() == "committed\n"
    assert (worktree / "notes.txt").read_text() == "untracked\n"
    now = git(repo, "for-each-ref", "--format=%(refname) %(objectname)", "refs/heads")
    made = {line for line in now.splitlines() if line.startswith("refs/heads/lb/u/")}
    assert set(now.splitlines()) - made == set(after_damage.splitlines())
    assert "refs/heads/main" in branches and git(repo, "rev-parse", "main") in branches
    assert git(repo, "for-each-ref", "--format=%(objecttype)|%(symref)|", ref) == "commit||"
    assert git(repo, "rev-parse", ref) == sha
    kept = [f for f in json.loads(cli("doctor", "--json").out)["findings"] if "kept" in f["kind"]]
    assert kept == []


def test_a_symbolic_snapshot_ref_that_cannot_be_removed_is_never_written_through(
    repo: Path, cli
) -> None:  # type: ignore[no-untyped-def]
    """Check (`vault.bring_back`, the removal's outcome): the link to `main` cannot be removed
    (its lock is held), so nothing is fetched through it: restore refuses, `main` stays."""
    _task, ref = _discarded_with_work(repo, cli)
    main = git(repo, "rev-parse", "main")
    git(repo, "symbolic-ref", ref, "refs/heads/main")
    (repo / ".git" / f"{ref}.lock").write_text("")

    refused = cli("restore", "t", "--as", "u")

    assert refused.code == 1
    assert f"{ref} is a symbolic ref that could not be removed" in refused.err
    assert git(repo, "rev-parse", "main") == main
    assert git(repo, "symbolic-ref", ref) == "refs/heads/main"
    assert not (repo / ".worktrees" / "u").exists()


def test_restore_applies_the_recorded_snapshot_whatever_refs_replace_say(repo: Path, cli) -> None:  # type: ignore[no-untyped-def]
    """Check (`git_env` GIT_NO_REPLACE_OBJECTS): a `refs/replace/` entry for the snapshot's
    tree never stands in for it: the files restored are the ones the snapshot saved."""
    _task, ref = _discarded_with_work(repo, cli)
    tree = git(repo, "rev-parse", f"{ref}^{{tree}}")
    blob = git(repo, "hash-object", "-w", "--stdin", input="planted\n")
    listing = git(repo, "ls-tree", tree).replace(git(repo, "rev-parse", f"{ref}:notes.txt"), blob)
    git(repo, "replace", tree, git(repo, "mktree", input=listing + "\n"))
    assert git(repo, "show", f"{ref}:notes.txt") == "planted"

    restored = cli("restore", "t", "--as", "u")

    assert restored.code == 0, restored.err
    assert (repo / ".worktrees" / "u" / "notes.txt").read_text() == "untracked\n"


def test_doctor_puts_a_lost_snapshot_ref_back_from_the_vault(repo: Path, cli) -> None:  # type: ignore[no-untyped-def]
    _task, ref = _discarded_with_work(repo, cli)
    sha = git(repo, "rev-parse", ref)
    git(repo, "update-ref", "-d", ref)
    git(repo, "gc", "-q", "--prune=now")
    seen = json.loads(cli("doctor", "--json").out)["findings"]
    assert [f["kind"] for f in seen if f["kind"].startswith("kept")] == ["kept-ref-missing"]
    fixed = json.loads(cli("doctor", "--fix", "--json").out)["findings"]
    mine = [f for f in fixed if f["kind"] == "kept-ref-missing"]
    assert mine and mine[0]["fixed"] == "put back from the vault"
    assert git(repo, "rev-parse", ref) == sha
    assert git(repo, "cat-file", "-t", sha) == "commit"
    assert [
        f for f in json.loads(cli("doctor", "--json").out)["findings"] if "kept" in f["kind"]
    ] == []


def test_doctor_copies_into_the_vault_what_it_lacks_and_names_what_is_lost(repo: Path, cli) -> None:  # type: ignore[no-untyped-def]
    _task, ref = _discarded_with_work(repo, cli)
    held = Path(os.environ["LANEBOARD_HOME"]) / "vault"
    vaults = list(held.iterdir())
    git(repo, "--git-dir", str(vaults[0]), "update-ref", "-d", ref)
    fixed = json.loads(cli("doctor", "--fix", "--json").out)["findings"]
    assert [f["fixed"] for f in fixed if f["kind"] == "vault-missing"] == ["copied into the vault"]
    git(repo, "--git-dir", str(vaults[0]), "update-ref", "-d", ref)
    git(repo, "update-ref", "-d", ref)
    lost = json.loads(cli("doctor", "--json").out)["findings"]
    assert [f["kind"] for f in lost if "kept" in f["kind"] or "vault" in f["kind"]] == ["kept-lost"]


def test_a_finalize_anchor_is_kept_in_the_vault(repo: Path, cli) -> None:  # type: ignore[no-untyped-def]
    doc(cli("new", "f", "--no-start", "--json"))
    worktree = repo / ".worktrees" / "f"
    (worktree / "f.txt").write_text("f\n")
    git(worktree, "add", "f.txt")
    git(worktree, "commit", "-q", "-m", "f")
    assert cli("review", "f", "--mark").code == 0
    reviewed = git(repo, "rev-parse", "lb/f/work")
    assert cli("finalize", "f", "--merge").code == 0, "finalize"
    anchor = [
        r for r in git(repo, "for-each-ref", "--format=%(refname)").split() if "finalized" in r
    ]
    git(repo, "update-ref", "-d", anchor[0])
    fixed = json.loads(cli("doctor", "--fix", "--json").out)["findings"]
    assert [f["kind"] for f in fixed if "kept" in f["kind"]] == ["kept-ref-missing"]
    assert git(repo, "rev-parse", anchor[0]) == reviewed


def _loose(content: bytes, kind: bytes = b"blob") -> tuple[str, bytes]:
    raw = kind + b" " + str(len(content)).encode() + b"\0" + content
    return sha1(raw).hexdigest(), zlib.compress(raw)


def test_a_planted_object_never_reaches_the_common_store(repo: Path, tmp_path: Path) -> None:
    """An object file named for content someone will write later, holding other bytes, is
    refused; a true one is moved, byte for byte; nothing is overwritten."""
    from laneboard.core.adapters import taskobjects

    own = tmp_path / "objects"
    future, _ = _loose(b"the merge result everyone will get\n")
    _, evil = _loose(b"the planter's bytes\n")
    (own / future[:2]).mkdir(parents=True)
    (own / future[:2] / future[2:]).write_bytes(evil)
    honest, raw = _loose(b"honest work\n")
    (own / honest[:2]).mkdir(parents=True, exist_ok=True)
    (own / honest[:2] / honest[2:]).write_bytes(raw)
    done = taskobjects.move(own, repo / ".git" / "objects")
    assert done.refused == [future] and done.objects == 1
    assert git(repo, "cat-file", "-p", honest) == "honest work"
    assert not (repo / ".git" / "objects" / future[:2] / future[2:]).exists()
    # Later, the real content arrives from git itself: it is written, not skipped.
    written = subprocess.run(
        ["git", "hash-object", "-w", "--stdin"],
        cwd=repo,
        input=b"the merge result everyone will get\n",
        capture_output=True,
        check=True,
    )
    assert written.stdout.decode().strip() == future
    assert git(repo, "cat-file", "-p", future) == "the merge result everyone will get"


@pytest.mark.tmux
def test_a_tip_the_agent_erased_is_in_the_vault(
    repo: Path, cli, agents, server, shared: Path
) -> None:  # type: ignore[no-untyped-def]
    """An agent commits, then resets its branch away and expires its reflog: the commit it
    made was seen, and the vault holds it."""
    from tests.e2e.test_runtime import eventually

    done = shared / "done"
    script = (
        "echo kept > kept.txt && git add kept.txt && git commit -q -m kept && "
        f"git rev-parse HEAD > {shared}/sha && sleep 2 && git reset -q --hard HEAD~1 && "
        f"git reflog expire --expire=now --all; touch {done}; sleep 300"
    )
    assert cli("new", "t", "--cmd", f"sh -c '{script}'").code == 0
    eventually(lambda: done.exists(), "the agent erased its commit", 60)
    sha = (shared / "sha").read_text().strip()
    vault = next((Path(os.environ["LANEBOARD_HOME"]) / "vault").iterdir())
    task_id = doc(cli("show", "t", "--json"))["id"]
    kept = git(repo, "--git-dir", str(vault), "rev-parse", f"refs/laneboard/tips/{task_id}/{sha}")
    assert kept == sha
    assert git(repo, "--git-dir", str(vault), "cat-file", "-p", f"{sha}:kept.txt") == "kept"
    assert cli("retain", "t").code == 0


def test_doctor_moves_what_a_killed_warden_left_in_a_tasks_object_directory(
    repo: Path, cli
) -> None:  # type: ignore[no-untyped-def]
    made = doc(cli("new", "t", "--no-start", "--json"))
    own = Path(os.environ["LANEBOARD_HOME"]) / "objects" / made["id"]
    name, raw = _loose(b"written inside, never moved\n")
    (own / name[:2]).mkdir(parents=True)
    (own / name[:2] / name[2:]).write_bytes(raw)
    seen = [f for f in json.loads(cli("doctor", "--json").out)["findings"]]
    assert [f["kind"] for f in seen if f["kind"] == "objects-unmoved"] == ["objects-unmoved"]
    fixed = json.loads(cli("doctor", "--fix", "--json").out)["findings"]
    assert [f["fixed"] for f in fixed if f["kind"] == "objects-unmoved"] == ["moved 1"]
    assert git(repo, "cat-file", "-p", name) == "written inside, never moved"
    again = json.loads(cli("doctor", "--json").out)["findings"]
    assert [f for f in again if f["kind"] == "objects-unmoved"] == []
