"""Every key of the board is documented, and every declared command with a key is bound: the
key table in docs/board.md and the bindings are made from the same declarations, and this test
fails when they drift apart."""

from __future__ import annotations

from laneboard.core.service.commands import COMMANDS
from laneboard.tui.board.app import BoardApp
from laneboard.tui.board.review import ReviewScreen
from tests.conftest import REPO_ROOT


def test_every_binding_id_is_in_the_board_docs() -> None:
    docs = (REPO_ROOT / "docs" / "board.md").read_text()
    for binding in [*BoardApp.BINDINGS, *ReviewScreen.BINDINGS]:
        assert f"`{binding.id}`" in docs, binding.id  # type: ignore[union-attr]


def test_every_declared_command_with_a_key_is_bound_to_it() -> None:
    bound = {b.id: b.key for b in BoardApp.BINDINGS}  # type: ignore[union-attr]
    for command in COMMANDS:
        if command.key:
            assert bound[command.binding] == command.key
