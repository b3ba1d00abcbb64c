"""Snapshots save exactly the bytes on disk, whatever the file names hold, whatever filters the
repository configures, and restore writes them back without ever following a link.

Each test goes through the real CLI (`discard --force`, then `restore`) on a real repository and
compares raw bytes, not exit codes.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from tests.conftest import git

# Every byte a Linux file name may hold but `/` and NUL, in the shapes that broke line-based
# interfaces: a leading quote (C-unquoted by git), a trailing CR (stripped), LF, tab, backslash,
# a leading dash (an option), spaces, bytes that are not UTF-8, and a 255-byte name.
ODD_NAMES = [
    b'"a"',
    b"a",
    b'"quoted\\n"',
    b"back\\slash",
    b"ends in cr\r",
    b"\rstarts with cr",
    b"new\nline",
    b"tab\there",
    b"-n",
    b"--help",
    b" leading and trailing ",
    b"\xff\xfe not utf-8 \x80",
    b"caf\xc3\xa9",
    b"\x01\x1f\x7f controls",
    b"x" * 255,
]


def _names_in(directory: Path) -> dict[bytes, bytes]:
    """Raw name -> raw content of every regular file directly in `directory`."""
    found = {}
    for entry in os.scandir(os.fsencode(directory)):
        if entry.is_file(follow_symlinks=False):
            with open(entry.path, "rb") as handle:
                found[entry.name] = handle.read()
    return found


def _blob(repo: Path, spec: str) -> bytes:
    return subprocess.run(
        ["git", "cat-file", "blob", spec], cwd=repo, capture_output=True, check=True
    ).stdout


def _new(cli, name: str) -> Path:
    assert cli("new", name, "--no-start").code == 0
    return Path(json.loads(cli("show", name, "--json").out)["worktree_path"])


def test_every_byte_a_file_name_may_hold_is_saved_and_restored_exactly(repo: Path, cli) -> None:
    """Was lost: paths went to `git hash-object --stdin-paths` one per line, so `"a"` was saved
    with the content of `a`, and a name with a newline made the task impossible to discard."""
    worktree = _new(cli, "t")
    odd = worktree / "odd"
    odd.mkdir()
    for n, name in enumerate(ODD_NAMES):
        with open(os.fsencode(odd) + b"/" + name, "wb") as handle:
            handle.write(b"content %d of " % n + name + b"\n")
    # Tracked too: commit half of them, then change those on disk.
    tracked = ODD_NAMES[::2]
    git(worktree, "add", "--", *(os.fsdecode(b"odd/" + name) for name in tracked))
    git(worktree, "commit", "-q", "-m", "odd names")
    for name in tracked:
        with open(os.fsencode(odd) + b"/" + name, "ab") as handle:
            handle.write(b"changed after the commit\n")
    before = _names_in(odd)
    assert len(before) == len(ODD_NAMES)

    result = cli("discard", "t", "--force")
    assert result.code == 0, result.err
    assert not worktree.exists()
    restored = cli("restore", "t")
    assert restored.code == 0, restored.err
    assert _names_in(odd) == before


def test_files_under_filters_are_saved_as_their_raw_bytes(repo: Path, cli) -> None:
    """Unchanged tracked files are taken from the index only where no attribute can make the
    staged blob differ from the file on disk; here every conversion git has is configured."""
    (repo / ".gitattributes").write_text(
        "*.crlf text eol=crlf\n*.up filter=upper\n*.id ident\n*.auto text\n"
    )
    git(repo, "config", "filter.upper.clean", "tr a-z A-Z")
    git(repo, "config", "filter.upper.smudge", "cat")
    (repo / "a.crlf").write_bytes(b"one\r\ntwo\r\n")
    (repo / "b.up").write_bytes(b"lower case\n")
    (repo / "c.id").write_bytes(b"$Id$\n")
    (repo / "d.auto").write_bytes(b"x\r\ny\r\n")
    (repo / "plain.bin").write_bytes(b"\x00\r\n\xff")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "filtered")
    worktree = _new(cli, "f")
    files = ["a.crlf", "b.up", "c.id", "d.auto", "plain.bin", ".gitattributes"]
    on_disk = {name: (worktree / name).read_bytes() for name in files}
    # The checkout smudged some of them: the bytes on disk are not the staged blobs.
    assert on_disk["a.crlf"] == b"one\r\ntwo\r\n"
    assert on_disk["c.id"] != b"$Id$\n"
    assert git(worktree, "status", "--porcelain") == ""
    (worktree / "untracked.txt").write_text("so that --force is needed\n")

    assert cli("discard", "f", "--force").code == 0
    ref = git(repo, "for-each-ref", "--format=%(refname)", "refs/laneboard/snapshots/")
    for name in files:
        assert _blob(repo, f"{ref}:{name}") == on_disk[name], name
    assert cli("restore", "f").code == 0
    assert {name: (worktree / name).read_bytes() for name in files} == on_disk


def test_restore_never_writes_through_a_directory_symlink(repo: Path, cli, tmp_path) -> None:
    """Was lost: the branch tip has `docs -> <outside>`; the agent replaced the link by a real
    `docs/`. Restore followed the checked-out link and overwrote the outside file with the
    agent's draft, and the restored worktree had no `docs/`."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "notes.md").write_text("ORIGINAL, not the task's\n")
    worktree = _new(cli, "s")
    (worktree / "docs").symlink_to(outside)
    git(worktree, "add", "docs")
    git(worktree, "commit", "-q", "-m", "docs is a link")
    (worktree / "docs").unlink()
    (worktree / "docs").mkdir()
    (worktree / "docs" / "notes.md").write_text("DRAFT\n")

    assert cli("discard", "s", "--force").code == 0
    assert cli("restore", "s").code == 0
    assert (outside / "notes.md").read_text() == "ORIGINAL, not the task's\n"
    docs = (worktree / "docs").lstat()
    assert stat.S_ISDIR(docs.st_mode)
    assert (worktree / "docs" / "notes.md").read_text() == "DRAFT\n"


def test_restore_replaces_a_file_by_a_link_and_a_link_by_a_file(repo: Path, cli) -> None:
    worktree = _new(cli, "k")
    (worktree / "was-file").write_text("file\n")
    (worktree / "was-link").symlink_to("README.md")
    git(worktree, "add", "was-file", "was-link")
    git(worktree, "commit", "-q", "-m", "one of each")
    (worktree / "was-file").unlink()
    (worktree / "was-file").symlink_to("/etc/hostname")
    (worktree / "was-link").unlink()
    (worktree / "was-link").write_text("now a file\n")
    assert cli("discard", "k", "--force").code == 0
    assert cli("restore", "k").code == 0
    assert os.readlink(worktree / "was-file") == "/etc/hostname"
    assert not (worktree / "was-link").is_symlink()
    assert (worktree / "was-link").read_text() == "now a file\n"


@pytest.mark.parametrize("size", [0, 1, 40 << 20])
def test_sizes_from_empty_to_streamed_are_kept(repo: Path, cli, size: int) -> None:
    """Files larger than the in-memory limit are streamed in both directions."""
    worktree = _new(cli, "z")
    content = (bytes(range(256)) * (size // 256 + 1))[:size]
    (worktree / "big.bin").write_bytes(content)
    assert cli("discard", "z", "--force").code == 0
    assert cli("restore", "z").code == 0
    assert (worktree / "big.bin").read_bytes() == content
