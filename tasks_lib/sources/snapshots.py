"""A base commit's tree, prepared once on the host and reused by content by every run of that commit (every
side, attempt and model, curation's five runs of a PR): the tree as a tar, and a seed for the runner's git.

What a run's container is given: `tree.tar`, exactly what `gitops.snapshot` gives (the runner unpacks it into the
work tree), and `git/` (a seed: the commit's files in a git index without stat data, and a pack of their blobs
copied from the clone). With the seed the runner's first commit of the tree hashes the files to compare them
with the index (`git update-index --refresh`) instead of compressing and writing every one of them as an
object: on IBM/mcp-context-forge's 2,500 files, 50 MB, 0.3 s against 0.9-2 s (docs/performance.md section 18).
The seed only speeds git up, it decides nothing: `git add -A` then makes the index what the unpacked tree is,
so a file that differs from the seed (a stub of a partial mirror, an `export-ignore`d path) is hashed as before.

The key is the commit's full id (the content address of its tree and metadata) and `FORMAT`; a snapshot with
stubbed files is made again once the clone has one of their blobs. The folder is made under a temporary name
and renamed when complete, so a reader never sees half of it; the least recently used snapshots go beyond
`PBENCH_SNAPSHOT_CACHE_MB` (default 5120).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tasks_lib.core import paths
from tasks_lib.core.errors import InputError
from tasks_lib.sources import gitops

# Part of the key: a change of what a snapshot folder holds, or of how the tar is made, makes new folders.
FORMAT = "1"
CACHE_MB_DEFAULT = 5120
MANIFEST = "snapshot.json"
TREE = "tree.tar"
SEED = "git"
# Blobs the pack holds are compressed fast (level 1: 13 MB and 0.5 s for mcp-context-forge's 50 MB, against
# 12 MB and 1.0 s at git's default): the pack is read only for the few files a run's patches change.
PACK_OPTIONS = ("-c", "pack.compression=1")


@dataclass(frozen=True)
class Snapshot:
    """One commit's prepared tree: `files()` are what a container is given under /pbench/in."""

    commit: str
    folder: Path
    stubbed: tuple[str, ...]

    @property
    def tar(self) -> Path:
        return self.folder / TREE

    def files(self) -> dict[str, Path]:
        """Names under /pbench/in and the host files they are read from: the tree and the git seed."""
        seed = self.folder / SEED
        return {TREE: self.tar} | {f"{SEED}/{p.name}": p for p in sorted(seed.iterdir())}


def prepare(repo: Path, commit: str) -> Snapshot:
    """The snapshot of `commit` (a commit id or any name `git rev-parse` knows) of the clone `repo`, made now
    if no earlier run made it."""
    sha = gitops.resolve(repo, commit)
    root = cache_root()
    folder = root / f"{sha}-{FORMAT}"
    found = _reusable(repo, folder, sha)
    if found is None:
        with gitops.file_lock(f"snapshot-{sha}"):
            found = _reusable(repo, folder, sha) or _make(repo, sha, root, folder)
        evict(root, _limit_bytes(), keep=folder)
    with contextlib.suppress(OSError):
        os.utime(folder)  # the least recently used go first
    return found


def cache_root() -> Path:
    return paths.cache_dir() / "snapshots"


def _limit_bytes() -> int:
    raw = os.environ.get("PBENCH_SNAPSHOT_CACHE_MB", str(CACHE_MB_DEFAULT))
    try:
        mb = int(raw)
    except ValueError:
        raise InputError(f"PBENCH_SNAPSHOT_CACHE_MB={raw!r}: expected a whole number of megabytes") from None
    if mb < 0:
        raise InputError(f"PBENCH_SNAPSHOT_CACHE_MB={raw!r}: expected 0 or more megabytes")
    return mb << 20


def _reusable(repo: Path, folder: Path, sha: str) -> Snapshot | None:
    """The snapshot in `folder` when it is complete and still what the clone gives: a stubbed file whose blob
    the clone has now would not be stubbed today."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
        if manifest["commit"] != sha or (folder / TREE).stat().st_size != manifest["tar_bytes"]:
            return None
    except (OSError, ValueError, KeyError):
        return None
    stubbed = manifest["stubbed"]
    if stubbed and _present(repo, list(manifest["stubbed_blobs"])):
        return None
    return Snapshot(sha, folder, tuple(stubbed))


def _make(repo: Path, sha: str, root: Path, folder: Path) -> Snapshot:
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{sha[:12]}-", dir=root))
    try:
        tar, stubbed = gitops.snapshot(repo, sha)
        (tmp / TREE).write_bytes(tar)
        entries = _blobs(repo, sha)
        missing = set(_missing(repo, [e[1] for e in entries]))
        _write_seed(repo, tmp / SEED, entries, missing)
        manifest = {
            "commit": sha,
            "format": FORMAT,
            "tar_bytes": len(tar),
            "stubbed": stubbed,
            "stubbed_blobs": sorted(missing),
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2))
        shutil.rmtree(folder, ignore_errors=True)  # an older, outdated one (a stub the clone now has)
        os.rename(tmp, folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return Snapshot(sha, folder, tuple(stubbed))


def _blobs(repo: Path, sha: str) -> list[tuple[str, str, str]]:
    """(mode, blob id, path) of every file and symbolic link of the commit (not its submodules: `git archive`
    writes those as empty folders, which `git add` leaves out too)."""
    listing = gitops.git(["--git-dir", str(repo), "ls-tree", "-r", "-z", "--full-tree", sha]).stdout
    entries = []
    for item in filter(None, listing.split(b"\0")):
        meta, path = item.split(b"\t", 1)
        mode, kind, blob = meta.decode().split()
        if kind == "blob":
            entries.append((mode, blob, path.decode("utf-8", "surrogateescape")))
    return entries


def _missing(repo: Path, blobs: list[str]) -> list[str]:
    """The blobs the clone lacks (a partial fetch), never fetched."""
    proc = gitops.git(
        ["--git-dir", str(repo), "cat-file", "--batch-check"],
        input="".join(f"{b}\n" for b in blobs).encode(),
        env={"GIT_NO_LAZY_FETCH": "1"},
    )
    return [line.split()[0] for line in proc.stdout.decode().splitlines() if line.endswith(" missing")]


def _present(repo: Path, blobs: list[str]) -> bool:
    return len(_missing(repo, blobs)) < len(blobs)


def _write_seed(repo: Path, seed: Path, entries, missing: set[str]) -> None:
    """`seed/index`: the commit's files without stat data (the runner's `git update-index --refresh` hashes
    each file once to fill it in); `seed/pack-*.pack|idx`: the blobs the clone has. The clone is only read:
    the index is written to `seed` (GIT_INDEX_FILE), against an empty work tree of its own."""
    seed.mkdir()
    with tempfile.TemporaryDirectory(prefix="pbench-seed-") as work:
        env = {"GIT_INDEX_FILE": str(seed / "index"), "GIT_WORK_TREE": work}
        info = b"".join(
            f"{mode} {blob}\t".encode() + path.encode("utf-8", "surrogateescape") + b"\0"
            for mode, blob, path in entries
        )
        gitops.git(
            ["--git-dir", str(repo), "update-index", "--add", "-z", "--index-info"], input=info, env=env
        )
    present = sorted({blob for _, blob, _ in entries} - missing)
    gitops.git(
        ["--git-dir", str(repo), *PACK_OPTIONS, "pack-objects", "-q", "--window=0", str(seed / "pack")],
        input="".join(f"{b}\n" for b in present).encode(),
        env={"GIT_NO_LAZY_FETCH": "1"},
    )


def evict(root: Path, limit: int, keep: Path | None = None) -> list[Path]:
    """Remove the least recently used snapshots until the folder holds at most `limit` bytes (never `keep`,
    the one a run is about to use). Returns what was removed."""
    if not root.is_dir():
        return []
    folders = []
    for folder in root.iterdir():
        if folder.name.startswith(".") or not folder.is_dir():
            continue
        try:
            size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
            folders.append((folder.stat().st_mtime, size, folder))
        except OSError:
            continue  # another process is removing it
    total = sum(size for _, size, _ in folders)
    removed = []
    for _, size, folder in sorted(folders):
        if total <= limit:
            break
        if keep is not None and folder == keep:
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
        total -= size
    _sweep(root)
    return removed


def _sweep(root: Path, older_than_s: float = 3600) -> None:
    """Half-made folders of a process that died while making one (a live maker renames its own within
    seconds)."""
    now = time.time()
    for tmp in root.glob(".*"):
        with contextlib.suppress(OSError):
            if tmp.is_dir() and now - tmp.stat().st_mtime > older_than_s:
                shutil.rmtree(tmp, ignore_errors=True)
