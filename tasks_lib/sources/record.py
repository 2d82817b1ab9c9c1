"""Source records: everything the pipeline knows about one repository, loaded from `data/sources/*.toml`.

Per-source behaviour (dirs, locks, install and test commands, prestart steps, services, test-file
patterns, eras) is data, not code branches. A record refuses bad values at construction and names
the file and the field that is wrong.
"""

from __future__ import annotations

import copy
import re
import string
import tomllib
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import Any

from tasks_lib.core import paths
from tasks_lib.core.constants import Side, StackDomain
from tasks_lib.core.errors import SourceError
from tasks_lib.core.record_fields import Fields as _Fields
from tasks_lib.core.record_fields import prefix as _prefix
from tasks_lib.core.record_fields import rel_dir as _rel_dir
from tasks_lib.core.record_fields import rel_path as _rel_path
from tasks_lib.protocol import globs, wire

INSTALLERS = ("pip", "uv")
FRONTEND_PACKAGE_MANAGERS = ("npm", "bun")
SERVICE_KINDS = ("postgres",)
TEST_RUNNERS = wire.TEST_RUNNERS  # the names the runners' registry knows (tasks_lib/engine/runners.py)
TEST_SCOPES = ("suite", "touched")
_REPO_RE = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
_SERVICE_VARS = ("host", "port", "user", "password", "db")


@dataclass(frozen=True)
class ServiceSpec:
    """A service container the tests need, and how its address reaches the tests' environment."""

    kind: str
    env: dict[str, str]
    user: str = "postgres"
    password: str = "pbench"
    db: str = "app"

    def render_env(self, host: str, port: int) -> dict[str, str]:
        values = {
            "host": host,
            "port": str(port),
            "user": self.user,
            "password": self.password,
            "db": self.db,
        }
        return {k: v.format(**values) for k, v in self.env.items()}


@dataclass(frozen=True)
class TestScope:
    """Which backend test files extraction and evaluation run (docs/sources.md, "Test scope").

    `suite`: every test the test command collects; PASS_TO_PASS is the suite's passing tests.
    `touched`: the test files the PR's test patch adds or changes, widened by at most `related_cap` test files
    that import a module the PR's code changes (found statically); PASS_TO_PASS is the passing tests of
    those files only."""

    kind: str = "suite"
    related_cap: int = 10

    __test__ = False  # not a pytest class


@dataclass(frozen=True)
class LeaveOut:
    """Packages of a uv lock the environment image does not install (`[backend.leave_out]`): names or globs of
    the lock's package names (`nvidia-*`), and why (recorded in the build log; part of the image key)."""

    packages: tuple[str, ...]
    reason: str


@dataclass(frozen=True)
class BackendSpec:
    dir: str
    python_version: str
    installer: str
    lock_files: tuple[str, ...]
    manifest_files: tuple[str, ...]
    test_command: str
    test_dirs: tuple[str, ...]
    prestart: tuple[str, ...]
    env: dict[str, str]
    services: tuple[ServiceSpec, ...]
    runner: str = "pytest"
    install_command: str | None = None
    timeout_s: int = 900
    # How the backend is served to frontend tests (the backend-serve container of a frontend run).
    serve_command: str = "uvicorn app.main:app --host 0.0.0.0 --port 8000"
    serve_port: int = 8000
    # uv: the optional dependencies and dependency groups the environment installs (None: every extra).
    extras: tuple[str, ...] | None = None
    groups: tuple[str, ...] = ()
    # Debian packages of the environment image (tools the tests call, e.g. jq).
    system_packages: tuple[str, ...] = ()
    scope: TestScope = field(default_factory=lambda: TestScope())
    # uv: packages the image leaves out (e.g. a CUDA build of torch no test of the scope imports).
    leave_out: LeaveOut | None = None
    # uv: the lock's workspace members are known to importlib.metadata (a dist-info with name and version, no
    # code: the code comes from the checkout), for a project that reads its own version when imported.
    workspace_metadata: bool = False

    @property
    def prefix(self) -> str:
        """What repository paths of the backend start with ("" when the project is the repository root)."""
        return _prefix(self.dir)

    @property
    def dependency_files(self) -> tuple[str, ...]:
        """Files whose change means a different environment image."""
        return tuple(dict.fromkeys(self.lock_files + self.manifest_files))


@dataclass(frozen=True)
class FrontendSpec:
    dir: str
    node_version: str
    package_manager: str
    lock_files: tuple[str, ...]
    manifest_files: tuple[str, ...]
    test_command: str
    serve_command: str
    serve_port: int
    runner: str = "playwright"
    timeout_s: int = 900
    env: dict[str, str] = field(default_factory=dict)
    # Steps run in the frontend dir of the frontend-tests container after node_modules is linked, before the
    # dev server and the tests (e.g. regenerating an API client from the backend-serve container, reached as
    # $PBENCH_BACKEND_URL).
    prestart: tuple[str, ...] = ()
    # Which Playwright specs a PR's head runs cover (`suite`: all; `touched`: the specs the test patch adds or
    # changes, widened by at most `related_cap` specs that use a test id the PR's frontend code changes).
    scope: TestScope = field(default_factory=lambda: TestScope())
    # Seconds the harness may spend walking the dev server's module graph before Playwright runs
    # (containers/runner/pbench_warm.py), so that the first visit of a route is not the spec's; 0: not at all.
    warm_up_s: int = 0

    @property
    def prefix(self) -> str:
        return _prefix(self.dir)

    @property
    def dependency_files(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.lock_files + self.manifest_files))


@dataclass(frozen=True)
class Era:
    """A span of merge dates with its own commands (e.g. poetry before uv). Overrides are raw tables."""

    name: str
    since: date | None
    until: date | None
    overrides: dict[str, Any]

    def contains(self, when: date) -> bool:
        return (self.since is None or when >= self.since) and (self.until is None or when < self.until)


@dataclass(frozen=True)
class CloneSpec:
    url: str | None = None
    mirror: str | None = None
    generator: str | None = None


@dataclass(frozen=True)
class SourceRecord:
    name: str
    repo: str
    path: Path
    clone: CloneSpec
    default_branch: str
    backend: BackendSpec
    frontend: FrontendSpec | None
    test_file_patterns: tuple[str, ...]
    test_infra_patterns: tuple[str, ...]
    eras: tuple[Era, ...]
    era: str | None
    filter_rules: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def owner_name(self) -> tuple[str, str]:
        owner, name = self.repo.split("/", 1)
        return owner, name

    def is_test_file(self, path: str) -> bool:
        """Test files and test infrastructure: never part of `patch`, always restored before grading."""
        return globs.match_any(path, self.test_file_patterns) or self.is_test_infra(path)

    def is_test_infra(self, path: str) -> bool:
        """The record's infra patterns, and the harness-wide ones (pytest config, conftest, interpreter
        start-up hooks, Playwright config) that no source may leave to an untrusted patch."""
        return globs.match_any(path, self.test_infra_patterns) or globs.match_any(
            path, globs.HARNESS_PROTECTED
        )

    def side_of(self, path: str) -> Side | None:
        """Which side of the stack a repository path belongs to, by the source's dirs: the deepest dir that
        holds it (a backend at the repository root holds every path outside the frontend's dir)."""
        sides = [(self.backend.prefix, Side.BACKEND)]
        if self.frontend:
            sides.append((self.frontend.prefix, Side.FRONTEND))
        held = [(len(pre), side) for pre, side in sides if path.startswith(pre)]
        return max(held)[1] if held else None

    def stack_domain(self, changed_paths: list[str]) -> StackDomain | None:
        sides = {self.side_of(p) for p in changed_paths} - {None}
        if sides == {Side.BACKEND}:
            return StackDomain.BACKEND_ONLY
        if sides == {Side.FRONTEND}:
            return StackDomain.FRONTEND_ONLY
        if sides == {Side.BACKEND, Side.FRONTEND}:
            return StackDomain.FULLSTACK
        return None

    def era_for(self, when: date | datetime | str | None) -> str | None:
        """Name of the era a merge date falls in, or None when the source does not support that date."""
        if not self.eras:
            return "default"
        if when is None:
            return None
        if isinstance(when, str):
            when = datetime.fromisoformat(when.replace("Z", "+00:00"))
        if isinstance(when, datetime):
            when = when.date()
        for era in self.eras:
            if era.contains(when):
                return era.name
        return None

    def for_era(self, era_name: str | None) -> SourceRecord:
        """The record with one era's overrides applied (backend/frontend tables, patterns)."""
        if era_name in (None, "default") or not self.eras:
            return self
        for era in self.eras:
            if era.name == era_name:
                merged = _deep_merge(copy.deepcopy(self.raw), era.overrides)
                merged.pop("eras", None)
                record = parse_source(merged, self.path)
                return _replace_era(record, self.eras, era.name, self.raw)
        raise SourceError(self.path, "eras", f"no era named {era_name!r}")


def _replace_era(record: SourceRecord, eras, name, raw) -> SourceRecord:
    from dataclasses import replace

    return replace(record, eras=eras, era=name, raw=raw)


def _deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _deep_merge(base[key], value)
        else:
            base[key] = value
    return base


def _parse_services(f: _Fields) -> tuple[ServiceSpec, ...]:
    raw = f.table.get("services", [])
    if not isinstance(raw, list):
        raise f.fail("services", "must be an array of tables ([[backend.services]])")
    out = []
    for i, item in enumerate(raw):
        sf = _Fields(f.path, item, f"{f.prefix}services[{i}].")
        env = sf.str_map("env")
        for var, template in env.items():
            try:
                names = [fld for _, fld, _, _ in string.Formatter().parse(template) if fld is not None]
            except ValueError as exc:
                raise sf.fail(f"env.{var}", f"malformed template {template!r}: {exc}") from None
            for name in names:
                if name not in _SERVICE_VARS:
                    raise sf.fail(
                        f"env.{var}", f"unknown placeholder {{{name}}}; use {', '.join(_SERVICE_VARS)}"
                    )
        out.append(
            ServiceSpec(
                kind=sf.str("kind", required=True, choices=SERVICE_KINDS),
                env=env,
                user=sf.str("user", "postgres"),
                password=sf.str("password", "pbench"),
                db=sf.str("db", "app"),
            )
        )
        sf.refuse_unknown()
    return tuple(out)


def _parse_backend(f: _Fields) -> BackendSpec:
    installer = f.str("installer", required=True, choices=INSTALLERS)
    for key in ("extras", "groups", "leave_out", "workspace_metadata"):
        if key in f.table and installer != "uv":
            raise f.fail(key, f"applies to installer 'uv' only (this backend's installer is {installer!r})")
    lock_files = tuple(_rel_path(f, "lock_files", p) for p in f.str_list("lock_files", required=True))
    spec = BackendSpec(
        dir=_rel_dir(f, "dir", f.str("dir", required=True)),
        python_version=f.str("python_version", required=True),
        installer=installer,
        lock_files=lock_files,
        manifest_files=tuple(_rel_path(f, "manifest_files", p) for p in f.str_list("manifest_files")),
        test_command=f.str("test_command", "python -m pytest"),
        test_dirs=tuple(f.str_list("test_dirs", ["tests"])),
        prestart=tuple(f.str_list("prestart")),
        env=f.str_map("env"),
        services=_parse_services(f),
        runner=f.str("runner", "pytest", choices=TEST_RUNNERS),
        install_command=f.str("install_command"),
        timeout_s=f.int("timeout_s", 900),
        serve_command=f.str("serve_command", "uvicorn app.main:app --host 0.0.0.0 --port 8000"),
        serve_port=f.int("serve_port", 8000),
        extras=tuple(f.str_list("extras")) if "extras" in f.table else None,
        groups=tuple(f.str_list("groups")),
        system_packages=_debian_names(f, "system_packages"),
        scope=_parse_scope(f),
        leave_out=_parse_leave_out(f),
        workspace_metadata=f.bool("workspace_metadata", False),
    )
    f.refuse_unknown("services")
    return spec


_PACKAGE_GLOB = re.compile(r"^[A-Za-z0-9*?][A-Za-z0-9._*?-]*$")


def _parse_leave_out(f: _Fields) -> LeaveOut | None:
    sf = f.sub("leave_out")
    if sf is None:
        return None
    packages = sf.str_list("packages", required=True)
    for name in packages:
        if not _PACKAGE_GLOB.match(name):
            raise sf.fail("packages", f"{name!r} is not a package name or a glob of package names")
    leave_out = LeaveOut(packages=tuple(packages), reason=sf.str("reason", required=True))
    sf.refuse_unknown()
    return leave_out


_DEBIAN_NAME = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")


def _debian_names(f: _Fields, key: str) -> tuple[str, ...]:
    names = f.str_list(key)
    for name in names:
        if not _DEBIAN_NAME.match(name):
            raise f.fail(key, f"{name!r} is not a Debian package name")
    return tuple(names)


def _parse_scope(f: _Fields) -> TestScope:
    sf = f.sub("test_scope")
    if sf is None:
        return TestScope()
    scope = TestScope(
        kind=sf.str("kind", "suite", choices=TEST_SCOPES), related_cap=sf.int("related_cap", 10)
    )
    sf.refuse_unknown()
    return scope


def _parse_frontend(f: _Fields) -> FrontendSpec:
    spec = FrontendSpec(
        dir=_rel_dir(f, "dir", f.str("dir", required=True)),
        node_version=f.str("node_version", required=True),
        package_manager=f.str("package_manager", required=True, choices=FRONTEND_PACKAGE_MANAGERS),
        lock_files=tuple(_rel_path(f, "lock_files", p) for p in f.str_list("lock_files", required=True)),
        manifest_files=tuple(_rel_path(f, "manifest_files", p) for p in f.str_list("manifest_files")),
        test_command=f.str("test_command", "npx playwright test"),
        serve_command=f.str("serve_command", required=True),
        serve_port=f.int("serve_port", 5173),
        runner=f.str("runner", "playwright", choices=TEST_RUNNERS),
        timeout_s=f.int("timeout_s", 900),
        env=f.str_map("env"),
        prestart=tuple(f.str_list("prestart")),
        scope=_parse_scope(f),
        warm_up_s=_off_or_seconds(f, "warm_up_s"),
    )
    f.refuse_unknown()
    return spec


def _off_or_seconds(f: _Fields, key: str) -> int:
    """0 (off, the default) or a positive number of seconds."""
    if f.table.get(key, 0) == 0:
        f.read.add(key)
        return 0
    return f.int(key, 0)


def _parse_eras(f: _Fields) -> tuple[Era, ...]:
    raw = f.table.get("eras", [])
    if not isinstance(raw, list):
        raise f.fail("eras", "must be an array of tables ([[eras]])")
    eras = []
    for i, item in enumerate(raw):
        ef = _Fields(f.path, item, f"eras[{i}].")
        overrides = {k: v for k, v in item.items() if k not in ("name", "since", "until")}
        era = Era(ef.str("name", required=True), ef.date("since"), ef.date("until"), overrides)
        if era.since and era.until and era.since >= era.until:
            raise ef.fail("until", "must be after 'since'")
        eras.append(era)
    return tuple(eras)


def _check_eras(record: SourceRecord) -> None:
    """Every era's overrides must make a valid record: fail at load, naming the era, not mid-season."""
    for i, era in enumerate(record.eras):
        try:
            record.for_era(era.name)
        except SourceError as exc:
            raise SourceError(record.path, f"eras[{i}].{exc.field}", exc.message.split(": ", 2)[-1]) from None


def parse_source(raw: dict[str, Any], path: Path) -> SourceRecord:
    f = _Fields(path, raw)
    repo = f.str("repo", required=True)
    if not _REPO_RE.match(repo):
        raise f.fail("repo", f"must look like 'owner/name', got {repo!r}")
    cf = f.sub("clone", required=True)
    clone = CloneSpec(url=cf.str("url"), mirror=cf.str("mirror"), generator=cf.str("generator"))
    if not (clone.url or clone.mirror or clone.generator):
        raise cf.fail("url", "one of clone.url, clone.mirror or clone.generator is required")
    cf.refuse_unknown()
    tf = f.sub("test_files", required=True)
    frontend_f = f.sub("frontend")
    filter_rules = raw.get("filter", {})
    if not isinstance(filter_rules, dict):
        raise f.fail("filter", "must be a table")
    record = SourceRecord(
        name=f.str("name", required=True),
        repo=repo,
        path=path,
        clone=clone,
        default_branch=f.str("default_branch", "main"),
        backend=_parse_backend(f.sub("backend", required=True)),
        frontend=_parse_frontend(frontend_f) if frontend_f else None,
        test_file_patterns=tuple(tf.str_list("patterns", required=True)),
        test_infra_patterns=tuple(tf.str_list("infra_patterns")),
        eras=_parse_eras(f),
        era=None,
        filter_rules=filter_rules,
        raw=raw,
    )
    tf.refuse_unknown()
    f.refuse_unknown("eras", "filter")
    return record


def load_source_file(path: Path) -> SourceRecord:
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SourceError(path, "<file>", "does not exist") from None
    except IsADirectoryError:
        raise SourceError(path, "<file>", "is a directory, not a TOML file") from None
    except UnicodeDecodeError as exc:
        raise SourceError(path, "<file>", f"is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except tomllib.TOMLDecodeError as exc:
        raise SourceError(path, "<file>", f"is not valid TOML: {exc}") from None
    except RecursionError:
        raise SourceError(path, "<file>", "is not valid TOML: nested too deeply") from None
    record = parse_source(raw, path)
    _check_eras(record)
    if record.name != path.stem:
        raise SourceError(path, "name", f"must match the file name {path.stem!r}, got {record.name!r}")
    return record


def available_sources() -> list[str]:
    return sorted(p.stem for p in paths.sources_dir().glob("*.toml"))


def load_source(name_or_path: str | Path = "demo") -> SourceRecord:
    """Load a source by name (`data/sources/<name>.toml`) or by path. The demo is the default."""
    candidate = Path(name_or_path)
    if candidate.suffix == ".toml" or candidate.exists():
        return load_source_file(candidate)
    path = paths.sources_dir() / f"{name_or_path}.toml"
    if not path.exists():
        known = ", ".join(available_sources()) or "none"
        raise SourceError(path, "<file>", f"no source named {name_or_path!r} (known: {known})")
    return load_source_file(path)
