"""Copying commits into the vault in this process (`core/adapters/vaultcopy.py`), against git's
own view of the vault: every object a kept commit reaches is there, also after a copy that was
cut off half-way, and also when the walk skips what the previous checkpoint shares."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pygit2
import pytest

from laneboard.core.adapters import vault, vaultcopy
from tests.conftest import git, make_repo


class Cut(Exception):
    """The process died here (a kill, a crash) in the middle of a copy."""


def missing(vault_dir: Path, sha: str) -> list[str]:
    """The objects `sha` reaches that the vault lacks (git's own walk)."""
    listed = subprocess.run(
        ["git", "--git-dir", str(vault_dir), "rev-list", "--objects", "--missing=print", sha],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return [line[1:] for line in listed.splitlines() if line.startswith("?")]


def commit_files(repo: Path, files: dict[str, str]) -> str:
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "files")
    return git(repo, "rev-parse", "HEAD")


@pytest.mark.parametrize("cut_after", [1, 2, 3, 5, 8])
def test_a_copy_cut_off_half_way_never_leaves_an_object_without_what_it_reaches(
    tmp_path: Path, cut_after: int
) -> None:
    repo = make_repo(tmp_path / "repo")
    first = commit_files(repo, {f"d{n}/f{m}.txt": f"{n} {m}\n" for n in range(3) for m in range(3)})
    source = pygit2.Repository(str(repo))
    vault_dir = vault.ensure(tmp_path / "vault.git")
    target = pygit2.Repository(str(vault_dir))
    written = []

    def dies(kind: int, data: bytes) -> None:
        if len(written) == cut_after:
            raise Cut
        written.append(target.odb.write(kind, data))

    with pytest.raises(Cut):
        vaultcopy.copy(source, target, first, write=dies)
    for oid in written:  # each object there has everything it reaches there too
        kind = subprocess.run(
            ["git", "--git-dir", str(vault_dir), "cat-file", "-t", str(oid)],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        if kind in ("commit", "tree"):
            assert missing(vault_dir, str(oid)) == [], f"{kind} {oid} was written before its parts"
    vaultcopy.keep(source, vault_dir, first, "refs/laneboard/checkpoints/t/1")
    assert missing(vault_dir, first) == []


def test_a_walk_beside_the_previous_checkpoint_still_copies_everything_new(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    files = {f"d{n}/e{n}/f{m}.txt": f"{n} {m}\n" for n in range(4) for m in range(4)}
    first = commit_files(repo, files)
    source = pygit2.Repository(str(repo))
    vault_dir = tmp_path / "vault.git"
    vaultcopy.keep(source, vault_dir, first, "refs/laneboard/checkpoints/t/1")
    # a file changed deep down, one moved from a file to a directory, one new directory
    (repo / "d1" / "e1" / "f2.txt").write_text("changed\n")
    (repo / "d2" / "e2" / "f0.txt").unlink()
    (repo / "d2" / "e2" / "f0.txt").mkdir()
    (repo / "d2" / "e2" / "f0.txt" / "inner").write_text("2 0\n")  # an old blob, a new tree
    second = commit_files(repo, {"new/deep/x.txt": "x\n"})
    vaultcopy.keep(
        source, vault_dir, second, "refs/laneboard/checkpoints/t/2",
        like="refs/laneboard/checkpoints/t/1",
    )  # fmt: skip
    assert missing(vault_dir, second) == []
    with pytest.raises(Exception, match="names another commit"):
        vaultcopy.keep(source, vault_dir, first, "refs/laneboard/checkpoints/t/2")
