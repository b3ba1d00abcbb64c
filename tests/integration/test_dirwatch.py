"""The board's directory watch (`tui.dirwatch`) against the real kernel: it reports changes of
every kind, not reads; it says when the kernel lost changes; a missing directory is an error;
`Stop` wakes it at once though nothing changes."""

from __future__ import annotations

import os
import queue
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from laneboard.tui import dirwatch

DEADLINE = 30.0


class Watching:
    """`dirwatch.batches` of `dirs` in a thread; its batches on a queue (None: it ended)."""

    def __init__(self, dirs: list[str]) -> None:
        self.stop = dirwatch.Stop()
        self.batches: queue.Queue[set[tuple[str, str]] | BaseException | None] = queue.Queue()
        self.thread = threading.Thread(target=self._run, args=(dirs,), daemon=True)
        self.thread.start()
        assert self.next() == set()  # armed

    def _run(self, dirs: list[str]) -> None:
        try:
            for batch in dirwatch.batches(dirs, self.stop):
                self.batches.put(batch)
        except BaseException as err:  # noqa: BLE001 (handed to the test)
            self.batches.put(err)
        self.batches.put(None)

    def next(self) -> set[tuple[str, str]] | BaseException | None:
        return self.batches.get(timeout=DEADLINE)

    def until(self, wanted: tuple[str, str]) -> set[tuple[str, str]]:
        """Every change reported until `wanted` was."""
        seen: set[tuple[str, str]] = set()
        while wanted not in seen:
            batch = self.next()
            assert isinstance(batch, set), batch
            seen |= batch
        return seen


@pytest.fixture
def watched(tmp_path: Path) -> Iterator[tuple[Path, Watching]]:
    top = tmp_path / "w"
    top.mkdir()
    (top / "kept.txt").write_text("kept\n")
    watching = Watching([str(top)])
    yield top, watching
    watching.stop.set()
    watching.thread.join(timeout=DEADLINE)


def test_every_kind_of_change_is_reported_with_its_kind(watched: tuple[Path, Watching]) -> None:
    top, watching = watched
    new, kept = str(top / "new.txt"), str(top / "kept.txt")
    (top / "new.txt").write_text("1\n")
    assert (dirwatch.ADDED, new) in watching.until((dirwatch.ADDED, new))
    with open(kept, "a") as handle:
        handle.write("more\n")
    watching.until((dirwatch.MODIFIED, kept))
    os.chmod(kept, 0o755)  # git sees an executable bit
    watching.until((dirwatch.MODIFIED, kept))
    os.rename(new, str(top / "moved.txt"))
    seen = watching.until((dirwatch.ADDED, str(top / "moved.txt")))
    assert (dirwatch.DELETED, new) in seen
    os.unlink(kept)
    watching.until((dirwatch.DELETED, kept))
    (top / "sub").mkdir()
    watching.until((dirwatch.ADDED, str(top / "sub")))


def test_reading_is_no_change(watched: tuple[Path, Watching]) -> None:
    """What an agent's grep or a `git status` does (open, read, list) reports nothing: only the
    write that follows comes through, alone."""
    top, watching = watched
    for _ in range(20):
        (top / "kept.txt").read_text()
        os.listdir(top)
        os.stat(top / "kept.txt")
    (top / "marker").write_text("")
    assert watching.until((dirwatch.ADDED, str(top / "marker"))) <= {
        (dirwatch.ADDED, str(top / "marker")),
        (dirwatch.MODIFIED, str(top / "marker")),
    }


def test_stop_ends_a_watch_that_sees_nothing(watched: tuple[Path, Watching]) -> None:
    _top, watching = watched
    watching.stop.set()
    assert watching.next() is None
    watching.stop.set()  # again, after its end: no error


def test_the_watched_directory_removed_is_reported(tmp_path: Path) -> None:
    top = tmp_path / "gone"
    top.mkdir()
    watching = Watching([str(top)])
    top.rmdir()
    watching.until((dirwatch.DELETED, str(top)))
    watching.stop.set()
    watching.thread.join(timeout=DEADLINE)


def test_a_missing_directory_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        next(dirwatch.batches([str(tmp_path / "nowhere")], dirwatch.Stop()))


def test_the_kernels_overflow_is_said(tmp_path: Path) -> None:
    """What the kernel queues when it dropped events (`IN_Q_OVERFLOW`, on no watch), read as
    the watch reads its descriptor: the batch says the changes are unknown."""
    inotify = dirwatch._Inotify.open()
    assert inotify is not None
    read, write = os.pipe2(os.O_NONBLOCK)
    real, inotify.fd = inotify.fd, read
    os.write(write, struct.pack("iIII", -1, 0x4000, 0, 0))
    batch: set[tuple[str, str]] = set()
    assert inotify.read(batch)
    assert batch == {(dirwatch.OVERFLOW, "")}
    for fd in (real, write):
        os.close(fd)
    inotify.close()


def test_without_inotify_the_polled_watch_reports_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the kernel has no inotify, watchfiles' polling loop is used, with the same
    batches."""
    monkeypatch.setattr(dirwatch._Inotify, "open", classmethod(lambda cls: None))
    top = tmp_path / "p"
    top.mkdir()
    watching = Watching([str(top)])
    (top / "new.txt").write_text("1\n")
    watching.until((dirwatch.ADDED, str(top / "new.txt")))
    watching.stop.set()
    assert watching.next() in (None, set())
    watching.thread.join(timeout=DEADLINE)
    assert not watching.thread.is_alive()
