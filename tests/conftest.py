"""Test isolation and real-world fixtures.

Every test runs with `HOME`, XDG dirs, git's global and system config and `LANEBOARD_HOME` in its
own temporary directory, so neither the developer's configuration nor another test can change a
result. Git repositories are real repositories in `tmp_path`.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.configuration import set_hypothesis_home_dir

if TYPE_CHECKING:
    from tests.procs import Pause

# Tests never write into the checkout: hypothesis keeps its examples and caches in a temporary
# directory, and compiled modules go to a cache outside the checkout (`PYTHONPYCACHEPREFIX`,
# which the laneboard processes the tests start inherit), so that each of them does not compile
# every module again.
set_hypothesis_home_dir(tempfile.mkdtemp(prefix="laneboard-hypothesis-"))
# No per-example deadline and no "too slow" check: on a loaded machine one example can take a
# second, which says nothing about the property (speed is measured by bench/, never by a test).
settings.register_profile("laneboard", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("laneboard")
# A suite started in the background by a non-interactive shell (`nohup ... &`) inherits SIGINT
# ignored, and so would every laneboard process it starts: the Ctrl-C tests need it delivered.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
_PYCACHE = os.path.join(tempfile.gettempdir(), f"laneboard-test-pycache-{os.getuid()}")
sys.pycache_prefix = _PYCACHE
sys.dont_write_bytecode = False
os.environ["PYTHONPYCACHEPREFIX"] = _PYCACHE
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

REPO_ROOT = Path(__file__).resolve().parent.parent
FAKE = [sys.executable, str(REPO_ROOT / "tests" / "fakes" / "claude.py")]
"""The fake Claude Code (`tests/fakes/claude.py`) as an agent profile's command."""
WORKER = " ".join([sys.executable, str(REPO_ROOT / "tests" / "fakes" / "worker.py")])
"""The fake worker (`tests/fakes/worker.py`) as a `--cmd` command line."""
DEADLINE = 30.0
"""Seconds any single laneboard command of a test may take before the test fails."""


@pytest.fixture(autouse=True)
def isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = tmp_path / "home"
    home.mkdir()
    gitconfig = home / ".gitconfig"
    gitconfig.write_text(
        "[user]\n\tname = Test Operator\n\temail = operator@example.invalid\n"
        "[init]\n\tdefaultBranch = main\n"
        "[advice]\n\tdetachedHead = false\n"
        # a test's own commits would each start `git maintenance run --auto` (a process per
        # commit, a gc now and then); laneboard never relies on it, a test that needs a gc runs it
        "[maintenance]\n\tauto = false\n[gc]\n\tauto = 0\n"
    )
    for key in list(os.environ):
        if key.startswith(("GIT_", "LANEBOARD_", "TMUX")):
            monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(home / ".local" / "state"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(gitconfig))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("LANEBOARD_HOME", str(tmp_path / "lbhome"))
    monkeypatch.setenv("LANEBOARD_TMUX_SOCKET", f"lb-test-{os.getpid()}-{tmp_path.name}")
    # A test that forgets to say where runs there, never in the checkout.
    monkeypatch.chdir(tmp_path)
    yield home


def git(cwd: Path, *args: str, check: bool = True, input: str | None = None) -> str:
    """Run git in `cwd` (tests only; the isolated environment applies) and return its stdout."""
    result = subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=False, input=input
    )
    if check and result.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout.strip()


def is_ancestor(cwd: Path, commit: str, of: str) -> bool:
    """`commit` is reachable from `of` (git's own answer, by exit code)."""
    result = subprocess.run(
        ["git", "merge-base", "--is-ancestor", commit, of], cwd=cwd, capture_output=True
    )
    assert result.returncode in (0, 1), result.stderr
    return result.returncode == 0


def make_repo(path: Path) -> Path:
    """A repository at `path` with one commit on `main` holding README.md."""
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q")
    (path / "README.md").write_text("hello\n")
    git(path, "add", "README.md")
    git(path, "commit", "-q", "-m", "initial")
    return path


@pytest.fixture
def shared(isolated_env: Path) -> Path:
    """A directory both the test and a confined command see (in the test's home, which a
    sandbox keeps; the rest of the test's `/tmp` is private to it): FIFOs, reports, scripts."""
    found = isolated_env / "shared"
    found.mkdir(exist_ok=True)
    return found


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo")


@dataclass
class CliResult:
    code: int
    out: str
    err: str


PROCESS_ONLY = ("LANEBOARD_FAULT", "LANEBOARD_PAUSE")
"""Environment variables that make a command kill or block itself: such runs need a process."""


def run_cli(
    *args: str, cwd: Path, env: dict[str, str] | None = None, process: bool = False
) -> CliResult:
    """Run `laneboard` with `args` in `cwd`, as an operator or a script would.

    In this process by default (argument parsing, output and exit code are the same code path,
    without paying a Python start per call); as a separate process when asked, for `exec` (it
    hands its own stdio and signals to the command), and when `env` asks for a fault or a pause.
    """
    extra = env or {}
    if process or args[:1] == ("exec",) or any(key in extra for key in PROCESS_ONLY):
        result = subprocess.run(
            [sys.executable, "-P", "-m", "laneboard", *args],
            cwd=cwd,
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT), **extra},
            capture_output=True,
            text=True,
            check=False,
        )
        return CliResult(result.returncode, result.stdout, result.stderr)
    return _in_process(list(args), cwd, extra)


class Hung(BaseException):
    """An in-process command ran past its deadline (a BaseException, so that the CLI's last
    line of defence does not turn it into an exit code: the test fails, naming the command)."""


def _in_process(args: list[str], cwd: Path, env: dict[str, str]) -> CliResult:
    from laneboard.tui.cli import main

    def hung(signum: int, frame: object) -> None:
        raise Hung(f"laneboard {' '.join(args)} still running after {DEADLINE}s")

    saved_env = dict(os.environ)
    saved_cwd = os.getcwd()
    out, err = io.StringIO(), io.StringIO()
    previous = signal.signal(signal.SIGALRM, hung)
    signal.setitimer(signal.ITIMER_REAL, DEADLINE)
    try:
        os.environ.update(env)
        os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(args)
            except SystemExit as stop:  # argparse's --help
                code = stop.code if isinstance(stop.code, int) else 1
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
    return CliResult(code, out.getvalue(), err.getvalue())


def doc(result: CliResult) -> dict[str, Any]:
    """The JSON document a command printed; the test fails with its stderr if it failed."""
    assert result.code == 0, result.err
    document: dict[str, Any] = json.loads(result.out)
    return document


@pytest.fixture
def cli(repo: Path):  # type: ignore[no-untyped-def]
    """`cli("new", "x", "--no-start")` runs laneboard in the test repo."""

    def run(
        *args: str,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
        process: bool = False,
    ) -> CliResult:
        return run_cli(*args, cwd=cwd or repo, env=env, process=process)

    return run


@pytest.fixture
def pause(tmp_path: Path) -> Iterator[Callable[[str], Pause]]:
    """`pause(point)`: a `tests.procs.Pause` holding a process at that checkpoint; all are
    released when the test ends."""
    from tests.procs import Pause

    made: list[Pause] = []

    def at(point: str) -> Pause:
        held = Pause(tmp_path / f"pause-{len(made)}", point)
        made.append(held)
        return held

    yield at
    for held in made:
        held.close()


@pytest.fixture
def agents(server, repo: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """Agents run on the test's private tmux server; `claude` is the fake. Call the fixture
    with extra `[agents]` lines or profile fields to change the config."""
    monkeypatch.setenv("LANEBOARD_TMUX_SOCKET", server.socket_name)
    home = Path(os.environ["LANEBOARD_HOME"])
    home.mkdir(parents=True, exist_ok=True)

    def configure(agents_lines: str = "", profile_lines: str = "") -> None:
        (home / "config.toml").write_text(
            f"[agents]\n{agents_lines}\n"
            f"[agents.profiles.claude]\ncommand = {json.dumps(FAKE)}\n{profile_lines}\n"
        )

    configure()
    return configure


@pytest.fixture
def workers(agents):  # type: ignore[no-untyped-def]
    """Agents on the test's tmux server, and the fake worker as the `worker` profile (its
    prompt passed on its command line). Call it with `[agents]` lines to change them."""

    from tests.fakes.worker import PROFILE

    def configure(agents_lines: str = "") -> None:
        agents(agents_lines)
        config = Path(os.environ["LANEBOARD_HOME"]) / "config.toml"
        config.write_text(config.read_text() + PROFILE)

    configure()
    return configure
