"""A base commit's prepared tree (`sources.snapshots`): made once per commit and reused by its full id, never for
another commit; made again when the clone has gained a blob it had stubbed; and the runner's git seeded from it
commits exactly the tree a plain `git add` of the unpacked files commits (the seed speeds git up, it decides
nothing). Run on the host against real git repositories."""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from tasks_lib.sources import gitops, snapshots

FILES = {
    "app/__init__.py": "",
    "app/main.py": "def main():\n    return 1\n",
    "tests/test_main.py": "from app.main import main\n\ndef test_main():\n    assert main() == 1\n",
    "README.md": "# demo\n",
}


def _git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@e", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
        env=env,
    ).stdout


@pytest.fixture
def clone(tmp_path, monkeypatch) -> tuple[Path, Path]:
    """(the work tree, its .git) with one commit: files, an executable, a symbolic link."""
    monkeypatch.setenv("PBENCH_CACHE_DIR", str(tmp_path / "cache"))
    work = tmp_path / "work"
    for rel, text in FILES.items():
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_text(text)
    (work / "run.sh").write_text("#!/bin/sh\necho ok\n")
    (work / "run.sh").chmod(0o755)
    os.symlink("app/main.py", work / "main-link.py")
    _git(tmp_path, "init", "-q", str(work))
    _git(work, "add", "-A")
    _git(work, "commit", "-qm", "base")
    return work, work / ".git"


def _commit(work: Path, rel: str, text: str) -> str:
    (work / rel).write_text(text)
    _git(work, "add", "-A")
    _git(work, "commit", "-qm", f"change {rel}")
    return _git(work, "rev-parse", "HEAD").strip()


def _members(snap: snapshots.Snapshot) -> dict[str, bytes]:
    with tarfile.open(snap.tar) as archive:
        return {m.name: archive.extractfile(m).read() for m in archive.getmembers() if m.isfile()}


def test_a_snapshot_is_made_once_per_commit_and_never_reused_for_another(clone, monkeypatch):
    work, repo = clone
    base = _git(work, "rev-parse", "HEAD").strip()
    made = []
    real = gitops.snapshot
    monkeypatch.setattr(gitops, "snapshot", lambda r, c: made.append(c) or real(r, c))

    first = snapshots.prepare(repo, base)
    again = snapshots.prepare(repo, base)
    assert made == [base] and again == first and first.commit == base
    assert _members(first) == _members(snapshots.Snapshot(base, first.folder, ()))

    head = _commit(work, "app/main.py", "def main():\n    return 2\n")
    other = snapshots.prepare(repo, head)
    assert made == [base, head] and other.folder != first.folder
    assert _members(other)["app/main.py"] == b"def main():\n    return 2\n"
    assert _members(first)["app/main.py"] == b"def main():\n    return 1\n"  # the base's untouched


def test_a_name_is_resolved_to_the_commit_it_names_now(clone):
    """Rule: the key is the full commit id, never a name that moves (a branch, HEAD)."""
    work, repo = clone
    before = snapshots.prepare(repo, "HEAD")
    head = _commit(work, "README.md", "# moved\n")
    after = snapshots.prepare(repo, "HEAD")
    assert after.commit == head != before.commit
    assert _members(after)["README.md"] == b"# moved\n"


def test_an_incomplete_or_foreign_folder_is_made_again(clone):
    """A folder whose manifest is missing, names another commit or whose tar has another size is not used."""
    work, repo = clone
    snap = snapshots.prepare(repo, "HEAD")
    (snap.folder / snapshots.MANIFEST).unlink()
    again = snapshots.prepare(repo, "HEAD")
    assert (again.folder / snapshots.MANIFEST).is_file()
    with open(again.tar, "ab") as fh:
        fh.write(b"\0" * 512)
    third = snapshots.prepare(repo, "HEAD")
    assert _members(third) == _members(snap) and (third.folder / snapshots.MANIFEST).is_file()


def test_a_stub_is_made_again_once_the_clone_has_its_blob(clone, tmp_path):
    """A partial mirror's absent blob is written empty and named; once the clone has it, the snapshot has it."""
    work, repo = clone
    base = _git(work, "rev-parse", "HEAD").strip()
    sha = _git(work, "rev-parse", f"{base}:app/main.py").strip()
    loose = repo / "objects" / sha[:2] / sha[2:]
    kept = tmp_path / "kept-object"
    kept.write_bytes(loose.read_bytes())
    loose.unlink()

    stubbed = snapshots.prepare(repo, base)
    assert stubbed.stubbed == ("app/main.py",) and _members(stubbed)["app/main.py"] == b""

    loose.write_bytes(kept.read_bytes())
    whole = snapshots.prepare(repo, base)
    assert whole.stubbed == () and _members(whole)["app/main.py"] == FILES["app/main.py"].encode()


def test_the_least_recently_used_go_beyond_the_limit(clone, monkeypatch):
    work, repo = clone
    old = snapshots.prepare(repo, "HEAD")
    os.utime(old.folder, (1, 1))
    _commit(work, "README.md", "# two\n")
    monkeypatch.setenv("PBENCH_SNAPSHOT_CACHE_MB", "0")  # only the one in use stays
    new = snapshots.prepare(repo, "HEAD")
    assert not old.folder.exists() and new.folder.exists()


def test_a_bad_cache_limit_names_the_variable(clone, monkeypatch):
    from tasks_lib.core.errors import InputError

    _, repo = clone
    monkeypatch.setenv("PBENCH_SNAPSHOT_CACHE_MB", "lots")
    with pytest.raises(InputError, match="PBENCH_SNAPSHOT_CACHE_MB"):
        snapshots.prepare(repo, "HEAD")


# --------------------------------------------------------------------------- the runner's side


@pytest.fixture(scope="module")
def runner(runner_import):
    return runner_import("pbench_runner")


def _base_tree(runner, snap: snapshots.Snapshot, dest: Path, monkeypatch, seeded: bool) -> str:
    """The runner's base commit of `snap` unpacked into `dest` (seeded or not): its tree id."""
    inbox = dest.parent / f"{dest.name}-in"
    for name, path in snap.files().items():
        (inbox / name).parent.mkdir(parents=True, exist_ok=True)
        (inbox / name).write_bytes(path.read_bytes())
    monkeypatch.setattr(runner, "IN", inbox)
    dest.mkdir()
    job = {"repo_dir": str(dest), "tree": snapshots.TREE, "git_seed": snapshots.SEED if seeded else None}
    run = runner.Run(job)
    run.unpack_tree()
    runner.git_quiet(["init", "-q"], dest)
    run.seed_git()
    runner.snapshot(dest, "base snapshot")
    # Every object of the commit is there: resets and `git show` of the base work as without a seed.
    runner.git_quiet(["fsck", "--no-dangling", "--connectivity-only"], dest)
    loose = int(runner.git_quiet(["count-objects"], dest).split()[0])
    return runner.git_quiet(["rev-parse", "HEAD^{tree}"], dest).strip(), loose


def test_a_seeded_base_commit_is_the_tree_a_plain_add_commits(runner, clone, tmp_path, monkeypatch):
    """Rule: the seed decides nothing. The unpacked tree's commit is the same with and without it, also for a
    stubbed file (the seed names the absent blob; the tree holds an empty file) and for files of the tree the
    seed does not know."""
    work, repo = clone
    base = _git(work, "rev-parse", "HEAD").strip()
    sha = _git(work, "rev-parse", f"{base}:README.md").strip()
    (repo / "objects" / sha[:2] / sha[2:]).unlink()
    snap = snapshots.prepare(repo, base)
    assert snap.stubbed == ("README.md",)

    plain, written = _base_tree(runner, snap, tmp_path / "plain", monkeypatch, seeded=False)
    seeded, written_seeded = _base_tree(runner, snap, tmp_path / "seeded", monkeypatch, seeded=True)
    assert seeded == plain
    # Seeded, git wrote the stub's blob, the trees and the commit, not the files the pack holds.
    assert written_seeded <= written - (len(FILES) + 1)

    # A seed that does not match the tree at all (another commit's) still gives the tree's own commit.
    head = _commit(work, "app/main.py", "def main():\n    return 3\n")
    other = snapshots.prepare(repo, head)
    mixed = snapshots.Snapshot(base, tmp_path / "mixed", ())
    (mixed.folder / snapshots.SEED).mkdir(parents=True)
    (mixed.folder / snapshots.TREE).write_bytes(snap.tar.read_bytes())
    for name, path in other.files().items():
        if name.startswith(snapshots.SEED + "/"):
            (mixed.folder / name).write_bytes(path.read_bytes())
    assert _base_tree(runner, mixed, tmp_path / "mixed-run", monkeypatch, seeded=True)[0] == plain


def test_the_tree_is_unpacked_with_its_modes_and_links(runner, clone, tmp_path, monkeypatch):
    _, repo = clone
    snap = snapshots.prepare(repo, "HEAD")
    dest = tmp_path / "tree"
    _base_tree(runner, snap, dest, monkeypatch, seeded=True)
    assert os.access(dest / "run.sh", os.X_OK) and os.readlink(dest / "main-link.py") == "app/main.py"
    with tarfile.open(fileobj=io.BytesIO(snap.tar.read_bytes())) as archive:
        assert {m.name for m in archive.getmembers() if not m.isdir()} <= {
            str(p.relative_to(dest)) for p in dest.rglob("*") if ".git" not in p.parts
        }
