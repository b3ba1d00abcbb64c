"""What the service's mixins (agent, review and delegation commands) may use of `Service`:
its actor, runtime, per-thread ledger and repository and task lookups. Declared once here for
the type checker; `Service` in `core.service.app` provides them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from laneboard.core.adapters.leases import Cancel
from laneboard.core.domain.lanes import Lease
from laneboard.core.domain.models import Actor, Task

if TYPE_CHECKING:
    from laneboard.core.adapters.ledger import Ledger
    from laneboard.core.adapters.repo import RepoContext
    from laneboard.core.domain.runtime import Runtime
    from laneboard.core.domain.views import Outcome

RepoRef = Path | str | int
"""A repository: a path inside it (its root or any of its worktrees), or its ledger id."""
OnWait = Callable[[Lease], None] | None
OnOutput = Callable[[bytes], None] | None


class ServicePart:
    """The base of a mixin of `Service`."""

    actor: Actor

    if TYPE_CHECKING:

        @property
        def runtime(self) -> Runtime: ...

        def _ledger(self) -> Ledger: ...
        def _open(
            self,
            where: RepoRef,
            *,
            register: bool = False,
            on_wait: OnWait = None,
            cancel: Cancel | None = None,
            on_output: OnOutput = None,
        ) -> RepoContext: ...
        def _find(self, ctx: RepoContext, ref: str) -> Task: ...
        def _live(self, ctx: RepoContext, ref: str) -> Task: ...
        def reconcile(self, *, record: bool = False) -> list[Task]: ...
        def new(
            self,
            where: Path,
            name: str,
            *,
            base: str | None = None,
            target: str | None = None,
        ) -> Outcome: ...
        def mark_reviewed(self, where: RepoRef, task: str) -> object: ...
        def finalize(
            self,
            where: RepoRef,
            task: str,
            *,
            into: str | None = None,
            strategy: str | None = None,
            on_wait: OnWait = None,
            cancel: Cancel | None = None,
            on_output: OnOutput = None,
        ) -> Outcome: ...
        def fork(self, where: RepoRef, task: str) -> Outcome: ...
        def send(
            self,
            where: RepoRef,
            task: str,
            text: str,
            *,
            when_idle: bool = False,
            timeout: float | None = None,
            cancel: Cancel | None = None,
        ) -> Outcome: ...
