"""Bad records end in a typed error naming the file and the key, never a traceback (reliability campaign).

Property tests (hypothesis) over the records read from disk: source records (`load_source_file`),
season definitions (`load_season`) and task instances (`validate_instance` and its JSON Schema).
Each input is either random bytes or TOML-ish text, or a valid record with one key deleted or given
a value of the wrong type. Diffs and predictions: test_bad_inputs.py. Derandomized; no Docker.
"""

from __future__ import annotations

import copy
import json
import math
import shutil
import textwrap
import tomllib
from datetime import date, datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tasks_lib.core import paths
from tasks_lib.core.errors import InputError, SourceError
from tasks_lib.corpus import load as corpus
from tasks_lib.corpus.schema import load_schema, validate_instance
from tasks_lib.curation import season
from tasks_lib.sources.record import SourceRecord, load_source, load_source_file, parse_source

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "instance-1396.jsonl"
INSTANCE = json.loads(FIXTURE.read_text())


def fast(examples: int) -> settings:
    """`examples` cases, no deadline, no example database in the tree, the same cases on every run."""
    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


# --------------------------------------------------------------------------- values, paths, TOML

TOML_SCALARS = st.one_of(
    st.text(st.characters(exclude_categories=("Cs",)), max_size=8),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(),
    st.booleans(),
    st.dates(),
    st.datetimes(),
)
TOML_VALUES = st.recursive(
    TOML_SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=5,
)


def toml_value(value) -> str:
    """One value as inline TOML (strings as JSON strings, which TOML reads the same, DEL escaped)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return "{" + ", ".join(f"{toml_value(str(k))} = {toml_value(v)}" for k, v in value.items()) + "}"


def to_toml(table: dict) -> str:
    return "".join(f"{toml_value(key)} = {toml_value(value)}\n" for key, value in table.items())


def kind(value) -> str:
    """The type a reader sees (bool before int, datetime before date: they are subclasses)."""
    for name, cls in (
        ("bool", bool),
        ("datetime", datetime),
        ("date", date),
        ("int", int),
        ("float", float),
        ("str", str),
        ("list", list),
        ("table", dict),
        ("null", type(None)),
    ):
        if isinstance(value, cls):
            return name
    raise AssertionError(f"no kind for {value!r}")


def key_paths(value, prefix: tuple = ()) -> list[tuple]:
    """Every table key and list index under `value`, as paths."""
    if isinstance(value, dict):
        items = list(value.items())
    elif isinstance(value, list):
        items = list(enumerate(value))
    else:
        return []
    out = []
    for key, child in items:
        out.append((*prefix, key))
        out += key_paths(child, (*prefix, key))
    return out


def dotted(path: tuple) -> str:
    """A path the way the loaders name fields: `backend.services[0].env.DATABASE_URL`."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


def related(field: str, key: str) -> bool:
    """The error names the key, a table or list holding it, or a key inside it."""
    return any(
        a == b or a.startswith(b + ".") or a.startswith(b + "[") for a, b in ((field, key), (key, field))
    )


def get(record, path: tuple):
    for part in path:
        record = record[part]
    return record


def replaced(record: dict, path: tuple, value) -> dict:
    out = copy.deepcopy(record)
    get(out, path[:-1])[path[-1]] = value
    return out


def deleted(record: dict, path: tuple) -> dict:
    out = copy.deepcopy(record)
    del get(out, path[:-1])[path[-1]]
    return out


def wrong_values(original, *, also_right: tuple[str, ...] = ()):
    """Values a reader must refuse where `original` stood: another type (ints stand in for floats)."""
    right = {kind(original), *also_right}
    if kind(original) == "float":
        right.add("int")
    return TOML_VALUES.filter(lambda v: kind(v) not in right)


# --------------------------------------------------------------------------- source records

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
    manifest_files = ["backend/pyproject.toml"]
    test_command = "python -m pytest"
    prestart = ["python -m app.prestart"]
    timeout_s = 300
    env = { PROJECT_NAME = "shop" }

    [[backend.services]]
    kind = "postgres"
    db = "app"
    [backend.services.env]
    POSTGRES_SERVER = "{host}"
    DATABASE_URL = "postgresql://{user}:{password}@{host}:{port}/{db}"

    [frontend]
    dir = "frontend"
    node_version = "20"
    package_manager = "bun"
    lock_files = ["frontend/bun.lock"]
    serve_command = "bun run dev"
    serve_port = 5173

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

    [[eras]]
    name = "uv"
    since = "2024-06-01"
    """
)
SHOP_RECORD = tomllib.loads(SHOP)
SHOP_PATHS = key_paths(SHOP_RECORD)
DATE_KEYS = ("since", "until")


def write_source(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "shop.toml"
    path.write_bytes(data)
    return path


def test_the_toml_writer_round_trips_the_base_record(tmp_path):
    """Rule (of this file): the mutations below start from a record that loads, written back faithfully."""
    assert tomllib.loads(to_toml(SHOP_RECORD)) == SHOP_RECORD
    record = load_source_file(write_source(tmp_path, to_toml(SHOP_RECORD).encode()))
    assert isinstance(record, SourceRecord) and [e.name for e in record.eras] == ["pip", "uv"]


TOML_FRAGMENTS = [
    'name = "shop"\n',
    'repo = "acme/shop"\n',
    "[clone]\n",
    'url = "x"\n',
    "[backend]\n",
    "[[backend.services]]\n",
    "[[eras]]\n",
    "[test_files]\n",
    "patterns = [",
    "]",
    "{",
    "}",
    " = ",
    ", ",
    '"',
    "'''",
    "1979-05-27",
    "3.5",
    "true",
    "\n",
    "\r\n",
    "# c\n",
    "\\",
]
TOMLISH = st.lists(st.one_of(st.sampled_from(TOML_FRAGMENTS), st.text(max_size=5)), max_size=30).map("".join)
SOURCE_FILES = st.one_of(
    st.binary(max_size=300),
    TOMLISH.map(lambda t: t.encode("utf-8", "surrogatepass")),
    st.integers(0, len(SHOP)).map(lambda n: SHOP[:n].encode()),
    st.integers(0, len(SHOP)).map(lambda n: SHOP.encode()[:n] + b"\xff" + SHOP.encode()[n:]),
    st.just(SHOP.replace("\n", "\r\n").encode()),
)


@fast(120)
@given(data=SOURCE_FILES)
@example(data=b"\xff\xfename = 'shop'\n")
@example(data=b"a = " + b"[" * 5000)
@example(data=b"a = " + b"{b = " * 5000)
def test_any_source_file_loads_or_fails_naming_the_file(tmp_path, data):
    """Rule: whatever a source file holds (random bytes, TOML-ish text, a truncated record, a byte that
    is not UTF-8, CRLF), it loads as a record or fails with SourceError (exit 2) naming the file and a
    field; nothing else."""
    path = write_source(tmp_path, data)
    try:
        record = load_source_file(path)
    except SourceError as exc:
        assert exc.path == str(path) and str(path) in str(exc) and exc.field, exc
        return
    assert record.name == "shop" and record.repo


@fast(120)
@given(where=st.sampled_from(SHOP_PATHS), data=st.data())
def test_a_source_field_of_the_wrong_type_is_named(tmp_path, where, data):
    """Rule: a field of a source record given a value of the wrong type (a number for a path, a table
    for a list, a string for a table, ...) fails with SourceError naming the file and that field."""
    original = get(SHOP_RECORD, where)
    also_right = ("date", "datetime") if where[-1] in DATE_KEYS else ()
    value = data.draw(wrong_values(original, also_right=also_right), label="value")
    path = write_source(tmp_path, to_toml(replaced(SHOP_RECORD, where, value)).encode())
    with pytest.raises(SourceError) as info:
        load_source_file(path)
    assert info.value.path == str(path) and related(info.value.field, dotted(where)), info.value


@fast(60)
@given(where=st.sampled_from(SHOP_PATHS))
def test_a_missing_source_field_is_named_or_has_a_default(tmp_path, where):
    """Rule: without one of its keys a source record loads (the key has a default) or fails naming it."""
    path = write_source(tmp_path, to_toml(deleted(SHOP_RECORD, where)).encode())
    try:
        load_source_file(path)
    except SourceError as exc:
        assert exc.path == str(path) and related(exc.field, dotted(where)), exc


def test_a_folder_or_a_missing_file_is_a_source_error(tmp_path):
    """Rule: `--source PATH` naming a folder or nothing fails with SourceError naming it."""
    folder = tmp_path / "dir.toml"
    folder.mkdir()
    for target in (folder, tmp_path / "missing.toml"):
        with pytest.raises(SourceError) as info:
            load_source(str(target))
        assert info.value.path == str(target) and info.value.field == "<file>"


@pytest.mark.parametrize(
    "broken", [b"\xff\xfe", b"a = " + b"[" * 5000, b"repo = "], ids=["bytes", "deep", "toml"]
)
def test_a_broken_record_of_another_repository_never_stops_this_one(tmp_path, monkeypatch, broken):
    """Rule: finding an instance's source record skips the records that cannot be read at all."""
    sources = tmp_path / "data" / "sources"
    sources.mkdir(parents=True)
    shutil.copy(paths.PROJECT_ROOT / "data" / "sources" / "fastapi-template.toml", sources)
    (sources / "aaa-broken.toml").write_bytes(broken)
    monkeypatch.setenv("PBENCH_DATA_DIR", str(tmp_path / "data"))
    assert corpus.source_for(INSTANCE).name == "fastapi-template"


# --------------------------------------------------------------------------- seasons

SEASON = textwrap.dedent(
    """\
    name = "s"
    sources = ["demo"]
    target_models = ["demo-model-2025-06", "demo-model-2025-01"]
    internal_only = ["prototypebench__demo-fullstack-3"]

    [window]
    since = "2025-01-01"
    until = "2025-12-31"

    [distribution]
    target = { backend_only = 0.5, fullstack = 0.5 }
    tolerance = 0.2
    fail_on_mismatch = false

    [extraction]
    head_runs = 3
    base_runs = 2
    max_concurrency = 2
    """
)
SEASON_RECORD = tomllib.loads(SEASON)
SEASON_PATHS = key_paths(SEASON_RECORD)


@pytest.fixture
def season_file(tmp_path, monkeypatch) -> Path:
    """Where `load_season("s")` reads, under a private PBENCH_DATA_DIR."""
    root = tmp_path / "data"
    (root / "season_defs").mkdir(parents=True)
    monkeypatch.setenv("PBENCH_DATA_DIR", str(root))
    return root / "season_defs" / "s.toml"


def names_key(message: str, key: str) -> bool:
    """A season error names the key (or the table or list holding it) as `'key'` or `key:`."""
    parts = key.replace("[", ".[").split(".")
    holders = [".".join(parts[:n]).replace(".[", "[") for n in range(len(parts), 0, -1)]
    return any(f"'{k}'" in message or f"{k}:" in message for k in holders)


def test_the_base_season_loads(season_file):
    """Rule (of this file): the mutations below start from a season that loads."""
    season_file.write_text(to_toml(SEASON_RECORD))
    s = season.load_season("s")
    assert s.target_mix == {"backend_only": 0.5, "fullstack": 0.5} and s.fail_on_mismatch is False


@fast(100)
@given(data=SOURCE_FILES | st.just(SEASON.encode()[:-30]))
@example(data=b"\xff[window]\n")
@example(data=b"a = " + b"[" * 5000)
def test_any_season_file_loads_or_fails_naming_the_file(season_file, data):
    """Rule: whatever a season file holds, `load_season` returns a Season or raises InputError (exit 2)
    naming the file; nothing else."""
    season_file.write_bytes(data)
    try:
        season.load_season("s")
    except InputError as exc:
        assert str(season_file) in str(exc), exc


@fast(100)
@given(where=st.sampled_from(SEASON_PATHS), data=st.data())
def test_a_season_field_of_the_wrong_type_is_named(season_file, where, data):
    """Rule: a season field of the wrong type (a table as a string, a share as text, `fail_on_mismatch =
    "no"`, ...) fails with InputError naming the file and the field, never loads as something else."""
    original = get(SEASON_RECORD, where)
    also_right = ("date", "datetime") if where[-1] in DATE_KEYS else ()
    value = data.draw(wrong_values(original, also_right=also_right), label="value")
    season_file.write_text(to_toml(replaced(SEASON_RECORD, where, value)))
    with pytest.raises(InputError) as info:
        season.load_season("s")
    message = str(info.value)
    assert str(season_file) in message and names_key(message, dotted(where)), message


@fast(40)
@given(where=st.sampled_from(SEASON_PATHS))
def test_a_missing_season_field_is_named_or_has_a_default(season_file, where):
    """Rule: without one of its keys a season loads (the key has a default) or fails naming it."""
    season_file.write_text(to_toml(deleted(SEASON_RECORD, where)))
    try:
        season.load_season("s")
    except InputError as exc:
        assert str(season_file) in str(exc) and names_key(str(exc), dotted(where)), exc


# --------------------------------------------------------------------------- instances

INSTANCE_PATHS = key_paths(INSTANCE)
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(st.characters(exclude_categories=()), max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)
PATCHISH = st.one_of(
    st.text(st.characters(exclude_categories=())),
    st.binary().map(lambda b: b.decode("utf-8", errors="surrogateescape")),
    st.lists(
        st.sampled_from(
            ["diff --git a/x b/x\n", "--- a/x\n", "+++ b/x\n", "@@ -1 +1 @@\n", "-a\n", "+b\n", "\udcff"]
        ),
        max_size=12,
    ).map("".join),
)


def json_path(path: tuple) -> str:
    """A path the way `validate_instance` names it: `$.environment.python_version`, `$.pr_labels[0]`."""
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)


def shop_source() -> SourceRecord:
    return parse_source(
        tomllib.loads(SHOP.replace("acme/shop", "fastapi/full-stack-fastapi-template")), Path("t.toml")
    )


def assert_errors(errors) -> None:
    """The validator's contract: a list of messages, each starting with the JSON path it is about."""
    assert isinstance(errors, list) and all(isinstance(e, str) and e.startswith("$") for e in errors), errors


def test_the_published_instance_is_valid():
    """Rule (of this file): the mutations below start from an instance that validates clean."""
    assert validate_instance(INSTANCE) == []


@fast(80)
@given(value=JSON_VALUES | st.dictionaries(st.sampled_from(sorted(INSTANCE)), JSON_VALUES | PATCHISH))
def test_any_json_value_gets_errors_never_an_exception(value):
    """Rule: `validate_instance` never raises: any JSON value (or an object with instance keys holding
    anything) gets a list of errors naming their JSON path; a non-object is named at `$`."""
    for source in (None, shop_source()):
        errors = validate_instance(value, source)
        assert_errors(errors)
        assert errors or isinstance(value, dict)


@fast(150)
@given(where=st.sampled_from(INSTANCE_PATHS), data=st.data())
def test_an_instance_field_of_the_wrong_type_is_named_by_its_path(where, data):
    """Rule: an instance with one field of the wrong type (a number for a commit, a string for a list,
    ...) is invalid, and an error names that field's JSON path (or the object or list holding it)."""
    original = get(INSTANCE, where)
    wrong = JSON_VALUES.filter(
        lambda v: (
            kind(v) != kind(original)
            and not (kind(original) == "int" and isinstance(v, float) and v.is_integer())
        )
    )
    value = data.draw(wrong, label="value")
    errors = validate_instance(replaced(INSTANCE, where, value))
    assert_errors(errors)
    target = json_path(where)
    assert any(related(e.split(":", 1)[0], target) for e in errors), errors


@fast(60)
@given(
    key=st.sampled_from(["patch", "test_patch", "test_patch_backend", "test_patch_frontend"]), text=PATCHISH
)
def test_an_instance_with_any_patch_text_gets_errors_never_an_exception(key, text):
    """Rule: whatever text an instance's patch fields hold (garbage, undecodable bytes, lone surrogates),
    validation returns errors naming their path, with or without a source record."""
    for source in (None, shop_source()):
        assert_errors(validate_instance(replaced(INSTANCE, (key,), text), source))


@fast(40)
@given(
    where=st.sampled_from([(k,) for k in INSTANCE] + [("environment", k) for k in INSTANCE["environment"]])
)
def test_a_missing_required_field_is_named(where):
    """Rule: an instance without a required field is invalid and the error names the field."""
    errors = validate_instance(deleted(INSTANCE, where))
    assert_errors(errors)
    schema = load_schema()
    required = schema["required"] if len(where) == 1 else schema["properties"]["environment"]["required"]
    if where[-1] in required:
        assert any(f"'{where[-1]}' is a required property" in e for e in errors), errors
