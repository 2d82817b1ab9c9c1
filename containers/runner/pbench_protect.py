"""What the repository's code may not change during a run (stdlib only, runs as root).

`Guard`: protected files, their folders and the runner-relevant files of the folders on the way to them belong
to root (the folders are sticky where other files may be created), `.git` is unreadable, and an inotify watch
(the kernel's record, out of reach of the code under test) sees every runner-relevant name created, changed or
removed in those folders, even one that is deleted again. After the run the protected files are hashed again:
any difference is tampering. What a patch may not change is pbench_rules.py (re-exported here).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import select
import stat
import struct
import threading
from pathlib import Path

from pbench_globs import HARNESS_PROTECTED, match_any
from pbench_proc import TEST_GID, TEST_UID, can_drop_privileges
from pbench_rules import (  # noqa: F401  (re-exported: the runner reads the rules through this module)
    BASE_TAG,
    GIT,
    agent_changed_files,
    git_quiet,
    module_name,
    node_import_roots,
    node_modules_dirs,
    node_package_names,
    pytest_section_changed,
    python_module_names,
    relevant_name,
    restore_protected,
    site_dirs,
    tsconfig_redirects,
)

# ----------------------------------------------------------------------------- during the run


def shared(path, mode: int) -> None:
    """Root's folder with `mode`; group-writable modes for the test user's group only. Owner first: the
    runner (CAP_CHOWN, no CAP_FOWNER) may change the mode of its own folders only."""
    if can_drop_privileges():
        os.chown(path, 0, TEST_GID if mode & 0o020 else 0)
    os.chmod(path, mode)


def remove_bytecode(repo: Path) -> list[str]:
    """Delete every compiled file of the work tree (`*.pyc`, `*.pyo`) before the run: code of the tree runs from
    its source only, so any bytecode read later was written at run time (the launcher's audit hook names it).
    Nothing has run yet, so the tree's bytecode is the snapshot's (git's index, with the patches). Returns what
    was removed, relative to the repository."""
    listed = git_quiet(["ls-files", "-z", "--", "*.pyc", "*.pyo"], repo).split("\0")
    removed = []
    for rel in filter(None, listed):
        path = repo / rel
        if path.is_file() and not path.is_symlink():
            path.unlink()
            removed.append(rel)
    return removed


def _sha(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _tree(repo: Path) -> tuple[list[str], list[str]]:
    """(files relative to the repository, absolute folders) of the work tree: not .git, no symlinked folder."""
    files, dirs = [], [str(repo)]
    for root, subdirs, names in os.walk(repo):
        if root == str(repo) and ".git" in subdirs:
            subdirs.remove(".git")
        subdirs[:] = [d for d in subdirs if not os.path.islink(os.path.join(root, d))]
        dirs += [os.path.join(root, d) for d in subdirs]
        files += [os.path.relpath(os.path.join(root, name), repo) for name in names]
    return files, dirs


class Guard:
    """Freezes what the code under test may not change, watches it during the run, verifies it after."""

    def __init__(
        self,
        repo: Path,
        patterns,
        *,
        extra_protected=(),
        import_roots=(),
        py_names=frozenset(),
        node_roots=(),
        node_names=frozenset(),
        package_dirs=(),
        shared_mode=0o1775,
    ):
        self.repo = repo
        # The folders on the way to protected files: sticky, the test user's group may create files there;
        # 0o1777 where Playwright's user must too (its tests write their own state files into the tree).
        self.shared_mode = shared_mode
        # The image's node_modules folders (linked into the tree): a new package there during the run is
        # never the image's (caches are dot-entries).
        self.package_dirs = {str(p) for p in package_dirs}
        self.patterns = list(patterns) + list(HARNESS_PROTECTED)
        self.extra = set(extra_protected)
        self.py_roots = {str(repo / r) if r else str(repo) for r in import_roots}
        self.node_roots = {str(repo / r) if r else str(repo) for r in node_roots}
        self.py_names, self.node_names = set(py_names), set(node_names)
        self.protected: dict[str, str] = {}  # rel -> sha256
        self.watched: dict[str, set[str]] = {}  # abs dir -> entries at freeze
        self.events: list[str] = []
        self._watcher = None

    # -- which files and folders
    def _is_protected(self, rel: str, watched_dir: bool) -> bool:
        name = rel.rsplit("/", 1)[-1]
        return rel in self.extra or match_any(rel, self.patterns) or (watched_dir and relevant_name(name))

    def _suspicious(self, folder: str, name: str) -> str | None:
        if folder in self.package_dirs:
            return None if name.startswith(".") else "a package created in the image's node_modules"
        if relevant_name(name):
            return "runner-relevant file"
        if folder in self.py_roots and module_name(name) in self.py_names:
            return f"shadows the installed module {module_name(name)!r}"
        if folder in self.node_roots and name in self.node_names:
            return f"named like the installed package {name!r}"
        return None

    def freeze(self) -> None:
        """Own, mode and hash the tree before any of the repository's code runs, then start the watch."""
        files, dirs = _tree(self.repo)
        protected = {f for f in files if self._is_protected(f, False)}
        folders = self._folders(protected)
        # Runner-relevant files of the watched folders (pyproject.toml, package.json, tsconfig.json) are frozen
        # too: the code under test may not rewrite them while the runner reads them.
        protected |= {
            f
            for f in files
            if str(self.repo / f).rsplit("/", 1)[0] in folders and self._is_protected(f, True)
        }
        self._own_files(files, protected)
        self._own_folders(dirs, folders)
        git_dir = self.repo / ".git"
        if git_dir.is_dir():
            os.chmod(git_dir, 0o700)
        self.watched = {
            d: set(os.listdir(d)) for d in sorted(folders | self.package_dirs) if os.path.isdir(d)
        }
        self._watcher = _Inotify(self.watched, self._on_event)
        self._watcher.start()

    def _folders(self, protected: set[str]) -> set[str]:
        """The folders the runner reads: the repository root, the import roots, every folder on the way to a
        protected file."""
        folders = {str(self.repo)} | self.py_roots | self.node_roots
        for rel in protected:
            parts = rel.split("/")[:-1]
            folders |= {str(self.repo.joinpath(*parts[:i])) for i in range(1, len(parts) + 1)}
        return {f for f in folders if os.path.isdir(f)}

    def _own_files(self, files: list[str], protected: set[str]) -> None:
        drop = can_drop_privileges()
        # chmod before chown: the runner has CAP_CHOWN but not CAP_FOWNER.
        for rel in files:
            path = self.repo / rel
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                if drop:
                    os.lchown(path, 0, 0)
                continue
            os.chmod(path, 0o644 | (st.st_mode & 0o111))
            if rel in protected:
                self.protected[rel] = _sha(path)
            elif drop:
                os.chown(path, TEST_UID, TEST_GID)

    def _own_folders(self, dirs: list[str], folders: set[str]) -> None:
        drop = can_drop_privileges()
        for d in dirs:
            if d not in folders:
                os.chmod(d, 0o755)
                if drop:
                    os.chown(d, TEST_UID, TEST_GID)
                continue
            pure = d != str(self.repo) and all(
                os.path.isdir(os.path.join(d, e))
                or self._is_protected(os.path.relpath(os.path.join(d, e), self.repo), True)
                for e in os.listdir(d)
            )
            # A folder of tests only: nobody else writes there. Otherwise sticky: the repository's code may
            # create files, root's entries cannot be renamed, replaced or removed (`shared_mode`).
            shared(d, 0o755 if pure else self.shared_mode)

    def _on_event(self, folder: str, name: str, what: str) -> None:
        rel = os.path.relpath(os.path.join(folder, name), self.repo)
        if folder in self.package_dirs:
            why = self._suspicious(folder, name)
            if why and what in ("created", "moved in"):
                self.events.append(f"{os.path.join(folder, name)} {what} during the run ({why})")
            return
        why = "protected file" if rel in self.protected else self._suspicious(folder, name)
        if why:
            self.events.append(f"{rel} {what} during the run ({why})")

    def scan(self, when: str) -> list[str]:
        """New runner-relevant entries in the watched folders, and protected files that changed."""
        findings = []
        for folder, before in self.watched.items():
            try:
                now = set(os.listdir(folder))
            except OSError:
                findings.append(f"{os.path.relpath(folder, self.repo)}/ is gone {when}")
                continue
            for name in sorted(now - before):
                why = self._suspicious(folder, name)
                if why:
                    shown = (
                        os.path.join(folder, name)
                        if folder in self.package_dirs
                        else os.path.relpath(os.path.join(folder, name), self.repo)
                    )
                    findings.append(f"{shown} appeared {when} ({why})")
        for rel, digest in self.protected.items():
            path = self.repo / rel
            try:
                same = not path.is_symlink() and _sha(path) == digest
            except OSError:
                same = False
            if not same:
                findings.append(f"{rel} changed {when} (protected file)")
        return findings

    def finish(self) -> list[str]:
        if self._watcher is not None:
            self._watcher.stop()
            if self._watcher.error:
                self.events.append(self._watcher.error)
        return list(dict.fromkeys(self.events))


# ----------------------------------------------------------------------------- inotify (ctypes, stdlib only)

IN_MODIFY, IN_ATTRIB, IN_CLOSE_WRITE = 0x2, 0x4, 0x8
IN_MOVED_FROM, IN_MOVED_TO, IN_CREATE, IN_DELETE = 0x40, 0x80, 0x100, 0x200
IN_Q_OVERFLOW = 0x4000
_MASK = IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE
_WHAT = (
    (IN_CREATE, "created"),
    (IN_MOVED_TO, "moved in"),
    (IN_DELETE, "deleted"),
    (IN_MOVED_FROM, "moved away"),
    (IN_MODIFY, "modified"),
    (IN_CLOSE_WRITE, "written"),
    (IN_ATTRIB, "changed mode"),
)


class _Inotify:
    """Kernel notifications for the watched folders, read by a thread of the (root) runner."""

    def __init__(self, folders, callback):
        self.callback = callback
        self.error = None
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self.libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self.wds = {}
        for folder in folders:
            wd = self.libc.inotify_add_watch(self.fd, folder.encode(), _MASK)
            if wd < 0:
                raise OSError(ctypes.get_errno(), f"inotify_add_watch {folder}")
            self.wds[wd] = folder
        self._stop_r, self._stop_w = os.pipe()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def start(self):
        self.thread.start()

    def _loop(self):
        while True:
            ready, _, _ = select.select([self.fd, self._stop_r], [], [])
            if self.fd in ready:
                self._drain()
            if self._stop_r in ready:
                self._drain()
                return

    def _drain(self):
        while True:
            try:
                data = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                return
            offset = 0
            while offset + 16 <= len(data):
                wd, mask, _cookie, length = struct.unpack_from("iIII", data, offset)
                name = data[offset + 16 : offset + 16 + length].split(b"\0", 1)[0].decode(errors="replace")
                offset += 16 + length
                if mask & IN_Q_OVERFLOW:
                    self.error = "the watch of the protected folders overflowed (events were lost)"
                    continue
                folder = self.wds.get(wd)
                if folder and name:
                    what = next((w for bit, w in _WHAT if mask & bit), "touched")
                    self.callback(folder, name, what)

    def stop(self):
        os.write(self._stop_w, b"x")
        self.thread.join(timeout=10)
        os.close(self.fd)
