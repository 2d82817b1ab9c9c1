"""A source's repository: where it comes from (a generator named in the source record, a local mirror, a
URL) and its bare clone in the cache. Above `gitops` (plain git) and the generators it may call."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from tasks_lib.core import paths
from tasks_lib.core.errors import InputError
from tasks_lib.sources import demo_repo
from tasks_lib.sources.gitops import file_lock, git
from tasks_lib.sources.record import SourceRecord

# Behaviour chosen by a name stored in the data: `clone.generator` of a source record.
GENERATORS: dict[str, Callable[[], Path]] = {"demo": demo_repo.ensure_demo_repo}


def origin(source: SourceRecord, override: str | Path | None = None) -> str:
    """Where the source's clone comes from: `--mirror`, the record's generator, mirror or URL. A local path that
    does not exist, or is no git repository, is an input error naming it (checked before anything starts)."""
    if override:
        if "://" not in str(override):
            path = Path(override)
            if not path.exists():
                raise InputError(f"--mirror {override}: no such repository")
            if not ((path / "HEAD").is_file() or (path / ".git").exists()):
                raise InputError(f"--mirror {override}: not a git repository (no HEAD, no .git)")
        return str(override)
    if source.clone.generator:
        if source.clone.generator not in GENERATORS:
            raise InputError(f"{source.path}: clone.generator: unknown generator {source.clone.generator!r}")
        return str(GENERATORS[source.clone.generator]())
    if source.clone.mirror:
        mirror = Path(os.path.expanduser(expand_vars(source.clone.mirror, f"{source.path}: clone.mirror")))
        if not mirror.is_absolute():
            mirror = source.path.parent / mirror
        if not mirror.exists():
            raise InputError(f"{source.path}: clone.mirror: {mirror} does not exist (pass --mirror PATH)")
        return str(mirror)
    return source.clone.url  # type: ignore[return-value]


_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


def expand_vars(value: str, where: str) -> str:
    """`$NAME` / `${NAME}` replaced by the environment's value, so a committed record names no machine's path
    (`mirror = "${PBENCH_MIRRORS}/IBM+mcp-context-forge/repo"`). An unset or empty variable is an input error
    naming it: a path silently missing its root would point somewhere else."""

    def value_of(match: re.Match[str]) -> str:
        name = match[1] or match[2]
        found = os.environ.get(name, "")
        if not found:
            raise InputError(
                f"{where}: {value!r} needs ${name}, which is not set (set it, or pass --mirror PATH)"
            )
        return found

    return _VAR.sub(value_of, value)


# What `--mirror` gives an evaluation command: one path (the selection's one source), or one per source name.
Mirrors = str | Mapping[str, str] | None
_NAMED = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_.-]*)=(.+)$")


def parse_mirrors(values: Sequence[str | Path]) -> Mirrors:
    """`--mirror` values: none; one PATH; or SOURCE=PATH, repeatable (a corpus of several sources). A value
    that is an existing path is a path, even with a "=" in it."""
    values = [str(v) for v in values]
    if not values:
        return None
    named: dict[str, str] = {}
    bare = []
    for value in values:
        match = _NAMED.match(value)
        if match and not Path(value).exists():
            if match[1] in named:
                raise InputError(f"--mirror {value}: source {match[1]!r} given twice")
            named[match[1]] = match[2]
        else:
            bare.append(value)
    if bare and (named or len(bare) > 1):
        raise InputError(
            f"--mirror {bare[0]}: a bare path names the mirror of a one-source selection; with several, "
            "give each as SOURCE=PATH"
        )
    return bare[0] if bare else named


def mirror_for(source: SourceRecord, mirrors: Mirrors) -> str | None:
    """The mirror given for `source` (a bare path applies to whatever source is asked)."""
    if isinstance(mirrors, Mapping):
        return mirrors.get(source.name)
    return mirrors


def check_mirrors(mirrors: Mirrors, source_names: Sequence[str]) -> None:
    """A bare path with instances of several sources, or a SOURCE=PATH naming none of them: an input error."""
    names = sorted(set(source_names))
    if isinstance(mirrors, str) and len(names) > 1:
        raise InputError(
            f"--mirror {mirrors}: the selection holds instances of {len(names)} sources ({', '.join(names)}): "
            "give each mirror as SOURCE=PATH"
        )
    if isinstance(mirrors, Mapping):
        unknown = sorted(set(mirrors) - set(names))
        if unknown:
            raise InputError(
                f"--mirror {unknown[0]}=...: no selected instance comes from source {unknown[0]!r} "
                f"(sources: {', '.join(names)})"
            )


def repo_dir(
    source: SourceRecord, mirror_override: str | Path | None = None, needs: tuple[str, ...] = ()
) -> Path:
    """A bare clone of the source in the cache, created on first use, refreshed when the origin moves. A
    caller that names the commits it `needs` skips the refresh when the clone has them all (a fetch from a
    local mirror that finds nothing new is ~0.1 s of every `pbench score`)."""
    where = origin(source, mirror_override)
    dest = paths.cache_dir() / "repos" / f"{source.name}.git"
    with file_lock(f"repo-{source.name}"):
        if not dest.exists():
            dest.parent.mkdir(parents=True, exist_ok=True)
            tmp = dest.with_name(dest.name + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)  # a clone interrupted earlier
            git(["clone", "--quiet", "--mirror", where, str(tmp)])
            tmp.rename(dest)
        elif needs and _has_commits(dest, needs):
            pass
        elif Path(where).exists():
            # Local origins (the generated demo, a mirror) may be newer than our clone: cheap to refresh.
            git(["--git-dir", str(dest), "remote", "set-url", "origin", where])
            git(["--git-dir", str(dest), "fetch", "--quiet", "--prune", "origin", "+refs/*:refs/*"])
        # A snapshot must hold every tracked file: neutralise export-ignore / export-subst attributes.
        info = dest / "info"
        info.mkdir(exist_ok=True)
        (info / "attributes").write_text("* -export-ignore -export-subst\n")
    return dest


def _has_commits(git_dir: Path, shas: tuple[str, ...]) -> bool:
    """Whether every one of `shas` is a commit of the clone (one `git cat-file --batch-check`)."""
    query = "".join(f"{sha}^{{commit}}\n" for sha in shas).encode()
    out = git(["--git-dir", str(git_dir), "cat-file", "--batch-check"], input=query, check=False)
    lines = out.stdout.decode(errors="replace").splitlines()
    kinds = [line.split()[1:2] for line in lines]
    return out.returncode == 0 and len(lines) == len(shas) and all(k == ["commit"] for k in kinds)
