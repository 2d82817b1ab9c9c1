"""What an untrusted patch may not change, computed from the tree and the image (stdlib only, runs as root).

After an untrusted patch (`restore_protected`): test files, harness files, pytest tables of pyproject.toml /
setup.cfg, symlinks, and - computed from the image, never from a list of names seen in an attack - new top-level
modules in an import root of the run that would shadow a standard-library module or an installed distribution,
package metadata (`*.dist-info`, `*.egg-info`) that would register plugins, files under any `node_modules`, and
TypeScript path mappings that would redirect an installed package.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from pbench_configs import ParseError, image_view, ini_section, load_tsconfig  # read as the tools read them
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


PYTEST_SECTIONS = {
    "pyproject.toml": lambda text: tomllib.loads(text).get("tool", {}).get("pytest"),
    "setup.cfg": lambda text: ini_section(text, "tool:pytest"),
}


def pytest_section_changed(rel, repo):
    """True when an edit changed the pytest table of a pyproject.toml / setup.cfg (other tables are the
    agent's to change: dependencies, tool settings), read as pytest reads it. Unreadable after the patch,
    or read differently by pytest's parser and another, counts as changed."""
    parse = PYTEST_SECTIONS.get(rel.rsplit("/", 1)[-1])
    if parse is None:
        return False
    try:
        before = parse(git_quiet(["show", f"HEAD:{rel}"], repo))
    except (subprocess.CalledProcessError, ValueError):
        before = None  # a new file
    target = repo / rel
    if not target.is_file() or target.is_symlink():
        return before is not None
    try:
        after = parse(target.read_text())
    except (ValueError, ParseError, UnicodeDecodeError):
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


def tsconfig_redirects(repo: Path, rel: str, packages: set[str]) -> list[str]:
    """Installed packages that the tsconfig at `rel` maps elsewhere, read as Playwright reads it (what it
    extends, by path or by package name, and its references): `paths` keys that capture a package, or a
    `baseUrl` (Playwright then resolves every bare import there first) whose folder holds an entry named
    like an installed package. A file it names that cannot be read, or does not exist yet (a file written
    later would decide), counts as a redirect too."""
    path = str(repo / rel)
    if not os.path.exists(path):
        return []
    found = []
    read, exists = image_view(str(repo))
    for config in load_tsconfig(path, read, exists):
        where = os.path.relpath(config["path"], repo)
        found += [f"{e} (not readable as JSON)" for e in config["errors"]]
        found += [
            f"{where} names {os.path.relpath(m, repo)}, which does not exist" for m in config["missing"]
        ]
        for key in (config.get("paths") or {}).get("mapping") or {}:
            hit = key_matches_package(str(key), packages)
            if hit:
                found.append(f"{where} maps the installed package {hit!r} (paths key {key!r})")
        base_url = config.get("baseUrl")
        if base_url and os.path.isdir(base_url) and base_url.startswith(str(repo)):
            for entry in sorted(os.listdir(base_url)):
                if entry in packages:
                    found.append(f"{where}: baseUrl folder holds {entry!r}, named like an installed package")
    return list(dict.fromkeys(found))


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
        if rel.rsplit("/", 1)[-1] == "package.json" and self.node_names:
            why = _self_reference(target, self.node_names)
            if why:
                return why
        if TS_CONFIG.search(rel) and self.node_names:
            hits = tsconfig_redirects(self.repo, rel, set(self.node_names))
            if hits:
                return "TypeScript path mapping: " + "; ".join(hits[:2])
        return None


def _self_reference(path: Path, packages: set[str]) -> str | None:
    """A package.json named like an installed package: Node resolves that name to the package itself (its
    "exports") before node_modules, so a spec's import of it would load the tree's code. Unreadable counts."""
    if not path.is_file():
        return None
    try:
        name = json.loads(path.read_text(encoding="utf-8")).get("name")
    except (OSError, ValueError, UnicodeDecodeError, AttributeError):
        return "package.json is not readable as a JSON object"
    if isinstance(name, str) and name in packages:
        return f"package name {name!r} would capture the installed package (a self-reference)"
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
