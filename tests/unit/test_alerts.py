"""How the board reaches an operator who is not looking: the desktop route, the terminal's
notification sequence, and the push rate limit (pure parts of `tui.board.alerts`)."""

from __future__ import annotations

import pytest

from laneboard.core.domain.attention import Attention
from laneboard.tui.board.alerts import Alerts, RateLimit, desktop_route, osc

ROUTES = [
    # (setting, environment, notify-send installed, route)
    ("auto", {}, True, "notify-send"),
    ("auto", {}, False, None),
    ("auto", {"TMUX": "/tmp/tmux-1/default,1,0"}, True, "osc9"),  # the terminal's desktop
    ("auto", {"SSH_CONNECTION": "10.0.0.1 5 10.0.0.2 22"}, True, "osc9"),
    ("off", {}, True, None),
    ("notify-send", {"TMUX": "x"}, True, "notify-send"),
    ("notify-send", {}, False, None),
    ("osc777", {}, False, "osc777"),
]


@pytest.mark.parametrize(("setting", "env", "installed", "route"), ROUTES)
def test_the_desktop_notification_goes_where_the_operator_is(
    setting: str, env: dict[str, str], installed: bool, route: str | None
) -> None:
    assert desktop_route(setting, env, "/usr/bin/notify-send" if installed else None) == route


def test_a_task_name_cannot_end_the_terminal_sequence() -> None:
    text = osc("osc9", "laneboard: a\x07b", "x\x1b]2;owned\x07 waits", tmux=False)
    assert text.startswith("\x1b]9;") and text.endswith("\x07")
    assert text.count("\x07") == 1 and text.count("\x1b") == 1
    assert osc("osc777", "t", "b", tmux=False) == "\x1b]777;notify;t;b\x07"
    wrapped = osc("osc9", "t", "b", tmux=True)
    assert wrapped == "\x1bPtmux;\x1b\x1b]9;t: b\x07\x1b\\"


def test_pushes_are_rate_limited_per_task_and_in_all() -> None:
    limit = RateLimit(every=60, burst=3)
    assert limit.allow("a", Attention.WAITING, 0)
    assert not limit.allow("a", Attention.WAITING, 30)  # the same again, too soon
    assert limit.allow("a", Attention.REVIEW, 31)  # another kind
    assert limit.allow("b", Attention.WAITING, 32)
    assert not limit.allow("c", Attention.WAITING, 33)  # three in a minute already
    assert limit.allow("a", Attention.WAITING, 61)
    assert limit.allow("c", Attention.WAITING, 95)


def test_only_what_blocks_is_pushed() -> None:
    posted: list[str] = []
    alerts = Alerts(ntfy="http://127.0.0.1:9/t", env={}, post=lambda url, *_: posted.append(url))
    assert not alerts.push(Attention.FINISHED, "t", "repo", "t finished its turn")
    assert not alerts.push(Attention.CONFLICTED, "t", "repo", "t conflicts")
    assert alerts.push(Attention.FAILED, "t", "repo", "t failed")
    assert not Alerts(env={}).push(Attention.WAITING, "t", "repo", "no push configured")
