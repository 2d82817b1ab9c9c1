"""What an untrusted patch may not change, computed from the tree and the image (stdlib only, runs as root).

After an untrusted patch (`restore_protected`): test files, harness files, pytest tables of pyproject.toml /
setup.cfg, symlinks, and - computed from the image, never from a list of names seen in an attack - new top-level
modules in an import root of the run that would shadow a standard-library module or an installed distribution,
package metadata (`*.dist-info`, `*.egg-info`) that would register plugins, files under any `node_modules`, and
TypeScript path mappings that would redirect an installed package.
"""

from __future__ import annotations

import configparser
import fnmatch
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from pbench_globs import HARNESS_PROTECTED, match_any  # shipped beside this file: the host's matcher
from pbench_jsonc import read_jsonc  # the host's reader of tsconfig/bun.lock text

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
