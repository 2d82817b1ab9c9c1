"""What an environment image is made of: its dependency files, install command and build policy, keyed by
content (the key names the tag: same lock, same image). Building them is tasks_lib/images/build.py."""

from __future__ import annotations

import functools
import hashlib
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tasks_lib.core import paths
from tasks_lib.core.config import Settings
from tasks_lib.core.errors import ImageBuildError
from tasks_lib.formats import lockcheck
from tasks_lib.sources import gitops
from tasks_lib.sources.record import BackendSpec, SourceRecord

INSTALL_COMMANDS = {
    # uv with the image's system Python (no Python downloads here); dependencies only, the project
    # itself is importable from the checkout at test time.
    "uv": (
        "{uv_note}python3 -m venv /opt/uv && /opt/uv/bin/pip install --no-cache-dir uv && "
        "cd /deps && /opt/uv/bin/uv sync --frozen --no-install-project {uv_extras} --all-packages"
        " --no-install-workspace{uv_groups}{uv_skip}"
    ),
    "pip": (
        "python3 -m venv /opt/venv && cd /deps/{backend_dir} && "
        "if [ -f requirements.txt ]; then /opt/venv/bin/pip install --no-cache-dir -r requirements.txt; "
        "else /opt/venv/bin/pip install --no-cache-dir .; fi"
    ),
}


def sha256_bytes(*chunks: bytes) -> str:
    h = hashlib.sha256()
    for chunk in chunks:
        h.update(len(chunk).to_bytes(8, "big"))
        h.update(chunk)
    return h.hexdigest()


def lock_sha(contents: Mapping[str, bytes | None]) -> str:
    """`sha256:<hex>` of the lock files, as the instance `environment` records it (one file: its hash)."""
    present = {k: v for k, v in contents.items() if v is not None}
    if len(present) == 1:
        return "sha256:" + hashlib.sha256(next(iter(present.values()))).hexdigest()
    return "sha256:" + sha256_bytes(*(k.encode() + b"\0" + v for k, v in sorted(present.items())))


# Build-context files per side (besides the dependency files under deps/). Run-time helpers (the runner, the
# injected Playwright config) are shipped per run instead, so a harness change never rebuilds an image.
CONTEXT_FILES = {
    "backend": ("backend/Dockerfile",),
    "frontend": (
        "frontend/Dockerfile",
        "frontend/install-toolchain.sh",
        "frontend/install-deps.sh",
    ),
}


@dataclass(frozen=True)
class EnvSpec:
    """What an environment image is made of. Its key names the tag: same lock, same image."""

    source: str
    side: str
    install: str
    dependency_files: tuple[tuple[str, bytes | None], ...]
    buildargs: tuple[tuple[str, str], ...] = ()
    # Packages whose build code the install may run (npm lifecycle scripts): those the base lock needed.
    allowed_scripts: tuple[str, ...] = ()
    # Of those, the ones only optional dependencies bring: a failed script removes the package (npm's rule).
    optional_scripts: tuple[str, ...] = ()
    # Debian packages installed (as root, from Debian's mirror) before the dependencies.
    system_packages: tuple[str, ...] = ()

    @property
    def lock_sha(self) -> str:
        return lock_sha(dict(self.dependency_files))

    def context(self) -> dict[str, bytes]:
        files = {
            rel.split("/", 1)[1]: (paths.containers_dir() / rel).read_bytes()
            for rel in CONTEXT_FILES[self.side]
        }
        if self.side == "backend":
            files["install.sh"] = self.install.encode() + b"\n"
            if self.system_packages:
                files["system-packages.txt"] = " ".join(self.system_packages).encode() + b"\n"
        else:
            files["allowed-scripts.txt"] = " ".join(self.allowed_scripts).encode() + b"\n"
            files["optional-scripts.txt"] = " ".join(self.optional_scripts).encode() + b"\n"
        for rel, data in self.dependency_files:
            if data is not None:
                files[f"deps/{rel}"] = data
        files.setdefault("deps/.keep", b"")
        return files

    def _parts(self, base_id: str, with_deps: bool) -> list[bytes]:
        parts = [self.source.encode(), self.side.encode(), self.install.encode(), base_id.encode()]
        parts += [f"{k}={v}".encode() for k, v in self.buildargs]
        files = sorted((k, v) for k, v in self.context().items() if with_deps or not k.startswith("deps/"))
        return parts + [rel.encode() + b"\0" + data for rel, data in files]

    def recipe(self, base_id: str) -> str:
        """Everything of the image but its dependency files: images of one recipe may build on each other."""
        return sha256_bytes(*self._parts(base_id, with_deps=False))[:32]

    def packages(self) -> set[str] | None:
        """What a uv lock of this image pins (None: no uv lock, or an installer whose sync is not exact; such
        images are always built from scratch)."""
        if self.side != "backend" or "uv sync" not in self.install or "--inexact" in self.install:
            return None
        locks = [data for rel, data in self.dependency_files if rel.endswith("uv.lock") and data]
        if len(locks) != 1:
            return None
        try:
            return lockcheck.uv_packages(locks[0].decode("utf-8", "replace"))
        except ValueError:  # tomllib's error: a lock that does not parse builds (and fails) from scratch
            return None

    def key(self, base_id: str) -> str:
        parts = self._parts(base_id, with_deps=True)
        parts += [rel.encode() for rel, data in self.dependency_files if data is None]
        return sha256_bytes(*parts)


def backend_env_spec(
    source: SourceRecord, contents: Mapping[str, bytes | None], base: Mapping[str, bytes | None] | None = None
) -> EnvSpec:
    """The backend environment of `contents`; `base` are the dependency files before the agent's patch (a
    patched lock may build from source only what the base lock needed to)."""
    spec: BackendSpec = source.backend
    install = spec.install_command or install_command(spec, contents)
    missing = [p for p in spec.lock_files if contents.get(p) is None]
    if len(missing) == len(spec.lock_files):
        raise ImageBuildError(
            f"source {source.name}: none of the lock files {list(spec.lock_files)} exist at this commit"
        )
    _check_python(source, contents)
    if not spec.install_command:
        _check_groups(source, contents)
    files = tuple((rel, contents.get(rel)) for rel in spec.dependency_files)
    return EnvSpec(
        source.name,
        "backend",
        _build_policy(spec, contents, base) + install,
        files,
        system_packages=spec.system_packages,
    )


def lock_groups(contents: Mapping[str, bytes | None]) -> set[str] | None:
    """The dependency groups a uv lock records for its workspace's own packages (`[package.dev-dependencies]`
    of the editable and virtual ones); None when there is no uv lock to read."""
    members = list(_lock_members(contents))
    if not members:
        return None
    return {group for lock in members for _, _, groups in lock for group in groups}


def _check_groups(source: SourceRecord, contents: Mapping[str, bytes | None]) -> None:
    """A group the record wants and the commit's pyproject.toml declares must be in the lock: `uv sync --frozen`
    installs from the lock alone, and a lock written before the group (a stale lock at this commit) fails the
    install. A clear reason before any build, not a failed build."""
    spec: BackendSpec = source.backend
    if spec.installer != "uv":
        return
    known = declared(spec, contents)
    recorded = lock_groups(contents)
    if known is None or recorded is None:
        return
    missing = [g for g in spec.groups if g in known[1] and g not in recorded]
    if missing:
        raise ImageBuildError(
            f"source {source.name}: the uv.lock at this commit records no dependency group {', '.join(missing)} "
            f"that {spec.prefix}pyproject.toml declares (the lock is out of step with it): "
            "`uv sync --frozen` cannot install it"
        )


def lock_python(contents: Mapping[str, bytes | None]) -> str | None:
    """The `requires-python` a uv lock records (None when no lock says)."""
    for rel, data in contents.items():
        if rel.endswith("uv.lock") and data:
            for line in data.decode("utf-8", "replace").splitlines()[:10]:
                if line.startswith("requires-python"):
                    return line.split("=", 1)[1].strip().strip('"')
    return None


def unfetchable(contents: Mapping[str, bytes | None] | None) -> list[str]:
    """Packages a uv lock takes from a git repository or a URL off the package index: the build's egress
    reaches the package indexes only (tasks_lib.images.egress), so they are left out of the environment
    (`--no-install-package`, named in the build log and the image key) instead of failing every build of
    the lock. A test that imports one fails on its own, visibly."""
    from urllib.parse import urlparse

    from tasks_lib.images import egress

    hosts = set(egress.DEFAULT_HOSTS)
    out: set[str] = set()
    for rel, data in (contents or {}).items():
        if not (rel.endswith("uv.lock") and data):
            continue
        for name, src in lockcheck.uv_sources(data).items():
            url = src.get("url")
            if name and ("git" in src or (isinstance(url, str) and urlparse(url).hostname not in hosts)):
                out.add(name)
    return sorted(out)


def _check_python(source: SourceRecord, contents: Mapping[str, bytes | None]) -> None:
    """The record's Python must be one the lock accepts: a clear error, not an install that fails later."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    wanted = lock_python(contents)
    if not wanted:
        return
    try:
        ok = SpecifierSet(wanted).contains(source.backend.python_version, prereleases=True)
    except InvalidSpecifier:
        return
    if not ok:
        raise ImageBuildError(
            f"source {source.name}: the lock asks for Python {wanted!r}, the record's backend.python_version is "
            f"{source.backend.python_version!r} (the image's Python: Debian bookworm 3.11); an era with a "
            "newer python_version is needed for this commit"
        )


def declared(
    spec: BackendSpec, contents: Mapping[str, bytes | None] | None
) -> tuple[set[str], set[str]] | None:
    """(optional-dependency names, dependency-group names) the backend's pyproject.toml defines at this commit;
    None when there is none to read (then the record's lists are used as they are)."""
    import tomllib

    data = (contents or {}).get(f"{spec.prefix}pyproject.toml")
    if not data:
        return None
    try:
        table = tomllib.loads(data.decode("utf-8", "replace"))
    except tomllib.TOMLDecodeError:
        return None
    project = table.get("project") if isinstance(table.get("project"), dict) else {}
    extras = (
        project.get("optional-dependencies") if isinstance(project.get("optional-dependencies"), dict) else {}
    )
    groups = table.get("dependency-groups") if isinstance(table.get("dependency-groups"), dict) else {}
    return set(extras), set(groups)


def install_command(spec: BackendSpec, contents: Mapping[str, bytes | None] | None = None) -> str:
    """The source's installer with its extras and groups (uv: every extra unless the record names some). The
    record's extras and groups are what it wants; those the commit's pyproject.toml does not define are left
    out (a repository adds and renames them over time: `dev` an extra, later a group)."""
    known = declared(spec, contents)
    wanted_extras = (
        spec.extras if spec.extras is None or known is None else [e for e in spec.extras if e in known[0]]
    )
    wanted_groups = spec.groups if known is None else [g for g in spec.groups if g in known[1]]
    if wanted_extras is None:
        extras = "--all-extras"
    else:
        extras = " ".join(f"--extra {shlex.quote(e)}" for e in wanted_extras)
    groups = "".join(f" --group {shlex.quote(g)}" for g in wanted_groups)
    unreachable = unfetchable(contents)
    chosen = [n for n in left_out(spec, contents) if n not in unreachable]
    skip = "".join(f" --no-install-package {shlex.quote(n)}" for n in unreachable + chosen)
    note = "".join(
        f"echo {shlex.quote(f'pbench: left out, {why}: ' + ' '.join(names))} && "
        for why, names in (
            ("not on the package index", unreachable),
            (f"by the source record ({spec.leave_out.reason if spec.leave_out else ''})", chosen),
        )
        if names
    )
    command = INSTALL_COMMANDS[spec.installer].format(
        backend_dir=spec.dir, uv_extras=extras, uv_groups=groups, uv_skip=skip, uv_note=note
    )
    return command + workspace_metadata_command(spec, contents)


def left_out(spec: BackendSpec, contents: Mapping[str, bytes | None] | None) -> list[str]:
    """The lock's packages the record's `leave_out` names (exact names or globs: `nvidia-*`), sorted."""
    if spec.leave_out is None:
        return []
    import fnmatch

    names: set[str] = set()
    for rel, data in (contents or {}).items():
        if rel.endswith("uv.lock") and data:
            names |= set(lockcheck.uv_sources(data))
    return sorted(n for n in names if n and any(fnmatch.fnmatchcase(n, p) for p in spec.leave_out.packages))


def _lock_members(contents: Mapping[str, bytes | None] | None):
    """The workspace packages of every uv lock of `contents` (`_workspace_packages`; a lock that does not parse
    is skipped)."""
    for rel, data in (contents or {}).items():
        if rel.endswith("uv.lock") and data:
            members = _workspace_packages(data)
            if members is not None:
                yield members


@functools.lru_cache(maxsize=8)
def _workspace_packages(lock: bytes) -> tuple[tuple[str, str, frozenset[str]], ...] | None:
    """(name, version, dependency groups) of the packages a uv lock takes from the workspace itself (`editable`
    or `virtual` sources); None when it does not parse. Parsing all of mcp-context-forge's 1 MB lock took
    0.25-0.4 s, and every scoring asked it twice before its run, then again for the run made ahead and the
    cache probe (docs/performance.md, section 19): now only the tables that can be the workspace's are parsed,
    and the answer is kept per lock content."""
    import tomllib

    text = lock.decode("utf-8", "replace")
    # Only the package tables that can be the workspace's are parsed: a `[[package]]` table's source key
    # names `editable` or `virtual`, so a table without either word is none of them (a superset, filtered
    # exactly below), after the lock's head. The whole lock is parsed when the cut one does not parse.
    head, *tables = text.split("\n[[package]]\n")
    kept = [t for t in tables if "editable" in t or "virtual" in t]
    try:
        parsed = tomllib.loads(head + "\n" + "".join("[[package]]\n" + t + "\n" for t in kept))
    except tomllib.TOMLDecodeError:
        try:
            parsed = tomllib.loads(text)
        except tomllib.TOMLDecodeError:
            return None
    return tuple(
        (p.get("name") or "", str(p.get("version", "0")), frozenset(p.get("dev-dependencies") or {}))
        for p in parsed.get("package", [])
        if {"editable", "virtual"} & set(p.get("source") or {})
    )


def workspace_members(contents: Mapping[str, bytes | None] | None) -> list[tuple[str, str]]:
    """(name, version) of the packages a uv lock takes from the workspace itself (`editable` or `virtual`
    sources), sorted."""
    return sorted(
        {(name, version) for members in _lock_members(contents) for name, version, _ in members if name}
    )


def workspace_metadata_command(spec: BackendSpec, contents: Mapping[str, bytes | None] | None) -> str:
    """With `workspace_metadata`, shell lines after the install that make each workspace member of the lock
    known to importlib.metadata: a dist-info holding its name and version (METADATA, INSTALLER, RECORD: uv can
    remove it in a delta build), no code. Empty otherwise."""
    if not spec.workspace_metadata:
        return ""
    lines = ["SP=$(/opt/venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])')"]
    for name, version in workspace_members(contents):
        folder = f"{re.sub(r'[-_.]+', '_', name)}-{version}.dist-info"
        files = {
            "METADATA": ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"],
            "INSTALLER": ["pbench"],
            "RECORD": [f"{folder}/{f},," for f in ("METADATA", "INSTALLER", "RECORD")],
        }
        lines.append(f'mkdir -p "$SP/{folder}"')
        lines += [
            f"printf '%s\\n' {' '.join(shlex.quote(x) for x in body)} > \"$SP/{folder}/{f}\""
            for f, body in files.items()
        ]
    return " && " + " && ".join(lines)


def _build_policy(spec: BackendSpec, contents, base) -> str:
    """Shell lines that restrict the install of a patched lock: no source build (no package build code) but
    for the packages the base lock itself builds from source. Empty for the base lock."""
    if base is None or all(contents.get(p) == base.get(p) for p in spec.dependency_files):
        return ""
    uv_locks = [p for p in spec.lock_files if p.endswith("uv.lock")]
    if uv_locks:
        text = lambda files: (files.get(uv_locks[0]) or b"").decode("utf-8", "replace")  # noqa: E731
        allowed = set(lockcheck.uv_source_builds(text(base)))
        denied = [n for n in lockcheck.uv_package_names(text(contents)) if n not in allowed]
        if not allowed:
            return "export UV_NO_BUILD=1\n"
        return f"export UV_NO_BUILD_PACKAGE='{' '.join(denied)}'\n" if denied else ""
    return "export PIP_ONLY_BINARY=:all:\n"


def frontend_env_spec(
    source: SourceRecord,
    contents: Mapping[str, bytes | None],
    settings: Settings | None = None,
    base: Mapping[str, bytes | None] | None = None,
) -> EnvSpec:
    """Node major and package manager from the source, dependencies from the frontend lock; lifecycle scripts
    only for the packages the base lock (`base`, before the agent's patch; else the lock itself) needed."""
    if source.frontend is None:
        raise ImageBuildError(f"source {source.name}: no [frontend] table, no frontend image")
    fe = source.frontend
    present = [p for p in fe.lock_files if contents.get(p) is not None]
    if not present:
        raise ImageBuildError(
            f"source {source.name}: none of the lock files {list(fe.lock_files)} exist at this commit"
        )
    install_dir = present[0].rsplit("/", 1)[0] if "/" in present[0] else "."
    settings = settings or Settings.from_env()
    args = (
        ("NODE_MAJOR", fe.node_version.split(".")[0]),
        ("PACKAGE_MANAGER", fe.package_manager),
        ("FRONTEND_DIR", fe.dir),
        ("INSTALL_DIR", install_dir),
        ("NPM_CONFIG_REGISTRY", settings.npm_registry or ""),
    )
    files = tuple((rel, contents.get(rel)) for rel in fe.dependency_files)
    return EnvSpec(
        source.name,
        "frontend",
        f"{fe.package_manager} node{args[0][1]}",
        files,
        args,
        _allowed_scripts(fe, base if base is not None else contents),
        _allowed_scripts(fe, base if base is not None else contents, optional=True),
    )


def _allowed_scripts(fe, files: Mapping[str, bytes | None], optional: bool = False) -> tuple[str, ...]:
    text = lambda rel: (files.get(rel) or b"").decode("utf-8", "replace") or None  # noqa: E731
    if fe.package_manager == "npm":
        return tuple(
            n
            for rel in fe.lock_files
            if rel.endswith("package-lock.json")
            for n in lockcheck.npm_install_scripts(text(rel), optional=optional)
        )
    if optional:
        return ()  # bun runs the scripts of `trustedDependencies` alone: none is optional by the lock
    return tuple(
        n
        for rel in fe.manifest_files
        if rel.endswith("package.json")
        for n in lockcheck.bun_trusted(text(rel))
    )


def run_env_specs(
    source: SourceRecord, repo: Path, commit: str, chain, side: str, settings: Settings | None = None
) -> tuple[EnvSpec, EnvSpec | None]:
    """The backend spec and (for a frontend run) the frontend spec of a patch chain: [(diff, untrusted)].
    The trusted patches alone give the base that decides what the install may run."""
    return _run_env_specs(source, repo, commit, chain, side, settings or Settings.from_env())


class EnvSpecBook:
    """The environment specs of one scoring (one instance at one commit): each patch chain's worked out once
    and handed on (the image key, the tooling check, each side's engine run ask for the same chains), kept
    as long as the scoring holds the book, never in a module."""

    def __init__(self, source: SourceRecord, repo: Path, commit: str, settings: Settings):
        self.source, self.repo, self.commit, self.settings = source, repo, commit, settings
        self._specs: dict[tuple, tuple[EnvSpec, EnvSpec | None]] = {}

    def of(self, chain, side: str) -> tuple[EnvSpec, EnvSpec | None]:
        key = (str(side), *(patches_key(d, u) for d, u in chain))
        if key not in self._specs:
            self._specs[key] = _run_env_specs(
                self.source, self.repo, self.commit, chain, str(side), self.settings
            )
        return self._specs[key]


def patches_key(diff: str, untrusted: bool) -> bytes:
    from tasks_lib.formats.patches import patch_bytes

    return (b"u" if untrusted else b"t") + patch_bytes(diff)


def _run_env_specs(source, repo, commit, chain, side, settings):
    texts = [d for d, _ in chain]
    trusted = [d for d, untrusted in chain if not untrusted]

    def both(s: str):
        """The dependency files after the whole chain, and after its trusted patches only (the base)."""
        return dependency_contents(source, repo, commit, texts, s), dependency_contents(
            source, repo, commit, trusted, s
        )

    contents, base = both("backend")
    backend = backend_env_spec(source, contents, base)
    if side != "frontend":
        return backend, None
    contents, base = both("frontend")
    return backend, frontend_env_spec(source, contents, settings, base)


def dependency_contents(
    source: SourceRecord, repo: Path, commit: str, patches: list[str] = (), side: str = "backend"
) -> dict:
    """Dependency files at `commit`, after the given patches (a PR that adds a package changes the lock)."""
    deps = source.backend.dependency_files if side == "backend" else source.frontend.dependency_files
    contents = {rel: gitops.read_file(repo, commit, rel) for rel in deps}
    return gitops.patched_files(contents, list(patches)) if patches else contents
