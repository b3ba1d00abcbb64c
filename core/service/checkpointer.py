"""`python -m laneboard.core.service.checkpointer '{"task": ID, "turn": TURN}'`: the
checkpoint of one agent turn, taken for the controller in a process of its own
(`ReviewLoopCommands.checkpoint_turns` starts it), so that the controller (a board that stays
open for days) never loads pygit2. It journals what it did as the controller (`checkpoint.created`
or `checkpoint.unchanged`), and exits 0 whatever happened to the worktree: a task that cannot be
read is skipped, as the controller itself skipped it (its next turn tries again).
"""

from __future__ import annotations

import json
import sys

from laneboard.core.domain.errors import LaneboardError
from laneboard.core.domain.models import Actor


def main(argv: list[str]) -> int:
    from laneboard.core.service.app import Service

    asked = json.loads(argv[1])
    service = Service(actor=Actor.CONTROLLER)
    try:
        service.turn_checkpoint(str(asked["task"]), str(asked["turn"]))
    except LaneboardError:
        return 0
    finally:
        service.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
