"""A source's repository: where it comes from (a generator named in the source record, a local mirror, a
URL) and its bare clone in the cache. Above `gitops` (plain git) and the generators it may call."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

from tasks_lib import demo_repo, paths
from tasks_lib.errors import InputError
from tasks_lib.gitops import file_lock, git
from tasks_lib.sources import SourceRecord

# Behaviour chosen by a name stored in the data: `clone.generator` of a source record.
GENERATORS: dict[str, Callable[[], Path]] = {"demo": demo_repo.ensure_demo_repo}


def _origin(source: SourceRecord, override: str | Path | None) -> str:
    if override:
        if "://" not in str(override) and not Path(override).exists():
            raise InputError(f"--mirror {override}: no such repository")
        return str(override)
    if source.clone.generator:
        if source.clone.generator not in GENERATORS:
            raise InputError(f"{source.path}: clone.generator: unknown generator {source.clone.generator!r}")
        return str(GENERATORS[source.clone.generator]())
    if source.clone.mirror:
        mirror = Path(os.path.expanduser(source.clone.mirror))
        if not mirror.is_absolute():
            mirror = source.path.parent / mirror
        if not mirror.exists():
            raise InputError(f"{source.path}: clone.mirror: {mirror} does not exist (pass --mirror PATH)")
        return str(mirror)
    return source.clone.url  # type: ignore[return-value]


def repo_dir(source: SourceRecord, mirror_override: str | Path | None = None) -> Path:
    """A bare clone of the source in the cache, created on first use, refreshed when the origin moves."""
    origin = _origin(source, mirror_override)
    dest = paths.cache_dir() / "repos" / f"{source.name}.git"
    with file_lock(f"repo-{source.name}"):
        if not dest.exists():
            dest.parent.mkdir(parents=True, exist_ok=True)
            tmp = dest.with_name(dest.name + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)  # a clone interrupted earlier
            git(["clone", "--quiet", "--mirror", origin, str(tmp)])
            tmp.rename(dest)
        elif Path(origin).exists():
            # Local origins (the generated demo, a mirror) may be newer than our clone: cheap to refresh.
            git(["--git-dir", str(dest), "remote", "set-url", "origin", origin])
            git(["--git-dir", str(dest), "fetch", "--quiet", "--prune", "origin", "+refs/*:refs/*"])
        # A snapshot must hold every tracked file: neutralise export-ignore / export-subst attributes.
        info = dest / "info"
        info.mkdir(exist_ok=True)
        (info / "attributes").write_text("* -export-ignore -export-subst\n")
    return dest
