"""Sources as data (issue 2, item 3): a typed record per repository, loaded from TOML under `data/`.

Bad or missing fields fail with a message naming the file and the field; eras select per-date overrides;
test-file patterns and source dirs decide what is a test file and which side of the stack a path is on.
"""

from __future__ import annotations

import textwrap
from datetime import date, datetime
from pathlib import Path

import pytest

from tasks_lib.core import paths
from tasks_lib.core.constants import Side, StackDomain
from tasks_lib.core.errors import InputError, SourceError
from tasks_lib.protocol import globs
from tasks_lib.sources.record import SourceRecord, load_source, load_source_file

SHOP = textwrap.dedent(
    """\
    name = "shop"
    repo = "acme/shop"
    default_branch = "main"

    [clone]
    url = "https://example.org/acme/shop.git"

    [backend]
    dir = "backend"
    python_version = "3.12"
    installer = "uv"
    lock_files = ["backend/uv.lock"]
    test_command = "python -m pytest"
    timeout_s = 300

    [[backend.services]]
    kind = "postgres"
    [backend.services.env]
    POSTGRES_SERVER = "{host}"
    POSTGRES_PORT = "{port}"
    DATABASE_URL = "postgresql://{user}:{password}@{host}:{port}/{db}"

    [frontend]
    dir = "frontend"
    node_version = "20"
    package_manager = "bun"
    lock_files = ["frontend/bun.lock"]
    serve_command = "bun run dev"

    [test_files]
    patterns = ["backend/tests/**", "**/conftest.py", "frontend/tests/**", "**/*.spec.ts"]
    infra_patterns = ["backend/pytest.ini", "**/playwright.config.*"]

    [[eras]]
    name = "pip"
    since = "2023-01-01"
    until = "2024-06-01"
    [eras.backend]
    installer = "pip"
    lock_files = ["backend/requirements.txt"]
    python_version = "3.10"

    [[eras]]
    name = "uv"
    since = "2024-06-01"
    """
)


def write(tmp_path: Path, text: str, name: str = "shop") -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    return path


def edit(text: str, old: str, new: str) -> str:
    assert old in text, f"test setup: {old!r} not in the base TOML"
    return text.replace(old, new, 1)


@pytest.fixture
def shop(tmp_path) -> SourceRecord:
    return load_source_file(write(tmp_path, SHOP))


# --------------------------------------------------------------------------- the committed demo source


def test_committed_demo_source_loads():
    """Rule: the embedded demo source is the default everywhere and loads from `data/sources/demo.toml`."""
    demo = load_source()
    assert demo.name == "demo"
    assert demo.path == paths.sources_dir() / "demo.toml"
    assert demo.repo == "prototypebench/demo-fullstack"
    assert demo.clone.generator == "demo"
    assert demo.backend.dir == "backend"
    assert demo.backend.installer in ("pip", "uv")
    assert demo.backend.lock_files and all(not f.startswith("/") for f in demo.backend.lock_files)
    assert [s.kind for s in demo.backend.services] == ["postgres"]
    env = demo.backend.services[0].render_env("db", 5432)
    assert env["POSTGRES_SERVER"] == "db" and env["POSTGRES_PORT"] == "5432"
    assert load_source("demo") == demo


def test_the_base_toml_of_this_file_is_valid(shop):
    """Rule: the broken variants below differ from a valid file by exactly the field under test."""
    assert shop.name == "shop" and shop.repo == "acme/shop"
    assert shop.backend.timeout_s == 300
    assert shop.frontend is not None and shop.frontend.package_manager == "bun"
    assert [e.name for e in shop.eras] == ["pip", "uv"]
    assert shop.owner_name == ("acme", "shop")


def test_unknown_source_name_lists_the_known_ones():
    """Rule: a wrong source name says which names exist."""
    with pytest.raises(SourceError) as exc:
        load_source("no-such-source")
    assert "demo" in str(exc.value)
    assert exc.value.field == "<file>"


# --------------------------------------------------------------------------- broken variants

BROKEN = [
    ("missing-repo", ('repo = "acme/shop"\n', ""), "repo", "is missing"),
    ("repo-format", ('repo = "acme/shop"', 'repo = "https://github.com/acme/shop"'), "repo", "owner/name"),
    ("repo-not-string", ('repo = "acme/shop"', "repo = 42"), "repo", "must be a string"),
    ("missing-clone", ('[clone]\nurl = "https://example.org/acme/shop.git"\n', ""), "clone", "is missing"),
    ("empty-clone", ('url = "https://example.org/acme/shop.git"', 'branch = "x"'), "clone.url", "required"),
    (
        "missing-backend",
        (SHOP[SHOP.index("[backend]") : SHOP.index("[frontend]")], ""),
        "backend",
        "is missing",
    ),
    ("bad-installer", ('installer = "uv"', 'installer = "poetry"'), "backend.installer", "pip, uv"),
    ("missing-installer", ('installer = "uv"\n', ""), "backend.installer", "is missing"),
    (
        "lock-files-not-list",
        ('lock_files = ["backend/uv.lock"]', 'lock_files = "backend/uv.lock"'),
        "backend.lock_files",
        "list of strings",
    ),
    (
        "lock-files-empty",
        ('lock_files = ["backend/uv.lock"]', "lock_files = []"),
        "backend.lock_files",
        "empty",
    ),
    (
        "lock-file-escapes",
        ('lock_files = ["backend/uv.lock"]', 'lock_files = ["../uv.lock"]'),
        "backend.lock_files",
        "relative path",
    ),
    ("absolute-dir", ('dir = "backend"', 'dir = "/srv/backend"'), "backend.dir", "relative path"),
    ("dotdot-dir", ('dir = "backend"', 'dir = "backend/../../etc"'), "backend.dir", "relative path"),
    ("frontend-dotdot-dir", ('dir = "frontend"', 'dir = "../frontend"'), "frontend.dir", "relative path"),
    ("empty-dir", ('dir = "backend"', 'dir = ""'), "backend.dir", "empty"),
    (
        "unknown-placeholder",
        ('POSTGRES_SERVER = "{host}"', 'POSTGRES_SERVER = "{nope}"'),
        "backend.services[0].env.POSTGRES_SERVER",
        "{nope}",
    ),
    ("service-kind", ('kind = "postgres"', 'kind = "mysql"'), "backend.services[0].kind", "postgres"),
    ("timeout-zero", ("timeout_s = 300", "timeout_s = 0"), "backend.timeout_s", "positive integer"),
    ("frontend-serve", ('serve_command = "bun run dev"\n', ""), "frontend.serve_command", "is missing"),
    (
        "frontend-pm",
        ('package_manager = "bun"', 'package_manager = "yarn"'),
        "frontend.package_manager",
        "bun",
    ),
    (
        "patterns-missing",
        ('patterns = ["backend/tests/**"', 'other = ["backend/tests/**"'),
        "test_files.patterns",
        "is missing",
    ),
    ("era-bad-date", ('since = "2023-01-01"', 'since = "2023-13-01"'), "eras[0].since", "YYYY-MM-DD"),
    ("era-not-a-date", ('since = "2023-01-01"', 'since = "last year"'), "eras[0].since", "YYYY-MM-DD"),
    ("era-until-before-since", ('until = "2024-06-01"', 'until = "2022-01-01"'), "eras[0].until", "after"),
    ("era-no-name", ('name = "pip"\n', ""), "eras[0].name", "is missing"),
    ("name-mismatch", ('name = "shop"', 'name = "market"'), "name", "file name"),
    ("invalid-toml", ('repo = "acme/shop"', 'repo = "acme/shop'), "<file>", "not valid TOML"),
]


@pytest.mark.parametrize(("old_new", "field", "problem"), [b[1:] for b in BROKEN], ids=[b[0] for b in BROKEN])
def test_broken_source_names_the_file_and_the_exact_field(tmp_path, old_new, field, problem):
    """Rule: a bad or missing field fails at load with a SourceError naming the file and the exact field."""
    path = write(tmp_path, edit(SHOP, *old_new))
    with pytest.raises(SourceError) as exc:
        load_source_file(path)
    err = exc.value
    assert err.path == str(path)
    assert err.field == field
    assert str(path) in str(err)
    assert f"field '{field}'" in str(err)
    assert problem in str(err)
    assert isinstance(err, InputError)  # the CLI exits 2 on it


def test_missing_file_is_a_source_error(tmp_path):
    """Rule: a source path that does not exist is reported as such, naming the file."""
    path = tmp_path / "gone.toml"
    with pytest.raises(SourceError) as exc:
        load_source(path)
    assert str(path) in str(exc.value) and "does not exist" in str(exc.value)


@pytest.mark.parametrize("template", ["{host", "postgres://{}:5432"])
def test_malformed_service_env_template_fails_at_load(tmp_path, template):
    """Rule: a record refuses bad values at construction; a service env template that cannot be rendered
    must fail at load naming the file and field, not inside a running task."""
    path = write(tmp_path, edit(SHOP, 'POSTGRES_SERVER = "{host}"', f'POSTGRES_SERVER = "{template}"'))
    with pytest.raises(SourceError) as exc:
        load_source_file(path)
    assert exc.value.field == "backend.services[0].env.POSTGRES_SERVER"


def test_bad_era_override_fails_at_load_naming_the_era(tmp_path):
    """Rule: bad fields fail at load naming file and field; an era's override is a field of that era."""
    path = write(tmp_path, edit(SHOP, 'installer = "pip"', 'installer = "poetry"'))
    with pytest.raises(SourceError) as exc:
        load_source_file(path)
    assert exc.value.field.startswith("eras[0].")
    assert "installer" in exc.value.field


# --------------------------------------------------------------------------- eras


@pytest.mark.parametrize(
    ("when", "era"),
    [
        ("2022-12-31T23:59:59Z", None),  # before the first era: not supported
        ("2023-01-01T00:00:00Z", "pip"),  # `since` is inclusive
        (date(2024, 5, 31), "pip"),
        (datetime(2024, 5, 31, 23, 59), "pip"),
        ("2024-06-01T00:00:00Z", "uv"),  # `until` is exclusive: the next era starts that day
        ("2030-01-01T00:00:00+00:00", "uv"),  # open-ended last era
        (None, None),
    ],
)
def test_era_for_picks_the_half_open_span_of_the_merge_date(shop, when, era):
    """Rule: eras are half-open [since, until) spans of merge dates; outside every era is unsupported."""
    assert shop.era_for(when) == era


def test_source_without_eras_supports_every_date(tmp_path):
    """Rule: a source with no eras has one implicit era, `default`, which is the record itself."""
    text = SHOP[: SHOP.index("[[eras]]")]
    record = load_source_file(write(tmp_path, text))
    assert record.eras == ()
    assert record.era_for("1999-01-01T00:00:00Z") == "default"
    assert record.era_for(None) == "default"
    assert record.for_era("default") is record


def test_for_era_applies_that_eras_overrides(shop):
    """Rule: per-source behaviour per era is data: the era's tables override the record's."""
    old = shop.for_era("pip")
    assert old.era == "pip"
    assert old.backend.installer == "pip"
    assert old.backend.lock_files == ("backend/requirements.txt",)
    assert old.backend.python_version == "3.10"
    # Untouched fields keep the record's values; the era list stays for later lookups.
    assert old.backend.dir == "backend" and old.backend.timeout_s == 300
    assert old.backend.services == shop.backend.services
    assert old.frontend == shop.frontend
    assert old.eras == shop.eras
    # The original record is not changed by selecting an era.
    assert shop.backend.installer == "uv" and shop.era is None


def test_for_era_without_overrides_and_default(shop):
    """Rule: an era with no overrides gives the record's values; None/`default` give the record itself."""
    new = shop.for_era("uv")
    assert new.era == "uv"
    assert new.backend == shop.backend
    assert shop.for_era(None) is shop
    assert shop.for_era("default") is shop


def test_for_era_of_the_date_matches_era_for(shop):
    """Rule: `for_era(era_for(date))` is how consumers pick the commands of a task's merge date."""
    assert shop.for_era(shop.era_for("2023-06-01T12:00:00Z")).backend.installer == "pip"
    assert shop.for_era(shop.era_for("2025-06-01T12:00:00Z")).backend.installer == "uv"


def test_frontend_prestart_steps_default_empty_and_follow_the_era(tmp_path, shop):
    """Rule: frontend prestart steps (run before the dev server and Playwright, e.g. regenerating an API
    client from the backend under test) are data: none by default, a list in `[frontend]`, per era."""
    assert shop.frontend.prestart == ()
    text = edit(
        SHOP, 'serve_command = "bun run dev"\n', 'serve_command = "bun run dev"\nprestart = ["bun run gen"]\n'
    )
    text = edit(
        text,
        'python_version = "3.10"\n',
        'python_version = "3.10"\n[eras.frontend]\nprestart = ["npm run gen"]\n',
    )
    record = load_source_file(write(tmp_path, text))
    assert record.frontend.prestart == ("bun run gen",)
    assert record.for_era("pip").frontend.prestart == ("npm run gen",)
    assert record.for_era("uv").frontend.prestart == ("bun run gen",)


def test_unknown_era_names_the_eras_field(shop):
    """Rule: asking for an era that does not exist names the file and the `eras` field."""
    with pytest.raises(SourceError) as exc:
        shop.for_era("poetry")
    assert exc.value.field == "eras"
    assert exc.value.path == str(shop.path)


# --------------------------------------------------------------------------- test files, sides, domains


@pytest.mark.parametrize(
    ("path", "is_test"),
    [
        ("backend/tests/api/routes/test_users.py", True),
        ("backend/tests/conftest.py", True),
        ("backend/conftest.py", True),
        ("conftest.py", True),  # `**/` matches zero directories
        ("frontend/tests/items.spec.ts", True),
        ("frontend/src/components/Item.spec.ts", True),
        ("backend/pytest.ini", True),  # test infrastructure
        ("frontend/playwright.config.ts", True),
        ("backend/app/api/routes/users.py", False),
        ("backend/app/tests_helpers.py", False),
        ("backend/testsuite/test_x.py", False),
        ("backend/tests", False),  # the folder itself is not a file under it
        ("frontend/src/spec.ts", False),
        ("README.md", False),
    ],
)
def test_is_test_file(shop, path, is_test):
    """Rule: test files and test infrastructure (never part of `patch`) are decided by the source's patterns."""
    assert shop.is_test_file(path) is is_test


def test_test_infra_is_a_subset_of_test_files(shop):
    """Rule: infrastructure files (pytest/Playwright config) are test files, but not every test is infra."""
    assert shop.is_test_infra("backend/pytest.ini")
    assert shop.is_test_infra("frontend/playwright.config.ts")
    assert not shop.is_test_infra("backend/tests/test_x.py")


@pytest.mark.parametrize(
    ("path", "side"),
    [
        ("backend/app/main.py", Side.BACKEND),
        ("backend/tests/test_x.py", Side.BACKEND),
        ("frontend/src/App.tsx", Side.FRONTEND),
        ("backend", None),
        ("backend-old/app.py", None),
        ("frontendx/app.ts", None),
        ("docker-compose.yml", None),
    ],
)
def test_side_of_uses_the_source_dirs(shop, path, side):
    """Rule: a path's side comes from the source's backend/frontend dirs, matched on whole path segments."""
    assert shop.side_of(path) == side


def test_side_of_without_a_frontend(tmp_path):
    """Rule: a backend-only source puts no path on the frontend side."""
    text = SHOP.replace(SHOP[SHOP.index("[frontend]") : SHOP.index("[test_files]")], "")
    record = load_source_file(write(tmp_path, text))
    assert record.frontend is None
    assert record.side_of("frontend/src/App.tsx") is None
    assert record.stack_domain(["backend/app/x.py", "frontend/src/App.tsx"]) == StackDomain.BACKEND_ONLY


@pytest.mark.parametrize(
    ("changed", "domain"),
    [
        (["backend/app/a.py", "backend/tests/test_a.py"], StackDomain.BACKEND_ONLY),
        (["frontend/src/a.tsx", "README.md"], StackDomain.FRONTEND_ONLY),
        (["backend/app/a.py", "frontend/src/a.tsx"], StackDomain.FULLSTACK),
        (["README.md", ".github/workflows/ci.yml"], None),
        ([], None),
    ],
)
def test_stack_domain_from_changed_paths(shop, changed, domain):
    """Rule: backend_only / frontend_only / fullstack from changed paths; files outside both dirs don't count."""
    assert shop.stack_domain(changed) == domain


# --------------------------------------------------------------------------- globs


@pytest.mark.parametrize(
    ("path", "pattern", "matches"),
    [
        ("conftest.py", "**/conftest.py", True),  # `**/` matches zero directories
        ("a/conftest.py", "**/conftest.py", True),
        ("a/b/c/conftest.py", "**/conftest.py", True),
        ("a/xconftest.py", "**/conftest.py", False),
        ("a/b.py", "a/**/b.py", True),  # zero dirs in the middle
        ("a/x/y/b.py", "a/**/b.py", True),
        ("a/x/yb.py", "a/**/b.py", False),
        ("backend/tests/a/b/test_x.py", "backend/tests/**", True),
        ("backend/tests", "backend/tests/**", False),
        ("x.py", "*.py", True),
        ("a/x.py", "*.py", False),  # `*` does not cross `/`
        ("backend/x.py", "backend/*.py", True),
        ("backend/a/x.py", "backend/*.py", False),
        ("a/b.spec.ts", "**/*.spec.ts", True),
        ("a/bspec.ts", "**/*.spec.ts", False),  # `.` is literal
        ("a1.py", "a?.py", True),
        ("a/.py", "a?.py", False),  # `?` does not cross `/` either
        ("a+b(1).py", "a+b(1).py", True),  # regex metacharacters are literal
        ("aab1.py", "a+b(1).py", False),
        ("x.py.bak", "*.py", False),  # anchored at the end
    ],
)
def test_glob_semantics(path, pattern, matches):
    """Rule: `**/` matches zero or more directories, `*` and `?` never cross `/`, the rest is literal."""
    assert globs.match(path, pattern) is matches


def test_match_any():
    """Rule: a path is a test file when any pattern matches; no patterns match nothing."""
    assert globs.match_any("a/conftest.py", ["*.md", "**/conftest.py"])
    assert not globs.match_any("a/conftest.py", [])


@pytest.mark.parametrize("override", [None, "fastapi-template"], ids=["by-repo", "explicit-source"])
@pytest.mark.parametrize(
    ("created_at", "era", "lock"),
    [
        ("2024-07-31T10:00:00Z", "poetry", "backend/poetry.lock"),
        ("2024-12-02T10:00:00Z", "uv-backend", "backend/uv.lock"),
        ("2026-01-22T10:00:00Z", "uv-workspace", "uv.lock"),
    ],
)
def test_an_instance_gets_the_era_of_its_merge_date_with_or_without_an_explicit_source(
    override, created_at, era, lock
):
    """Rule: `--source NAME` names the record, not the era: an older-era instance run under it gets its era's
    lock files as it does when the record is found by repository (before, the explicit record was taken as
    it stands, the current era's, and every older instance ended image_build_failed)."""
    from tasks_lib.corpus import load as corpus

    instance = {"instance_id": "i", "repo": "fastapi/full-stack-fastapi-template", "created_at": created_at}
    record = corpus.source_for(instance, override)
    assert record.era == era
    assert lock in record.backend.lock_files
