"""Configuration files: merging, errors naming file and field, and the validation cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from laneboard.core.adapters.config import Settings, build, cache_marker, load_settings, validate
from laneboard.core.domain.errors import ConfigError
from tests.conftest import REPO_ROOT

FULL = """
branch_prefix = "agents/lb"
gate = ["make", "check"]
theme = "nord"
[worktrees]
area = "sibling"
[lanes]
repo_cap = 2
wrap = ["cargo", "make"]
[provision]
copy = [".env"]
setup = ["npm", "ci"]
[cleanup]
rebuildable = ["target/"]
[agents]
max_running = 2
[env]
CARGO_TARGET_DIR = "/tmp/t"
"""


def _user_config(text: str) -> Path:
    path = Path(os.environ["LANEBOARD_HOME"]) / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_no_files_give_defaults(repo: Path) -> None:
    assert load_settings(repo) == Settings()


def test_repo_file_overrides_user_file_section_by_section(repo: Path) -> None:
    _user_config('[lanes]\nslots = 5\nrepo_cap = 1\n[worktrees]\narea = "sibling"\n')
    (repo / ".laneboard.toml").write_text("[lanes]\nrepo_cap = 3\n")
    settings = load_settings(repo)
    assert (settings.lanes.slots, settings.lanes.repo_cap) == (5, 3)
    assert settings.worktrees.area == "sibling"


def test_cached_settings_equal_validated_ones(repo: Path) -> None:
    (repo / ".laneboard.toml").write_text(FULL)
    first = load_settings(repo)
    second = load_settings(repo)  # from the cache marker, built without pydantic
    assert first == second
    assert second.lanes.wrap == ("cargo", "make")
    assert second.provision.setup == ("npm", "ci")
    assert second.env == {"CARGO_TARGET_DIR": "/tmp/t"}


def test_remembered_settings_equal_the_validated_ones_for_a_full_file() -> None:
    import tomllib

    data = tomllib.loads(FULL)
    validated = validate(data, "full")
    marker = cache_marker(data)
    assert marker is not None and marker.is_file()
    remembered = validate(data, "full")  # built from the marker, without pydantic
    assert remembered == validated
    assert remembered == build(Settings, json.loads(marker.read_text()))
    assert isinstance(remembered.lanes.wrap, tuple) and remembered.lanes.wrap


def test_second_load_does_not_import_pydantic(repo: Path) -> None:
    (repo / ".laneboard.toml").write_text(FULL)
    load_settings(repo)
    code = (
        "import sys\nfrom pathlib import Path\n"
        "from laneboard.core.adapters.config import load_settings\n"
        f"load_settings(Path({str(repo)!r}))\nprint('pydantic' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ('[worktrees]\narea = "nowhere"\n', "worktrees.area"),
        ("[lanes]\nslots = 0\n", "lanes.slots"),
        ('[lanes]\nslots = "many"\n', "lanes.slots"),
        ("[lanes]\nunknown = 1\n", "lanes.unknown"),
        ('branch_prefix = "a..b"\n', "branch_prefix"),
        ('[lanes]\nwrap = ["a b"]\n', "lanes.wrap"),
    ],
)
def test_bad_field_names_file_and_field(repo: Path, text: str, field: str) -> None:
    (repo / ".laneboard.toml").write_text(text)
    with pytest.raises(ConfigError) as err:
        load_settings(repo)
    assert str(err.value).startswith(f"{repo / '.laneboard.toml'}: field {field}")
    # A refused file is never cached: it is refused again.
    with pytest.raises(ConfigError):
        load_settings(repo)


def test_bad_toml_names_the_user_file() -> None:
    path = _user_config("[lanes\n")
    with pytest.raises(ConfigError, match=f"^{path}: not valid TOML"):
        load_settings(None)


def test_slots_from_the_environment(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LANEBOARD_SLOTS", "7")
    assert load_settings(repo).lanes.slots == 7
    monkeypatch.setenv("LANEBOARD_SLOTS", "0")
    with pytest.raises(ConfigError, match="LANEBOARD_SLOTS"):
        load_settings(repo)


def test_cached_settings_keep_pydantic_conversions(repo: Path) -> None:
    """Regression: a cache hit used the raw TOML, so `slots = "3"` (a string pydantic converts)
    reached the scheduler as a string and crashed `exec` and `lanes`."""
    _user_config('[lanes]\nslots = "3"\n')
    assert load_settings(None).lanes.slots == 3
    assert load_settings(None).lanes.slots == 3  # from the cache


def test_slots_are_machine_wide_not_per_repo(repo: Path) -> None:
    (repo / ".laneboard.toml").write_text("[lanes]\nslots = 9\n")
    with pytest.raises(ConfigError, match=r"field lanes\.slots: slots are machine-wide"):
        load_settings(repo)


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ('[lanes]\nwrap = "make"\n', "field lanes.wrap: expected a list"),
        ("[lanes]\nwrap = [1]\n", "field lanes.wrap[0]: expected a string"),
        ('[lanes]\nslots = "many"\n', "field lanes.slots: expected a whole number"),
        ('[worktrees]\narea = "x"\n', "field worktrees.area: expected 'inside' or 'sibling'"),
        ("[worktrees]\ntypo = 1\n", "field worktrees.typo: not a setting laneboard knows"),
        ('[cleanup]\ntrust_pid_namespace = "maybe"\n', "expected true or false"),
        ("lanes = 3\n", "field lanes: expected a table ([section])"),
    ],
)
def test_config_errors_are_said_in_the_words_of_the_file(repo: Path, text: str, line: str) -> None:
    """Was pydantic's wording ("Input should be a valid tuple")."""
    (repo / ".laneboard.toml").write_text(text)
    with pytest.raises(ConfigError) as err:
        load_settings(repo)
    assert str(err.value).startswith(f"{repo / '.laneboard.toml'}: ")
    assert str(err.value).endswith(line)
    assert "Input should" not in str(err.value)


def test_saving_the_theme_writes_through_a_symlinked_config_and_keeps_its_mode(
    tmp_path: Path,
) -> None:
    """Regression: the board's theme switch replaced a symlinked config.toml with a plain file
    (mode 644), leaving the dotfile it linked to as it was."""
    from laneboard.core.adapters.config import save_user_value

    dotfile = tmp_path / "dotfiles" / "laneboard.toml"
    dotfile.parent.mkdir()
    dotfile.write_text("# mine\n[board]\nbell = false\n")
    dotfile.chmod(0o600)
    home = Path(os.environ["LANEBOARD_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").symlink_to(dotfile)
    save_user_value("theme", "laneboard-light")
    assert (home / "config.toml").is_symlink()
    assert dotfile.read_text() == 'theme = "laneboard-light"\n# mine\n[board]\nbell = false\n'
    assert dotfile.stat().st_mode & 0o777 == 0o600
    save_user_value("theme", "laneboard-dark")  # the line is replaced, not added again
    assert dotfile.read_text().count("theme =") == 1
    assert load_settings(None).theme == "laneboard-dark"


NOT_UTF8 = b'[confine]\nmode = "\xff"\n'
"""A TOML file with one byte that is not UTF-8, at offset 18."""


def test_a_repo_file_that_is_not_utf8_is_named_with_the_byte(repo: Path) -> None:
    """Regression: a `.laneboard.toml` in another encoding gave `internal error:
    UnicodeDecodeError`, naming neither the file nor the byte."""
    path = repo / ".laneboard.toml"
    path.write_bytes(NOT_UTF8)
    with pytest.raises(ConfigError) as err:
        load_settings(repo)
    assert str(err.value) == f"{path}: not UTF-8 text (byte 0xff at offset 18)"


def test_a_user_file_that_is_not_utf8_is_named_with_the_byte() -> None:
    path = _user_config("")
    path.write_bytes(NOT_UTF8)
    with pytest.raises(ConfigError) as err:
        load_settings(None)
    assert str(err.value) == f"{path}: not UTF-8 text (byte 0xff at offset 18)"


def test_saving_the_theme_into_a_user_file_that_is_not_utf8_refuses_and_keeps_it() -> None:
    from laneboard.core.adapters.config import save_user_value

    path = _user_config("")
    path.write_bytes(b"# caf\xe9\n" + NOT_UTF8)
    with pytest.raises(ConfigError) as err:
        save_user_value("theme", "laneboard-light")
    assert str(err.value) == f"{path}: not UTF-8 text (byte 0xe9 at offset 5)"
    assert path.read_bytes() == b"# caf\xe9\n" + NOT_UTF8
    assert sorted(p.name for p in path.parent.iterdir()) == ["config.toml"]
