"""Errors the operator can act on.

Every refusal is a value with a one-line reason; the CLI prints it and exits 1, the TUI shows the
same text. Nothing here carries a traceback to the operator.
"""

from __future__ import annotations


class LaneboardError(Exception):
    """A refused operation. `str(err)` is one line that names the reason and the fact behind it."""

    exit_code = 1

    def __init__(self, message: str, *, details: list[str] | None = None) -> None:
        super().__init__(message)
        self.details: list[str] = list(details or [])


class UsageError(LaneboardError):
    """The command line itself was wrong (exit code 2)."""

    exit_code = 2


class LedgerError(LaneboardError):
    """The ledger file cannot be used (corrupt, newer schema, unreadable); names the file."""


class ConfigError(LaneboardError):
    """A configuration file is invalid; the message names the file and the field."""


class GitError(LaneboardError):
    """A git command or read failed; the message carries git's own first line."""


class WaitTimeout(LaneboardError):
    """Waiting for a lane gave up (exit code 75, EX_TEMPFAIL)."""

    exit_code = 75


class ProvisionFailed(LaneboardError):
    """Provisioning stopped; what it had created was rolled back (the message says what)."""


def describe(err: BaseException) -> str:
    """One line for a refusal, an operating-system error or an interruption."""
    if isinstance(err, KeyboardInterrupt):
        return "interrupted"
    if isinstance(err, OSError) and not isinstance(err, LaneboardError):
        where = f"{err.filename}: " if err.filename else ""
        return f"{where}{err.strerror or err}"
    return str(err)
