"""What the repository's code may not change, before and during a run (stdlib only, runs as root).

Before the tests, after an untrusted patch (`restore_protected`): test files, harness files, pytest tables of
pyproject.toml / setup.cfg, symlinks, and - computed from the image, never from a list of names seen in an
attack - new top-level modules in an import root of the run that would shadow a standard-library module or an
installed distribution, package metadata (`*.dist-info`, `*.egg-info`) that would register plugins, files
under any `node_modules`, and TypeScript path mappings that would redirect an installed package.

During the run (`Guard`): protected files, their folders and the runner-relevant files of the folders on the
way to them belong to root (the folders are sticky where other files may be created), `.git` is unreadable,
and an inotify watch (the kernel's record, out of reach of the code under test) sees every runner-relevant
name created, changed or removed in those folders, even one that is deleted again. After the run the
protected files are hashed again: any difference is tampering.
"""

from __future__ import annotations

import configparser
import ctypes
import fnmatch
import hashlib
import os
import re
import select
import stat
import struct
import subprocess
import sys
import threading
import tomllib
from pathlib import Path

from pbench_globs import HARNESS_PROTECTED, match_any  # shipped beside this file: the host's matcher
from pbench_jsonc import read_jsonc  # the host's reader of tsconfig/bun.lock text
from pbench_proc import TEST_GID, TEST_UID, can_drop_privileges

GIT = ["git", "-c", "user.name=pbench", "-c", "user.email=pbench@localhost", "-c", "commit.gpgsign=false"]
BASE_TAG = "pbench-base"

# Names that change how a test runner starts, wherever they appear in a watched folder.
RUNNER_RELEVANT = (
    "conftest.py",
    "pytest.ini",
    ".pytest.ini",
    "pytest.toml",
    ".pytest.toml",
    "pyproject.toml",
    "tox.ini",
    "setup.cfg",
    "sitecustomize.py",
    "usercustomize.py",
    "__init__.py",
    "*.pth",
    "*.dist-info",
    "*.egg-info",
    "*.egg-link",
    "node_modules",
    "package.json",
    "tsconfig*.json",
    "jsconfig*.json",
    "playwright.config.*",
    ".npmrc",
    ".yarnrc",
    ".yarnrc.yml",
    "bunfig.toml",
)
PACKAGE_METADATA = re.compile(r"(^|/)[^/]+\.(dist-info|egg-info|egg-link)(/|$)")
TS_CONFIG = re.compile(r"(^|/)(tsconfig[^/]*|jsconfig[^/]*)\.json$")


def git_quiet(args, cwd):
    return subprocess.run(GIT + args, cwd=cwd, capture_output=True, text=True, check=True).stdout


def relevant_name(name: str) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in RUNNER_RELEVANT)


# ----------------------------------------------------------------------------- names the image provides


def python_module_names(site_dirs) -> set[str]:
    """Standard-library modules and the top-level import names of every distribution in the image."""
    names = set(sys.stdlib_module_names) | {"pytest", "_pytest", "pluggy", "py"}
    for site in site_dirs:
        try:
            entries = os.listdir(site)
        except OSError:
            continue
        for entry in entries:
            if entry.endswith((".dist-info", ".egg-info")):
                top = os.path.join(site, entry, "top_level.txt")
                if os.path.isfile(top):
                    with open(top, errors="replace") as fh:
                        names |= {line.strip() for line in fh if line.strip()}
                continue
            if entry == "__pycache__" or entry.endswith((".pth", ".data")):
                continue
            names.add(module_name(entry))
    return {n for n in names if n}


def module_name(entry: str) -> str:
    """The import name a directory entry provides: `x.py`, `x.cpython-311-x86_64-linux-gnu.so`, `x/` -> x."""
    return entry.split(".", 1)[0] if "." in entry else entry


def site_dirs() -> list[str]:
    """The image's site dirs (the test environment's and the system's), found on disk: the runner never
    runs the environment's interpreter as root (a package's .pth would run with it)."""
    found = []
    for pattern in (
        "/opt/venv/lib/python3*/site-packages",
        "/usr/lib/python3/dist-packages",
        "/usr/local/lib/python3*/dist-packages",
        "/usr/local/lib/python3*/site-packages",
    ):
        found += sorted(str(p) for p in Path("/").glob(pattern.lstrip("/")) if p.is_dir())
    return found


def node_modules_dirs(deps_root="/deps") -> list[Path]:
    """The top-level node_modules folders under `deps_root`, found without walking into any of them (a
    node_modules tree holds tens of thousands of files)."""
    found = []
    for root, dirs, _files in os.walk(deps_root):
        if "node_modules" in dirs:
            found.append(Path(root) / "node_modules")
        dirs[:] = [d for d in dirs if d != "node_modules" and not os.path.islink(os.path.join(root, d))]
    return sorted(found)


def node_package_names(deps_root="/deps") -> set[str]:
    """Installed npm packages of the image: `react`, `@playwright/test`, and their scopes (`@playwright`)."""
    names: set[str] = set()
    for nm in node_modules_dirs(deps_root):
        for entry in nm.iterdir():
            if entry.name.startswith("."):
                continue
            names.add(entry.name)
            if entry.name.startswith("@") and entry.is_dir():
                names |= {f"{entry.name}/{sub.name}" for sub in entry.iterdir()}
    return names


# ----------------------------------------------------------------------------- after an untrusted patch


def _ini_section(text, name):
    parser = configparser.ConfigParser(interpolation=None)
    parser.read_string(text)
    return dict(parser[name]) if parser.has_section(name) else None


PYTEST_SECTIONS = {
    "pyproject.toml": lambda text: tomllib.loads(text).get("tool", {}).get("pytest"),
    "setup.cfg": lambda text: _ini_section(text, "tool:pytest"),
}


def pytest_section_changed(rel, repo):
    """True when an edit changed the pytest table of a pyproject.toml / setup.cfg (other tables are the
    agent's to change: dependencies, tool settings). Unreadable after the patch counts as changed."""
    parse = PYTEST_SECTIONS.get(rel.rsplit("/", 1)[-1])
    if parse is None:
        return False
    try:
        before = parse(git_quiet(["show", f"HEAD:{rel}"], repo))
    except (subprocess.CalledProcessError, ValueError, configparser.Error):
        before = None  # a new file
    target = repo / rel
    if not target.is_file() or target.is_symlink():
        return before is not None
    try:
        after = parse(target.read_text())
    except (ValueError, configparser.Error, UnicodeDecodeError):
        return True
    return before != after


def key_matches_package(key: str, packages: set[str]) -> str | None:
    """The installed package a tsconfig `paths` key would capture (`@playwright/test`, `*`, `@play*`)."""
    prefix, star, suffix = key.partition("*")
    for name in sorted(packages):
        for spec in (name, name + "/x"):  # the package itself, or a path inside it
            if star and spec.startswith(prefix) and spec.endswith(suffix) and len(spec) >= len(key) - 1:
                return name
            if not star and spec == key:
                return name
    return None


def tsconfig_redirects(repo: Path, rel: str, packages: set[str], seen=None) -> list[str]:
    """Installed packages that the tsconfig at `rel` (and what it extends or references inside the tree)
    maps elsewhere: `paths` keys, or a `baseUrl` (Playwright then resolves every bare import there first)
    whose folder holds an entry named like an installed package. Unreadable counts as a redirect."""
    seen = set() if seen is None else seen
    if rel in seen:
        return []
    seen.add(rel)
    path = repo / rel
    try:
        data = read_jsonc(path.read_text(encoding="utf-8-sig"))
    except (OSError, ValueError, UnicodeDecodeError):
        return [f"{rel} is not readable as JSON"] if path.exists() else []
    if not isinstance(data, dict):
        return [f"{rel} is not a JSON object"]
    found = []
    options = data.get("compilerOptions") or {}
    for key in options.get("paths") or {}:
        hit = key_matches_package(str(key), packages)
        if hit:
            found.append(f"{rel} maps the installed package {hit!r} (paths key {key!r})")
    base_url = options.get("baseUrl")
    if isinstance(base_url, str):
        folder = (path.parent / base_url).resolve()
        if folder.is_dir() and str(folder).startswith(str(repo)):
            for entry in folder.iterdir():
                if entry.name in packages:
                    found.append(
                        f"{rel}: baseUrl folder holds {entry.name!r}, named like an installed package"
                    )
    targets = data.get("extends") or []
    targets = [targets] if isinstance(targets, str) else list(targets)
    targets += [r.get("path") for r in data.get("references") or [] if isinstance(r, dict)]
    for target in targets:
        if isinstance(target, str) and target.startswith("."):
            nxt = (path.parent / target).resolve()
            if nxt.is_dir():
                nxt = nxt / "tsconfig.json"
            elif not nxt.suffix:
                nxt = nxt.with_suffix(".json")
            if str(nxt).startswith(str(repo) + "/"):
                found += tsconfig_redirects(repo, str(nxt.relative_to(repo)), packages, seen)
    return found


def restore_protected(
    patterns, repo, log, *, import_roots=(), py_names=frozenset(), node_roots=(), node_names=frozenset()
):
    """Put every protected file an untrusted patch touched back to its content before the patch (or remove
    it). Found from the tree itself after applying, not from the diff text, so no header trick escapes it.
    Returns [(path, why)]."""
    git_quiet(["add", "-A", "-f", "."], repo)
    changed = git_quiet(["diff", "--cached", "--name-only", "--no-renames", "-z", "HEAD"], repo).split("\0")
    tracked = set(git_quiet(["ls-tree", "-r", "--name-only", "HEAD"], repo).splitlines())
    rules = _Rules(patterns, repo, tracked, (import_roots, py_names), (node_roots, node_names))
    restored = []
    for rel in filter(None, changed):
        target = repo / rel
        why = rules.why(rel, target)
        if why is None:
            continue
        if target.is_symlink() or (target.exists() and not target.is_dir()):
            target.unlink()
        if rel in tracked:
            git_quiet(["checkout", "HEAD", "--", rel], repo)
        restored.append((rel, why))
    git_quiet(["add", "-A", "-f", "."], repo)
    with open(log, "a") as fh:
        fh.write(f"restored to base: {restored}\n")
    return restored


class _Rules:
    """Why one changed path is protected (None: it is the agent's to change)."""

    def __init__(self, patterns, repo, tracked, python, node):
        self.patterns, self.repo, self.tracked = patterns, repo, tracked
        # (roots, names): a NEW top-level entry of an import root named like what the image provides shadows it.
        self.shadow = [
            (sorted({r.strip("/") for r in roots}), set(names), kind)
            for (roots, names), kind in ((python, "module"), (node, "package"))
            if names
        ]
        self.node_names = set(node[1])
        self.base_tops: dict[str, set[str]] = {}
        for roots, _names, _kind in self.shadow:
            for r in roots:
                self.base_tops.setdefault(r, set())
        for path in tracked:
            for r, tops in self.base_tops.items():
                inside = _inside(path, r)
                if inside:
                    tops.add(inside.split("/", 1)[0])

    def why(self, rel, target):
        if match_any(rel, self.patterns):
            return "test file"
        if PACKAGE_METADATA.search(rel):
            return "package metadata (it could register a test-runner plugin)"
        if "node_modules" in rel.split("/"):
            return "node_modules (packages come from the image)"
        if match_any(rel, HARNESS_PROTECTED):
            return "harness file"
        if target.is_symlink():
            return "symlink"
        if pytest_section_changed(rel, self.repo):
            return "pytest configuration"
        for roots, names, kind in self.shadow:
            for r in roots:
                inside = _inside(rel, r)
                if not inside:
                    continue
                top = inside.split("/", 1)[0]
                name = module_name(top) if kind == "module" else top
                if top not in self.base_tops[r] and name in names:
                    return f"shadows the installed {kind} {name!r} (a new top-level entry of {r or '.'}/)"
        if TS_CONFIG.search(rel) and self.node_names:
            hits = tsconfig_redirects(self.repo, rel, set(self.node_names))
            if hits:
                return "TypeScript path mapping: " + "; ".join(hits[:2])
        return None


def _inside(path: str, root: str) -> str | None:
    """`path` relative to the folder `root` ("" is the repository root), or None when it is elsewhere."""
    if not root:
        return path
    return path[len(root) + 1 :] if path.startswith(root + "/") else None


def node_import_roots(repo: Path, frontend_dir: str) -> list[str]:
    """Folders a bare import is resolved in before node_modules: the `baseUrl` of every tsconfig/jsconfig of
    the frontend (Playwright resolves `*` there first)."""
    roots = set()
    for root, dirs, files in os.walk(repo / frontend_dir):
        dirs[:] = [d for d in dirs if d != "node_modules" and not os.path.islink(os.path.join(root, d))]
        for name in files:
            if not TS_CONFIG.search(name):
                continue
            path = Path(root) / name
            try:
                options = read_jsonc(path.read_text(encoding="utf-8-sig")).get("compilerOptions") or {}
            except (OSError, ValueError, UnicodeDecodeError, AttributeError):
                continue
            base_url = options.get("baseUrl") if isinstance(options, dict) else None
            if isinstance(base_url, str):
                folder = (path.parent / base_url).resolve()
                if str(folder).startswith(str(repo)):
                    roots.add(str(folder.relative_to(repo)) if folder != repo else "")
    return sorted(roots)


def agent_changed_files(repo, before_ref) -> list[str]:
    """Files the untrusted patch left changed (after the restore), relative to the repository."""
    out = git_quiet(["diff", "--name-only", "--no-renames", "-z", before_ref], repo)
    return sorted(filter(None, out.split("\0")))


def write_canaries(repo, canaries):
    """The harness's own tests (outcomes known in advance), written by root before the tree is frozen."""
    for canary in canaries:
        path = repo / canary["path"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(canary["content"])


# ----------------------------------------------------------------------------- during the run


def _sha(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


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
    ):
        self.repo = repo
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
        if relevant_name(name):
            return "runner-relevant file"
        if folder in self.py_roots and module_name(name) in self.py_names:
            return f"shadows the installed module {module_name(name)!r}"
        if folder in self.node_roots and name in self.node_names:
            return f"named like the installed package {name!r}"
        return None

    def freeze(self) -> None:
        repo = self.repo
        files = []
        for root, dirs, names in os.walk(repo):
            if root == str(repo) and ".git" in dirs:
                dirs.remove(".git")
            dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(root, d))]
            for name in names:
                files.append(os.path.relpath(os.path.join(root, name), repo))
        protected = [f for f in files if self._is_protected(f, False)]
        folders = {str(repo)} | self.py_roots | self.node_roots
        for rel in protected:
            parts = rel.split("/")[:-1]
            for i in range(len(parts) + 1):
                folders.add(str(repo.joinpath(*parts[:i])) if i else str(repo))
        folders = {f for f in folders if os.path.isdir(f)}
        # Runner-relevant files of the watched folders (pyproject.toml, package.json, tsconfig.json) are frozen
        # too: the code under test may not rewrite them while the runner reads them.
        protected_set = set(protected)
        for rel in files:
            if str(repo / rel).rsplit("/", 1)[0] in folders and self._is_protected(rel, True):
                protected_set.add(rel)
        drop = can_drop_privileges()
        # chmod before chown: the runner has CAP_CHOWN but not CAP_FOWNER.
        for rel in files:
            path = repo / rel
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                if drop:
                    os.lchown(path, 0, 0)
                continue
            keep_x = st.st_mode & 0o111
            os.chmod(path, 0o644 | keep_x)
            if rel in protected_set:
                self.protected[rel] = _sha(path)
            elif drop:
                os.chown(path, TEST_UID, TEST_GID)
        all_dirs = [str(repo)]
        for root, dirs, _names in os.walk(repo):
            if root == str(repo) and ".git" in dirs:
                dirs.remove(".git")
            dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(root, d))]
            all_dirs += [os.path.join(root, d) for d in dirs]
        for d in all_dirs:
            if d in folders:
                pure = d != str(repo) and all(
                    os.path.isdir(os.path.join(d, e))
                    or self._is_protected(os.path.relpath(os.path.join(d, e), repo), True)
                    for e in os.listdir(d)
                )
                # A folder of tests only: nobody else writes there. Otherwise sticky: new files may be
                # created, but root's entries cannot be renamed, replaced or removed.
                os.chmod(d, 0o755 if pure else 0o1777)
            else:
                os.chmod(d, 0o755)
                if drop:
                    os.chown(d, TEST_UID, TEST_GID)
        git_dir = repo / ".git"
        if git_dir.is_dir():
            os.chmod(git_dir, 0o700)
        self.watched = {d: set(os.listdir(d)) for d in sorted(folders)}
        self._watcher = _Inotify(self.watched, self._on_event)
        self._watcher.start()

    def _on_event(self, folder: str, name: str, what: str) -> None:
        rel = os.path.relpath(os.path.join(folder, name), self.repo)
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
                    findings.append(
                        f"{os.path.relpath(os.path.join(folder, name), self.repo)} appeared {when} ({why})"
                    )
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
