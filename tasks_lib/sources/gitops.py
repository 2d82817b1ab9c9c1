"""Host-side git: a cached clone per source, file reads at a commit, snapshots as tar archives.

The host only reads the repository (trusted, the source's own history). Patches, untrusted or not,
are never applied or executed here, except for dependency files (see `patched_files`), which are
text rewritten in a private temporary directory.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import posixpath
import re
import subprocess
import tempfile
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

from tasks_lib.core import paths
from tasks_lib.core.errors import InfraError, PbenchError

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
    """Serialise work on one key (a clone, an image build) across processes on this host (on every host that
    shares PBENCH_LOCK_DIR)."""
    lock_dir = paths.locks_dir()
    lock_dir.mkdir(parents=True, exist_ok=True)
    with open(lock_dir / f"{name}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def commit_exists(repo: Path, sha: str) -> bool:
    return git(["--git-dir", str(repo), "cat-file", "-e", f"{sha}^{{commit}}"], check=False).returncode == 0


def resolve(repo: Path, rev: str) -> str:
    return git(["--git-dir", str(repo), "rev-parse", "--verify", f"{rev}^{{commit}}"]).stdout.decode().strip()


_BLOBS: dict[tuple[str, str, str], bytes] = {}  # (repo, commit sha, path): a commit's files never change
_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


def read_file(repo: Path, commit: str, path: str) -> bytes | None:
    """The file at `commit`, or None when the commit has no such file (or its mirror lacks the blob). Kept in
    memory when `commit` is a full sha: one scoring reads the same lock files for every patch chain it checks."""
    key = (str(repo), commit, path)
    if key in _BLOBS:
        return _BLOBS[key]
    proc = git(["--git-dir", str(repo), "show", f"{commit}:{path}"], check=False)
    if proc.returncode != 0:
        return None
    if _SHA.fullmatch(commit):
        if sum(map(len, _BLOBS.values())) > 64 << 20:
            _BLOBS.clear()
        _BLOBS[key] = proc.stdout
    return proc.stdout


def archive(repo: Path, commit: str) -> bytes:
    """The tree at `commit` as an uncompressed tar with paths relative to the repository root."""
    return snapshot(repo, commit)[0]


def snapshot(repo: Path, commit: str) -> tuple[bytes, list[str]]:
    """The tree at `commit` as a tar, and the files whose blobs the repository lacks (a mirror obtained by a
    partial fetch): those are written empty and named, never fetched, never a failed run."""
    proc = git(["--git-dir", str(repo), "archive", "--format=tar", commit], check=False)
    if proc.returncode == 0:
        return proc.stdout, []
    if b"invalid object" not in proc.stderr and b"cannot read" not in proc.stderr:
        raise PbenchError(
            f"git archive {commit} failed in {repo}: {proc.stderr.decode(errors='replace')[-500:]}"
        )
    return _tar_with_stubs(repo, commit)


def _tar_with_stubs(repo: Path, commit: str) -> tuple[bytes, list[str]]:
    import io
    import tarfile

    listing = git(["--git-dir", str(repo), "ls-tree", "-r", "-z", "--full-tree", commit]).stdout
    entries = []
    for item in listing.split(b"\0"):
        if item:
            meta, path = item.split(b"\t", 1)
            mode, kind, sha = meta.decode().split()
            entries.append((mode, kind, sha, path.decode("utf-8", "surrogateescape")))
    blobs = [sha for _, kind, sha, _ in entries if kind == "blob"]
    contents = _cat_blobs(repo, blobs)
    stubbed, buf = [], io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for mode, kind, sha, path in entries:
            if kind != "blob":  # submodules (commits) are absent from `git archive` too, as empty dirs
                info = tarfile.TarInfo(path)
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
                continue
            data = contents.get(sha)
            if data is None:
                stubbed.append(path)
                data = b""
            info = tarfile.TarInfo(path)
            if mode == "120000":
                info.type, info.linkname, info.mode = tarfile.SYMTYPE, data.decode("utf-8", "replace"), 0o777
                tar.addfile(info)
                continue
            info.size, info.mode = len(data), 0o755 if mode == "100755" else 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue(), sorted(stubbed)


def _cat_blobs(repo: Path, shas: list[str]) -> dict[str, bytes]:
    """Contents of the blobs the repository has (`git cat-file --batch`, no lazy fetch)."""
    proc = git(
        ["--git-dir", str(repo), "cat-file", "--batch"],
        input="".join(f"{s}\n" for s in shas).encode(),
        env={"GIT_NO_LAZY_FETCH": "1"},
    )
    out, data, pos = {}, proc.stdout, 0
    while pos < len(data):
        end = data.index(b"\n", pos)
        header = data[pos:end].split()
        pos = end + 1
        if len(header) == 2 and header[1] == b"missing":
            continue
        size = int(header[2])
        out[header[0].decode()] = data[pos : pos + size]
        pos += size + 1
    return out


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
    patches = [text for text in patches if _may_touch(text, contents)]
    if not patches:
        return dict(contents)
    with tempfile.TemporaryDirectory(prefix="pbench-deps-") as tmp:
        root = Path(tmp)
        for rel, data in contents.items():
            if data is not None:
                (root / rel).parent.mkdir(parents=True, exist_ok=True)
                (root / rel).write_bytes(data)
        includes = [f"--include={rel}" for rel in contents]
        for text in patches:  # each non-blank (`_may_touch`)
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


def _may_touch(patch: str, paths) -> bool:
    """False only when git apply cannot change any of `paths` with this patch: none of their file names occurs
    in its text, and no header line quotes a path (git's C-style quoting can spell a name with escapes). A
    name that is a pattern (--include takes globs) keeps the patch."""
    if not patch.strip():
        return False
    if any(not _PLAIN.fullmatch(rel) or posixpath.basename(rel) in patch for rel in paths):
        return True
    return any(line.startswith(_HEADERS) and ('"' in line or "\\" in line) for line in patch.splitlines())


_PLAIN = re.compile(r"[A-Za-z0-9._/+-]+")
_HEADERS = ("diff --git ", "--- ", "+++ ", "rename ", "copy ")


# ----------------------------------------------------------------------------- deterministic history

PINNED_GIT_OPTIONS = (
    "-c", "init.defaultBranch=main",
    "-c", "commit.gpgsign=false",
    "-c", "tag.gpgsign=false",
    "-c", "core.autocrlf=false",
    "-c", "core.safecrlf=false",
    "-c", "core.fileMode=true",
    "-c", "core.hooksPath=/dev/null",
    "-c", "core.quotePath=false",
    "-c", "gc.auto=0",
    "-c", "maintenance.auto=false",
    "-c", "i18n.commitEncoding=UTF-8",
    "-c", "diff.renames=false",
)  # fmt: skip


def _git_date(iso: str) -> str:
    """Git's raw date format (`<epoch> +0000`): unambiguous, whatever the local timezone."""
    when = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    return f"{int(when.timestamp())} +0000"


class PinnedGit:
    """Runs git in one repository with an environment free of the caller's git settings, and writes commits
    whose ids depend on their contents alone (explicit people and dates, `commit-tree`): the same inputs give
    byte-identical commit SHAs on any machine."""

    def __init__(self, repo: Path, home: Path):
        self.repo = repo
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        env.update(
            HOME=str(home),
            XDG_CONFIG_HOME=str(home / ".config"),
            GIT_CONFIG_NOSYSTEM="1",
            GIT_CONFIG_GLOBAL=os.devnull,
            GIT_TERMINAL_PROMPT="0",
            LC_ALL="C",
            TZ="UTC",
        )
        self.env = env

    def __call__(self, *args: str, stdin: str | None = None, extra_env: dict | None = None) -> str:
        env = {**self.env, **(extra_env or {})}
        proc = subprocess.run(
            ["git", *PINNED_GIT_OPTIONS, *args],
            cwd=self.repo,
            env=env,
            input=stdin.encode("utf-8") if stdin is not None else None,
            capture_output=True,
            check=False,
        )
        if proc.returncode != 0:
            raise InfraError(
                f"`git {' '.join(args)}` failed "
                f"({proc.returncode}): {proc.stderr.decode('utf-8', 'replace').strip()}"
            )
        return proc.stdout.decode("utf-8").strip()

    def apply(self, changes: dict[str, str | None]) -> str:
        """Write the changes into the work tree, stage everything, return the tree id."""
        for rel, content in sorted(changes.items()):
            path = self.repo / rel
            if content is None:
                path.unlink()
                with contextlib.suppress(OSError):
                    path.parent.rmdir()  # git does not track empty directories
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(content.encode("utf-8"))
        self("add", "--all")
        return self("write-tree")

    def commit(
        self,
        tree: str,
        parents: list[str],
        message: str,
        author,
        committer,
        date: str,
        committer_date: str | None = None,
    ) -> str:
        extra_env = {
            "GIT_AUTHOR_NAME": author.name,
            "GIT_AUTHOR_EMAIL": author.email,
            "GIT_AUTHOR_DATE": _git_date(date),
            "GIT_COMMITTER_NAME": committer.name,
            "GIT_COMMITTER_EMAIL": committer.email,
            "GIT_COMMITTER_DATE": _git_date(committer_date or date),
        }
        args = ["commit-tree", tree]
        for parent in parents:
            args += ["-p", parent]
        # commit-tree stores the message as given: normalise it like `git commit` would.
        return self(*args, stdin=message.strip() + "\n", extra_env=extra_env)
