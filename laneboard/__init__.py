"""laneboard: a terminal control plane for supervising several coding agents, each in its own
git worktree, lane and tmux pane.

The distribution's one package. Its subpackages live in the repository's top-level folders
(`core/`, `sessions/`, `tui/`, `themes/`); this directory holds links to them, so that Python,
setuptools, mypy and import-linter all see `laneboard.core`, `laneboard.tui` … as one package
(an editable install maps other folders through an import hook that mypy and import-linter
cannot follow).
"""

__version__ = "0.2.0"
