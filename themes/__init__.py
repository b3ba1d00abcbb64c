"""laneboard's themes, registered in one place (`register`).

Each theme is a Textual `Theme` with laneboard's own variables for lifecycle, agent, lane and
git states (`lb-waiting`, `lb-dirty`, ...); the board's TCSS uses only those and Textual's
variables, never a colour of its own. `laneboard-contrast` uses the Okabe-Ito palette, which
stays distinct for the common kinds of colour blindness, and every state also has a marker
character, so no state is told by colour alone.
"""

from __future__ import annotations

from textual.app import App
from textual.theme import Theme

DEFAULT = "laneboard-dark"


def _states(
    waiting: str,
    conflicted: str,
    failed: str,
    lost: str,
    review: str,
    working: str,
    clean: str,
    dirty: str,
) -> dict[str, str]:
    return {
        "lb-waiting": waiting,
        "lb-conflicted": conflicted,
        "lb-failed": failed,
        "lb-lost": lost,
        "lb-review": review,
        "lb-working": working,
        "lb-clean": clean,
        "lb-dirty": dirty,
        "lb-lane-running": working,
        "lb-lane-waiting": waiting,
    }


THEMES: tuple[Theme, ...] = (
    Theme(
        name="laneboard-dark",
        primary="#5FA8D3",
        secondary="#9B8AC4",
        accent="#F2A65A",
        warning="#F2C14E",
        error="#E5484D",
        success="#5BB974",
        foreground="#D8DEE9",
        background="#14171C",
        surface="#1B1F26",
        panel="#242A33",
        dark=True,
        variables=_states(
            waiting="#F2C14E",
            conflicted="#FF6B6B",
            failed="#E5484D",
            lost="#C792EA",
            review="#5FA8D3",
            working="#5BB974",
            clean="#7F8C8D",
            dirty="#F2A65A",
        ),
    ),
    Theme(
        name="laneboard-light",
        primary="#1F6FB2",
        secondary="#6A4C93",
        accent="#B85C00",
        warning="#9A6700",
        error="#C62828",
        success="#2E7D32",
        foreground="#1F2328",
        background="#FAFAF7",
        surface="#F0F0EB",
        panel="#E4E4DC",
        dark=False,
        variables=_states(
            waiting="#9A6700",
            conflicted="#C62828",
            failed="#B71C1C",
            lost="#6A1B9A",
            review="#1F6FB2",
            working="#2E7D32",
            clean="#57606A",
            dirty="#B85C00",
        ),
    ),
    Theme(
        name="laneboard-contrast",
        primary="#56B4E9",
        secondary="#CC79A7",
        accent="#E69F00",
        warning="#F0E442",
        error="#D55E00",
        success="#009E73",
        foreground="#FFFFFF",
        background="#000000",
        surface="#000000",
        panel="#1A1A1A",
        dark=True,
        variables=_states(
            waiting="#F0E442",
            conflicted="#D55E00",
            failed="#D55E00",
            lost="#CC79A7",
            review="#56B4E9",
            working="#009E73",
            clean="#BBBBBB",
            dirty="#E69F00",
        ),
    ),
)


def register(app: App[object]) -> None:
    """Make laneboard's themes available to `app` (its theme switch lists them first)."""
    for theme in THEMES:
        app.register_theme(theme)


def names() -> tuple[str, ...]:
    return tuple(theme.name for theme in THEMES)
