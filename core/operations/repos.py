"""Opening a repository for a command: discovery, settings, registration, and recognising a
repository that moved since it was registered (`operations.steps.relocate`)."""

from __future__ import annotations

from pathlib import Path

from laneboard.core.adapters.config import load_settings
from laneboard.core.adapters.git import GitRepo, discover
from laneboard.core.adapters.ledger import Ledger
from laneboard.core.adapters.repo import NotRegistered, RepoContext
from laneboard.core.domain.models import Actor
from laneboard.core.operations.steps.relocate import find_moved, identity_of, relocate


def open_repo(ledger: Ledger, path: Path, *, register: bool, actor: Actor) -> RepoContext:
    """The repo that contains `path`. With `register`, an unknown repo is registered (as
    `laneboard init` does); otherwise it is refused with a hint. A registered repo that moved
    is recognised by its identity, and its record and laneboard's worktrees are repaired."""

    def registered_root(common: Path) -> Path | None:
        known = ledger.repo_by_common_dir(str(common))
        return Path(known.root) if known else None

    paths = discover(path, registered_root=registered_root)
    settings = load_settings(paths.root)
    git = GitRepo(paths)
    repo = ledger.repo_by_common_dir(str(paths.common_dir))
    created = False
    relocation = None
    if repo is None:
        identity = identity_of(paths, git)
        moved = find_moved(ledger, paths, identity, git)
        if moved is not None:
            relocation = relocate(ledger, moved, paths, settings, actor)
            repo = relocation.repo
        elif not register:
            raise NotRegistered(
                f"{paths.root} is not registered with laneboard; run `laneboard init {paths.root}`"
            )
        else:
            repo, created = ledger.ensure_repo(
                str(paths.common_dir), str(paths.root), paths.name, actor, identity
            )
    elif repo.common_ino is None:  # registered before identities were kept
        ledger.set_repo_identity(repo.id, identity_of(paths, git))
    return RepoContext(
        repo=repo,
        paths=paths,
        settings=settings,
        git=git,
        registered_now=created,
        relocation=relocation,
    )
