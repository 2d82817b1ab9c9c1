"""Host-side git: a cached clone per source, file reads at a commit, snapshots as tar archives.

The host only reads the repository (trusted, the source's own history). Patches, untrusted or not,
are never applied or executed here, except for dependency files (see `patched_files`), which are
text rewritten in a private temporary directory.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
from contextlib import contextmanager
from pathlib import Path

from tasks_lib import paths
from tasks_lib.errors import InputError, PbenchError
from tasks_lib.sources import SourceRecord

_GIT_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}


def git(
    args: list[str],
    cwd: Path | None = None,
    *,
    input: bytes | None = None,
    check: bool = True,
    timeout: float = 600,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, **_GIT_ENV, **(env or {})}
    proc = subprocess.run(["git", *args], cwd=cwd, input=input, capture_output=True, env=env, timeout=timeout)
    if check and proc.returncode != 0:
        raise PbenchError(
            f"git {' '.join(args[:3])} failed in {cwd}: {proc.stderr.decode(errors='replace')[-500:]}"
        )
    return proc


@contextmanager
def file_lock(name: str):
    """Serialise work on one key (a clone, an image build) across processes on this host."""
    lock_dir = paths.cache_dir() / "locks"
    lock_dir.mkdir(parents=True, exist_ok=True)
    with open(lock_dir / f"{name}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _origin(source: SourceRecord, override: str | Path | None) -> str:
    if override:
        if "://" not in str(override) and not Path(override).exists():
            raise InputError(f"--mirror {override}: no such repository")
        return str(override)
    if source.clone.generator:
        if source.clone.generator != "demo":
            raise InputError(f"{source.path}: clone.generator: unknown generator {source.clone.generator!r}")
        from tasks_lib.demo_repo import ensure_demo_repo

        return str(ensure_demo_repo())
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


def commit_exists(repo: Path, sha: str) -> bool:
    return git(["--git-dir", str(repo), "cat-file", "-e", f"{sha}^{{commit}}"], check=False).returncode == 0


def resolve(repo: Path, rev: str) -> str:
    return git(["--git-dir", str(repo), "rev-parse", "--verify", f"{rev}^{{commit}}"]).stdout.decode().strip()


def read_file(repo: Path, commit: str, path: str) -> bytes | None:
    proc = git(["--git-dir", str(repo), "show", f"{commit}:{path}"], check=False)
    return proc.stdout if proc.returncode == 0 else None


def archive(repo: Path, commit: str) -> bytes:
    """The tree at `commit` as an uncompressed tar with paths relative to the repository root."""
    return git(["--git-dir", str(repo), "archive", "--format=tar", commit]).stdout


def diff(repo: Path, base: str, head: str) -> str:
    out = git(
        [
            "--git-dir",
            str(repo),
            "diff",
            "--no-color",
            "--no-ext-diff",
            "--binary",
            "--full-index",
            base,
            head,
        ]
    ).stdout
    return out.decode("utf-8", errors="surrogateescape")


def first_parent(repo: Path, commit: str) -> str:
    return resolve(repo, f"{commit}^1")


def patched_files(contents: dict[str, bytes | None], patches: list[str]) -> dict[str, bytes | None]:
    """Apply the parts of `patches` that touch `contents`' paths, as text, in a private temp dir.

    Used only to learn the dependency files a run will see (so the run gets the image for the patched
    lock). `--include` restricts git apply to exactly those paths; nothing else is written and nothing
    is executed. A patch that does not apply is skipped here: the run itself reports the apply failure.
    """
    with tempfile.TemporaryDirectory(prefix="pbench-deps-") as tmp:
        root = Path(tmp)
        for rel, data in contents.items():
            if data is not None:
                (root / rel).parent.mkdir(parents=True, exist_ok=True)
                (root / rel).write_bytes(data)
        includes = [f"--include={rel}" for rel in contents]
        for text in patches:
            if text.strip():
                # Outside any repository git apply acts like patch(1) and refuses paths leaving cwd.
                git(
                    ["apply", *includes, "-"],
                    cwd=root,
                    input=text.encode(),
                    check=False,
                    env={"GIT_CEILING_DIRECTORIES": str(root.parent), "GIT_DIR": str(root / ".nogit")},
                )
        out: dict[str, bytes | None] = {}
        for rel in contents:
            f = root / rel
            out[rel] = f.read_bytes() if f.is_file() else None
        return out
