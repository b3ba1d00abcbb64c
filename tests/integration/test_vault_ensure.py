"""The vault is made whole before anyone can see it: a warden keeping a task's tips and a
discard saving a snapshot may both be the first to use it."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path
from typing import Any

from laneboard.core.adapters import vault
from laneboard.core.domain.errors import LaneboardError


def test_many_first_uses_at_once_all_find_a_whole_vault(repo: Path, tmp_path: Path) -> None:
    sha = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, check=True
    ).stdout.strip()
    for round_ in range(5):
        place = tmp_path / f"v{round_}" / "1.git"
        failed: list[str] = []
        start = threading.Barrier(6)

        def keep(
            n: int, place: Path = place, failed: list[str] = failed, start: Any = start
        ) -> None:
            start.wait()
            try:
                vault.keep(place, repo / ".git", sha, f"refs/laneboard/t{n}")
            except LaneboardError as err:
                failed.append(str(err))

        threads = [threading.Thread(target=keep, args=(n,)) for n in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert failed == []
        assert all(vault.held(place, f"refs/laneboard/t{n}") == sha for n in range(6))
        assert sorted(p.name for p in place.parent.iterdir()) == ["1.git"]  # no leftovers
