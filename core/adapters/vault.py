"""The vault: a bare repository laneboard owns for each registered repository, under its state
dir (`vault/<repo id>.git`), holding its own copy of every snapshot, finalize anchor and rebase
keep-ref it makes and of every task tip it has seen (DESIGN.md section 5a, "The vault").

Nothing inside a sandbox can reach it (the state dir is masked there), and no `gc` of your
repository can take what it holds: it has its own objects, fetched from your repository (whose
object store holds only verified objects), never an alternate of it. Its refs have the names
the repository's own mirror refs have (`refs/laneboard/snapshots/<task id>/<n>`,
`refs/laneboard/finalized/<task id>`, `refs/laneboard/rebased/...`), plus
`refs/laneboard/tips/<task id>/<sha>` for tips. `restore` and `doctor` bring a ref back into
the repository from here when the repository lost it.

Every call runs git with laneboard's own settings only for the vault (no hooks; the vault's gc
never prunes what its refs hold, and it has no reflogs to expire).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from laneboard.core.adapters import safefs
from laneboard.core.domain.errors import LaneboardError

UPLOAD = "git -c uploadpack.allowAnySHA1InWant=true upload-pack"
"""The other side of a fetch by object id (a local repository, laneboard's own or yours)."""
TIPS = "refs/laneboard/tips/"


def path(state: Path, repo_id: int) -> Path:
    return state / "vault" / f"{repo_id}.git"


def _git(vault: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, GIT_TERMINAL_PROMPT="0")
    done = subprocess.run(
        ["git", "--git-dir", str(vault), "-c", "core.hooksPath=/dev/null", *args],
        capture_output=True,
        env=env,
        check=False,
    )
    if check and done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip().splitlines()
        raise LaneboardError(f"the vault {vault}: git {args[0]}: {said[-1] if said else 'failed'}")
    return done


def ensure(vault: Path) -> Path:
    """The vault, made when missing (a bare repository that never prunes or expires). It is
    made whole beside its place and then renamed there, so another process (a warden keeping
    tips while a discard saves a snapshot) never finds one half made; of two made at once,
    the first renamed stays and the other is removed."""
    if (vault / "HEAD").exists():
        return vault
    vault.parent.mkdir(parents=True, exist_ok=True)
    made = vault.parent / f".{vault.name}.making-{os.getpid()}-{os.urandom(4).hex()}"
    try:
        _git(made, "init", "--quiet", "--bare", str(made))
        for key, setting in (("gc.auto", "0"), ("core.logAllRefUpdates", "false")):
            _git(made, "config", key, setting)
        try:
            os.rename(made, vault)
        except OSError:
            if not (vault / "HEAD").exists():
                raise
    finally:
        shutil.rmtree(made, ignore_errors=True)
    return vault


def held(vault: Path, ref: str) -> str | None:
    """The object `ref` names in the vault, when the vault has both the ref and the object."""
    if not (vault / "HEAD").exists():
        return None
    done = _git(vault, "rev-parse", "--verify", "--quiet", f"{ref}^{{object}}", check=False)
    return done.stdout.decode().strip() or None if done.returncode == 0 else None


def keep(vault: Path, source: Path, sha: str, ref: str) -> None:
    """Copy commit `sha` and everything it reaches from the repository whose git dir is
    `source` into the vault, under `ref` (idempotent; `LaneboardError` when it cannot)."""
    if held(ensure(vault), ref) == sha:
        return
    fetch = ["fetch", "--quiet", "--no-tags", "--no-write-fetch-head", "--no-auto-gc"]
    _git(vault, *fetch, f"--upload-pack={UPLOAD}", str(source), f"+{sha}:{ref}")


def bring_back(vault: Path, dest: Path, sha: str, ref: str) -> None:
    """Copy `sha` from the vault into the repository whose git dir is `dest`, and point its
    `ref` at it (a ref the repository lost: a deleted snapshot or anchor). A symbolic ref
    standing at `ref` is removed first (only the link: what it names is left as it is), since
    a fetch writes through it: into `main`, or into a branch it would create."""
    git = ["git", "--git-dir", str(dest), "-c", "core.hooksPath=/dev/null"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["GIT_TERMINAL_PROMPT"] = "0"

    def run(*args: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run([*git, *args], capture_output=True, env=env, check=False)

    if run("symbolic-ref", "-q", ref).returncode == 0:
        unlinked = run("update-ref", "--no-deref", "-d", ref)
        if unlinked.returncode != 0:  # a fetch now would write through the link
            said = unlinked.stderr.decode(errors="replace").strip().splitlines()
            raise LaneboardError(f"{ref} is a symbolic ref that could not be removed: {said[-1:]}")
    fetch = ["fetch", "--quiet", "--no-tags", "--no-write-fetch-head", "--no-auto-gc"]
    done = run(*fetch, f"--upload-pack={UPLOAD}", str(vault), f"+{sha}:{ref}")
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip().splitlines()
        raise LaneboardError(f"{ref} could not be brought back from the vault: {said[-1:]}")


def tip_ref(task_id: str, sha: str) -> str:
    return f"{TIPS}{task_id}/{sha}"


def keep_tips(vault: Path, source: Path, task_id: str, tips: set[str]) -> int:
    """Keep each of `tips` (commits of a task's branches and HEAD) the vault does not hold yet;
    the number kept now. A tip that cannot be fetched (not moved into the store yet) is left
    for the next call."""
    kept = 0
    for sha in sorted(tips):
        ref = tip_ref(task_id, sha)
        if (vault / ref).exists():
            continue
        try:
            keep(vault, source, sha, ref)
            kept += 1
        except LaneboardError:
            continue
    return kept


def task_tips(common_dir: Path, namespace: list[Path], admin_dir: Path) -> set[str]:
    """The commits a task's own loose refs and detached HEAD name, read from their files (no
    git process; a packed ref is the repository's, kept already). The task owns these files:
    no link is followed, nothing but a small regular file is read."""
    found: set[str] = set()
    for top in namespace:
        for directory, _, names in os.walk(top):
            for name in names:
                if not name.startswith("."):
                    found.add(_object_id(Path(directory) / name))
    found.add(_object_id(admin_dir / "HEAD"))
    found.discard("")
    return found


def _object_id(path: Path) -> str:
    raw = safefs.read_regular(path, 128)
    text = (raw or b"").decode(errors="replace").strip()
    return text if len(text) in (40, 64) and all(c in "0123456789abcdef" for c in text) else ""


def tip_keeper(
    vault: Path, common_dir: Path, task_id: str, refs: list[Path], admin_dir: Path
) -> Callable[[], None]:
    """What a sandbox's watcher calls after each move of its objects: the task's tips that are
    new go to the vault."""
    seen: set[str] = set()

    def keep_new() -> None:
        tips = task_tips(common_dir, refs, admin_dir) - seen
        if tips:
            keep_tips(vault, common_dir, task_id, tips)
            seen.update(t for t in tips if (vault / tip_ref(task_id, t)).exists())

    return keep_new


def drop_ref(repo_id: int, ref: str, sha: str) -> None:
    """Delete `ref` from the vault of repository `repo_id` when it still names `sha` (a
    checkpoint dropped by its bound; its objects go at the vault's own pace)."""
    from laneboard.core.adapters.config import state_dir

    vault = path(state_dir(), repo_id)
    if held(vault, ref) == sha:
        _git(vault, "update-ref", "--no-deref", "-d", ref, sha)


def keep_ref(repo_id: int, common_dir: Path, sha: str, ref: str) -> None:
    """`keep` into the vault of repository `repo_id`."""
    from laneboard.core.adapters.config import state_dir

    keep(path(state_dir(), repo_id), common_dir, sha, ref)
