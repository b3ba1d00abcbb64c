"""The bundle `host check --install` sends to a host: this laneboard and every distribution it
needs, as they are installed here, in one gzipped tar whose members go into a Python
environment's site-packages there (docs/hosts.md).

It is made from what runs here, so the host gets the same version and the same dependencies
without reaching a package index (hosts are often shut off from one). Compiled extensions
(pygit2, pydantic-core, watchfiles) only load on the same Python and platform: `runtime()`
says which this is, and the host is refused unless it says the same. What it reads: the
installed distributions' file lists (`importlib.metadata`), and laneboard's own package
directory (an editable install lists no files of its own). It writes nothing here.
"""

from __future__ import annotations

import importlib.metadata as metadata
import io
import os
import re
import sys
import sysconfig
import tarfile
from collections.abc import Iterator
from pathlib import Path

SKIPPED = ("__pycache__",)
"""Directories left out (the host compiles what it imports)."""


def runtime() -> str:
    """This Python and platform as the host must match it: `cpython-311 linux-x86_64`."""
    return f"{sys.implementation.cache_tag} {sysconfig.get_platform()}"


RUNTIME_PROBE = (
    "import sys, sysconfig; print(sys.implementation.cache_tag, sysconfig.get_platform())"
)
"""What the host's Python runs to print its `runtime()`."""


def _key(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def distributions(root: str = "laneboard") -> list[metadata.Distribution]:
    """`root` and what it requires, installed here (requirements of extras left out; one whose
    marker leaves it out here is not installed, and so not found)."""
    found: dict[str, metadata.Distribution] = {}
    todo = [root]
    while todo:
        name = todo.pop()
        if _key(name) in found:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        found[_key(name)] = dist
        for requirement in dist.requires or []:
            if "extra ==" in requirement.replace('"', "'").replace("'", ""):
                continue
            match = re.match(r"[A-Za-z0-9._-]+", requirement)
            if match:
                todo.append(match[0])
    return [found[key] for key in sorted(found)]


def _members(dist: metadata.Distribution) -> Iterator[tuple[Path, str]]:
    """The files of `dist` under its site-packages, with their names relative to it (scripts
    and data installed elsewhere are left out: the host gets its own entry point)."""
    base = Path(str(dist.locate_file(""))).resolve()
    for file in dist.files or []:
        if any(part in SKIPPED for part in file.parts) or file.parts[0] == "..":
            continue
        path = Path(str(dist.locate_file(file)))
        if path.is_file():
            try:
                yield path, path.resolve().relative_to(base).as_posix()
            except ValueError:
                continue


def _package(package: Path) -> Iterator[tuple[Path, str]]:
    """Every file of laneboard's own package directory (its subpackages may be symbolic links
    in a checkout: followed), named `laneboard/...`."""
    for top, dirs, files in os.walk(package, followlinks=True):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED)
        for name in sorted(files):
            path = Path(top) / name
            yield path, f"laneboard/{path.relative_to(package).as_posix()}"


def build() -> bytes:
    """The bundle: a gzipped tar of every file, named relative to site-packages."""
    import laneboard

    package = Path(laneboard.__file__).parent
    buffer = io.BytesIO()
    added: set[str] = set()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=1, dereference=True) as tar:
        for dist in distributions():
            if _key(dist.metadata["Name"]) == "laneboard":
                files = list(_package(package))
                files += [(p, n) for p, n in _members(dist) if ".dist-info/" in n]
            else:
                files = list(_members(dist))
            for path, name in files:
                if name in added or name.endswith(".pth"):
                    continue
                added.add(name)
                tar.add(path, arcname=name, recursive=False)
    return buffer.getvalue()
