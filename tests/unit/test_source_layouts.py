"""Source records that describe a repository without engine edits: a project at the repository root, no
service, installer extras and groups, system packages, a test scope; snapshots of a mirror missing blobs."""

from __future__ import annotations

import io
import re
import subprocess
import tarfile
import textwrap
from pathlib import Path

import pytest

from tasks_lib.core.constants import Side, StackDomain
from tasks_lib.core.errors import ImageBuildError, SourceError
from tasks_lib.formats import patches
from tasks_lib.images import envspecs
from tasks_lib.sources import gitops, test_scope
from tasks_lib.sources.record import load_source_file

ROOT = textwrap.dedent(
    """\
    name = "gateway"
    repo = "acme/gateway"

    [clone]
    url = "https://example.org/acme/gateway.git"

    [backend]
    dir = "."
    python_version = "3.11"
    installer = "uv"
    lock_files = ["uv.lock"]
    manifest_files = ["pyproject.toml"]
    test_command = "python -m pytest --ignore=tests/fuzz"
    extras = ["plugins"]
    groups = ["dev"]
    system_packages = ["jq"]

    [backend.test_scope]
    kind = "touched"
    related_cap = 2

    [frontend]
    dir = "gateway/static"
    node_version = "20"
    package_manager = "npm"
    lock_files = ["package-lock.json"]
    serve_command = "npx vite"

    [test_files]
    patterns = ["tests/**", "**/conftest.py"]
    """
)


def load(tmp_path: Path, text: str = ROOT):
    path = tmp_path / "gateway.toml"
    path.write_text(text)
    return load_source_file(path)


def test_a_project_at_the_repository_root_holds_every_path_outside_the_frontend(tmp_path):
    """Rule: dir "." is the repository root; a path's side is the deepest source dir that holds it."""
    source = load(tmp_path)
    assert source.backend.dir == "" and source.backend.prefix == ""
    assert source.side_of("gateway/services/tools.py") == Side.BACKEND
    assert source.side_of("tests/unit/test_tools.py") == Side.BACKEND
    assert source.side_of("gateway/static/admin.js") == Side.FRONTEND
    assert source.stack_domain(["gateway/main.py", "tests/test_main.py"]) == StackDomain.BACKEND_ONLY
    assert source.stack_domain(["gateway/main.py", "gateway/static/a.js"]) == StackDomain.FULLSTACK


@pytest.mark.parametrize("spelling", [".", "./", "././"])
def test_every_spelling_of_the_root_is_the_root(tmp_path, spelling):
    source = load(tmp_path, ROOT.replace('dir = "."', f'dir = "{spelling}"', 1))
    assert source.backend.dir == ""


def test_no_service_and_no_frontend_are_plain_records(tmp_path):
    text = ROOT[: ROOT.index("[frontend]")] + ROOT[ROOT.index("[test_files]") :]
    source = load(tmp_path, text)
    assert source.backend.services == () and source.frontend is None


def test_uv_installs_the_named_extras_and_groups(tmp_path):
    source = load(tmp_path)
    command = envspecs.install_command(source.backend)
    assert "--extra plugins" in command and "--group dev" in command
    assert "--all-extras" not in command


def test_without_extras_uv_installs_every_extra(tmp_path):
    text = ROOT.replace('extras = ["plugins"]\n', "").replace('groups = ["dev"]\n', "")
    command = envspecs.install_command(load(tmp_path, text).backend)
    assert "--all-extras" in command and "--group" not in command


def test_extras_with_pip_name_the_field(tmp_path):
    with pytest.raises(SourceError) as err:
        load(tmp_path, ROOT.replace('installer = "uv"', 'installer = "pip"'))
    assert err.value.field == "backend.extras" and "uv" in err.value.message


@pytest.mark.parametrize("name", ["jq; rm -rf /", "JQ", "-y"])
def test_a_system_package_must_be_a_debian_name(tmp_path, name):
    with pytest.raises(SourceError) as err:
        load(tmp_path, ROOT.replace('["jq"]', f'["{name}"]'))
    assert err.value.field == "backend.system_packages"


def test_system_packages_are_part_of_the_image_and_its_key(tmp_path):
    source = load(tmp_path)
    contents = {"uv.lock": b"version = 1\n", "pyproject.toml": b"[project]\n"}
    spec = envspecs.backend_env_spec(source, contents)
    assert spec.context()["system-packages.txt"] == b"jq\n"
    without = load(tmp_path, ROOT.replace('system_packages = ["jq"]\n', ""))
    other = envspecs.backend_env_spec(without, contents)
    assert "system-packages.txt" not in other.context()
    assert spec.key("base") != other.key("base")


def test_scope_kind_is_checked(tmp_path):
    with pytest.raises(SourceError) as err:
        load(tmp_path, ROOT.replace('kind = "touched"', 'kind = "some"'))
    assert err.value.field == "backend.test_scope.kind"


# --------------------------------------------------------------------------- test scope


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def gateway_repo(tmp_path) -> tuple[Path, str]:
    work = tmp_path / "work"
    files = {
        "gateway/__init__.py": "",
        "gateway/services/__init__.py": "",
        "gateway/services/tools.py": "def tool():\n    return 1\n",
        "gateway/services/other.py": "X = 1\n",
        "tests/test_tools.py": "from gateway.services.tools import tool\n",
        "tests/test_many.py": "import gateway.services.tools\nfrom gateway.services import other\n",
        "tests/test_parent.py": "from gateway.services import (other,\n  tools)\n",
        "tests/test_unrelated.py": "from gateway.services.toolset import x\n",
        "tests/helpers.py": "from gateway.services.tools import tool\n",
        "tests/fuzz/test_fuzz_tools.py": "import gateway.services.tools\n",
    }
    for rel, text in files.items():
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_text(text)
    _git(work.parent, "init", "-q", str(work))
    _git(work, "add", "-A")
    _git(work, "-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qm", "base")
    return work / ".git", _git(work, "rev-parse", "HEAD").strip()


def _diff(path: str, old: str | None, new: str) -> str:
    return patches.files_to_diff({path: new}, lambda p: old)


def test_touched_scope_is_the_test_patch_widened_by_importers_of_changed_modules(tmp_path, gateway_repo):
    """Rule: the test files the test patch touches, then the test files importing a changed module, a file
    named after the module first; helpers and near-miss names are no test files of the scope."""
    source = load(tmp_path)
    repo, base = gateway_repo
    code = _diff("gateway/services/tools.py", "def tool():\n    return 1\n", "def tool():\n    return 2\n")
    tests = _diff("tests/test_new.py", None, "def test_x():\n    pass\n")
    split = patches.split_patch(code + tests, source)
    files = test_scope.scope_files(source, repo, base, split)
    # related_cap = 2: test_tools.py (named after the module) and test_many.py (imports it), not test_parent.py
    # (multi-line import), never test_unrelated.py (toolset), helpers.py (not a test module) or
    # tests/fuzz (the test command's --ignore).
    assert files == ("tests/test_many.py", "tests/test_new.py", "tests/test_tools.py")


def test_suite_scope_selects_nothing(tmp_path, gateway_repo):
    source = load(tmp_path, ROOT.replace('kind = "touched"', 'kind = "suite"'))
    repo, base = gateway_repo
    split = patches.split_patch(_diff("tests/test_new.py", None, "x = 1\n"), source)
    assert test_scope.scope_files(source, repo, base, split) == ()


def test_import_pattern_matches_the_forms_of_an_import():
    import re

    pattern = test_scope._import_pattern("gateway.services.tools").replace("[:space:]", r"\s")
    for line in (
        "import gateway.services.tools",
        "from gateway.services.tools import tool",
        "  from gateway.services import tools",
        "from gateway.services import other, tools",
        "import gateway.services.tools as t",
    ):
        assert re.search(pattern, line), line
    for line in ("from gateway.services.toolset import x", "from gateway.services import toolsets"):
        assert not re.search(pattern, line), line


# --------------------------------------------------------------------------- snapshots with absent blobs


def test_a_snapshot_survives_absent_blobs_and_names_them(gateway_repo):
    repo, base = gateway_repo
    sha = _git(repo.parent, "rev-parse", f"{base}:gateway/services/other.py").strip()
    (repo / "objects" / sha[:2] / sha[2:]).unlink()
    plain = subprocess.run(["git", "--git-dir", str(repo), "archive", base], capture_output=True)
    assert plain.returncode != 0  # what `git archive` alone does with such a mirror
    tar, stubbed = gitops.snapshot(repo, base)
    assert stubbed == ["gateway/services/other.py"]
    with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
        assert archive.getmember("gateway/services/other.py").size == 0
        data = archive.extractfile("gateway/services/tools.py").read()
    assert data == b"def tool():\n    return 1\n"


def test_a_complete_snapshot_stubs_nothing(gateway_repo):
    repo, base = gateway_repo
    tar, stubbed = gitops.snapshot(repo, base)
    with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
        assert stubbed == [] and len(archive.getnames()) > 5


def test_the_record_python_must_be_one_the_lock_accepts(tmp_path):
    source = load(tmp_path)
    lock = b'version = 1\nrevision = 3\nrequires-python = ">=3.12, <3.14"\n'
    with pytest.raises(ImageBuildError) as err:
        envspecs.backend_env_spec(source, {"uv.lock": lock, "pyproject.toml": b""})
    assert ">=3.12, <3.14" in str(err.value) and "'3.11'" in str(err.value)
    ok = lock.replace(b">=3.12", b">=3.11")
    assert envspecs.backend_env_spec(source, {"uv.lock": ok, "pyproject.toml": b""}).side == "backend"


def test_extras_and_groups_a_commit_does_not_define_are_left_out(tmp_path):
    """Rule: the record names what it wants; at a commit whose pyproject.toml lacks one (added or renamed over
    time, `dev` an extra before it became a group), uv is not asked for it."""
    source = load(tmp_path, ROOT.replace('extras = ["plugins"]', 'extras = ["plugins", "dev"]'))
    old = b'[project]\nname = "g"\n[project.optional-dependencies]\ndev = ["pytest"]\n'
    command = envspecs.install_command(source.backend, {"pyproject.toml": old})
    assert "--extra dev" in command and "--extra plugins" not in command and "--group" not in command
    new = b'[project]\nname = "g"\n[project.optional-dependencies]\nplugins = ["x"]\n[dependency-groups]\ndev = ["pytest"]\n'
    command = envspecs.install_command(source.backend, {"pyproject.toml": new})
    assert "--extra plugins" in command and "--extra dev" not in command and "--group dev" in command
    assert "--extra plugins" in envspecs.install_command(source.backend)  # nothing to read: as written


LOCK_WITH_GIT = b"""version = 1
requires-python = ">=3.11"

[[package]]
name = "httpx"
version = "0.27.0"
source = { registry = "https://pypi.org/simple" }

[[package]]
name = "detect-secrets"
version = "0.13.1+ibm"
source = { git = "https://github.com/ibm/detect-secrets.git?rev=0766#0766" }

[[package]]
name = "tarball"
version = "1.0"
source = { url = "https://github.com/acme/tarball/archive/v1.0.tar.gz" }

[[package]]
name = "wheel-on-index"
version = "1.0"
source = { url = "https://files.pythonhosted.org/packages/w-1.0-py3-none-any.whl" }
"""


def test_packages_off_the_package_index_are_left_out_and_said(tmp_path):
    """Rule: the build reaches the package indexes only; a lock's git and off-index URL packages are not
    installed (every build of such a lock failed before), the install says which, and a lock without any
    keeps the command it had (same image keys)."""
    source = load(tmp_path)
    assert envspecs.unfetchable({"uv.lock": LOCK_WITH_GIT}) == ["detect-secrets", "tarball"]
    command = envspecs.install_command(source.backend, {"uv.lock": LOCK_WITH_GIT})
    assert "--no-install-package detect-secrets --no-install-package tarball" in command
    assert command.startswith("echo 'pbench: left out, not on the package index: detect-secrets tarball' && ")
    plain = LOCK_WITH_GIT.split(b'[[package]]\nname = "detect-secrets"')[0]
    assert envspecs.install_command(source.backend, {"uv.lock": plain}) == envspecs.install_command(
        source.backend
    )


LOCK_WORKSPACE = (
    LOCK_WITH_GIT.split(b'[[package]]\nname = "detect-secrets"')[0]
    + b"""
[[package]]
name = "gateway"
version = "1.7.2"
source = { editable = "." }

[[package]]
name = "gateway-core"
version = "0.3.0"
source = { virtual = "src/core" }

[[package]]
name = "torch"
version = "2.9.1"
source = { registry = "https://pypi.org/simple" }

[[package]]
name = "nvidia-cublas-cu12"
version = "12.8.4.1"
source = { registry = "https://pypi.org/simple" }
"""
)
LEAVE_OUT = '[backend.leave_out]\npackages = ["torch", "nvidia-*", "absent"]\nreason = "CUDA wheels no test imports"\n'


def test_packages_the_record_leaves_out_are_named_said_and_keyed(tmp_path):
    """Rule (`[backend.leave_out]`): the lock's packages matching a name or a glob are not installed
    (`--no-install-package`, each named), the build log's first line says which and why, and the image key
    follows; a name the lock does not hold changes nothing."""
    source = load(tmp_path, ROOT.replace("[backend.test_scope]", LEAVE_OUT + "[backend.test_scope]", 1))
    assert source.backend.leave_out.reason == "CUDA wheels no test imports"
    command = envspecs.install_command(source.backend, {"uv.lock": LOCK_WORKSPACE})
    assert command.startswith(
        "echo 'pbench: left out, by the source record (CUDA wheels no test imports): nvidia-cublas-cu12 torch' && "
    )
    assert "--no-install-package nvidia-cublas-cu12 --no-install-package torch" in command
    assert "absent" not in command and "httpx" not in command
    contents = {"uv.lock": LOCK_WORKSPACE, "pyproject.toml": b"[project]\n"}
    plain = envspecs.backend_env_spec(load(tmp_path), contents)
    assert envspecs.backend_env_spec(source, contents).key("base") != plain.key("base")


@pytest.mark.parametrize(
    "table, problem",
    [('packages = ["torch; rm"]\nreason = "x"', "is not a package name"),
     ('packages = ["torch"]', "is missing"),
     ('packages = []\nreason = "x"', "must not be empty")],
)  # fmt: skip
def test_a_leave_out_table_is_checked(tmp_path, table, problem):
    text = ROOT.replace("[backend.test_scope]", f"[backend.leave_out]\n{table}\n[backend.test_scope]", 1)
    with pytest.raises(SourceError) as err:
        load(tmp_path, text)
    assert err.value.field.startswith("backend.leave_out") and problem in err.value.message


def test_workspace_members_get_metadata_without_code(tmp_path):
    """Rule (`workspace_metadata = true`): after the install, each workspace member the lock names (editable or
    virtual source) gets a dist-info with its name and version, so that importlib.metadata.version() answers
    for a project whose code comes from the checkout; real shell, run here against a real venv."""
    import subprocess
    import venv

    source = load(
        tmp_path,
        ROOT.replace(
            'system_packages = ["jq"]\n', 'system_packages = ["jq"]\nworkspace_metadata = true\n', 1
        ),
    )
    assert envspecs.workspace_members({"uv.lock": LOCK_WORKSPACE}) == [
        ("gateway", "1.7.2"),
        ("gateway-core", "0.3.0"),
    ]
    command = envspecs.install_command(source.backend, {"uv.lock": LOCK_WORKSPACE})
    steps = command.split(" --no-install-workspace", 1)[1].split(" && ", 1)[1]
    venv.create(tmp_path / "venv")
    subprocess.run(["sh", "-eu", "-c", steps.replace("/opt/venv/", f"{tmp_path}/venv/")], check=True)
    versions = subprocess.run(
        [tmp_path / "venv/bin/python", "-c", "import importlib.metadata as m; "
         "print(m.version('gateway'), m.version('gateway_core'), len(list(m.files('gateway'))))"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert versions == ["1.7.2", "0.3.0", "3"]
    assert envspecs.workspace_metadata_command(load(tmp_path).backend, {"uv.lock": LOCK_WORKSPACE}) == ""


FRONT_SCOPE = ROOT.replace(
    'serve_command = "npx vite"\n',
    'serve_command = "npx vite"\n[frontend.test_scope]\nkind = "touched"\nrelated_cap = 1\n',
).replace(
    'patterns = ["tests/**", "**/conftest.py"]', 'patterns = ["tests/**", "**/conftest.py", "**/*.spec.ts"]'
)


@pytest.fixture
def ui_repo(tmp_path) -> tuple[Path, str]:
    work = tmp_path / "ui"
    files = {
        "gateway/static/src/Run.tsx": '<button data-testid="run-flow">Run</button>\n',
        "gateway/static/tests/run.spec.ts": 'await page.getByTestId("run-flow").click();\n'
        'await page.getByTestId("stop-flow").click();\n',
        "gateway/static/tests/stop.spec.ts": 'await page.getByTestId("stop-flow").click();\n',
        "gateway/static/tests/other.spec.ts": 'await page.getByTestId("settings").click();\n',
        "gateway/static/tests/helpers.ts": 'export const id = "run-flow";\n',
    }
    for rel, text in files.items():
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_text(text)
    _git(work.parent, "init", "-q", str(work))
    _git(work, "add", "-A")
    _git(work, "-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qm", "base")
    return work / ".git", _git(work, "rev-parse", "HEAD").strip()


def test_a_touched_playwright_scope_is_the_specs_touched_widened_by_specs_using_a_changed_test_id(
    tmp_path, ui_repo
):
    """Rule (`[frontend.test_scope] kind = "touched"`): the specs the test patch adds or changes, then at most
    `related_cap` specs of the base commit that use a test id the PR's frontend code adds, removes or changes
    (the most such ids first); a helper is no spec. `suite` (the default) runs every spec; a touched scope with
    no spec to run is NothingToRun. A spec's path is a Playwright selection of its own."""
    from tasks_lib.formats import playwright_report

    source = load(tmp_path, FRONT_SCOPE)
    repo, base = ui_repo
    code = _diff(
        "gateway/static/src/Run.tsx",
        '<button data-testid="run-flow">Run</button>\n',
        '<button data-testid="run-flow">Run</button>\n<button data-testid="stop-flow">Stop</button>\n',
    )
    spec = _diff("gateway/static/tests/new.spec.ts", None, "test('x', async () => {});\n")
    split = patches.split_patch(code + spec, source)
    assert test_scope.changed_test_ids(split.patch, source.frontend.prefix) == ["stop-flow"]
    # stop.spec.ts and run.spec.ts both use stop-flow; related_cap = 1 keeps the first by path
    assert test_scope.frontend_scope_files(source, repo, base, split) == (
        "tests/new.spec.ts",
        "tests/run.spec.ts",
    )
    assert test_scope.frontend_scope_files(load(tmp_path), repo, base, split) == ()
    helper_only = patches.split_patch(
        _diff("gateway/static/tests/helpers.ts", None, "export const a = 1;\n"), source
    )
    with pytest.raises(test_scope.NothingToRun):
        test_scope.frontend_scope_files(source, repo, base, helper_only)
    assert playwright_report.selection_args(["tests/run.spec.ts", "tests/a.spec.ts:4:2 › A › b"]) == [
        "tests/a.spec.ts:4",
        "tests/run.spec.ts",
    ]


@pytest.mark.parametrize(
    "old, new, field, near",
    [('test_command = "python', 'test_comand = "python', "backend.test_comand", "backend.test_command"),
     ('kind = "touched"', 'knd = "touched"', "backend.test_scope.knd", "backend.test_scope.kind"),
     ('repo = "acme/gateway"', 'repo = "acme/gateway"\nrepo_url = "x"', "repo_url", "repo"),
     ('node_version = "20"', 'node_version = "20"\nwibble = 1', "frontend.wibble", None)],
)  # fmt: skip
def test_a_misspelt_field_of_a_source_record_is_refused_by_name(tmp_path, old, new, field, near):
    """Rule: a key no field of the record reads is an error naming it (and the nearest known field), never a
    default applied in its place."""
    with pytest.raises(SourceError) as err:
        load(tmp_path, ROOT.replace(old, new, 1))
    assert err.value.field == field and "is not a known field" in err.value.message
    assert (
        (f"did you mean {near!r}" in err.value.message) if near else "did you mean" not in err.value.message
    )


def test_a_touched_scope_with_only_ignored_tests_runs_nothing(tmp_path, gateway_repo):
    """Rule: a test patch whose test files and helpers all lie under a path the suite ignores (here the test
    command's --ignore=tests/fuzz) leaves no test to extract: said, never the ignored folder run instead."""
    source = load(tmp_path)
    repo, base = gateway_repo
    code = _diff("gateway/data.json", "{}\n", '{"a": 1}\n')
    tests = _diff("tests/fuzz/test_fuzz_new.py", None, "def test_x():\n    pass\n") + _diff(
        "tests/fuzz/conftest.py", None, "X = 1\n"
    )
    split = patches.split_patch(code + tests, source)
    with pytest.raises(test_scope.NothingToRun, match="tests/fuzz"):
        test_scope.scope_files(source, repo, base, split)
    helper_only = patches.split_patch(code + _diff("tests/conftest.py", None, "X = 1\n"), source)
    assert test_scope.scope_files(source, repo, base, helper_only) == ("tests/",)


def test_extraction_order_breaks_priority_ties_by_number(tmp_path):
    from tasks_lib.curation import filtering
    from tasks_lib.curation import stages as curation
    from tasks_lib.curation.season import load_season

    assert load_season("mcp-context-forge").order == "newest"
    assert load_season("demo").order == "oldest"
    verdicts = [
        filtering.FilterVerdict(
            n, True, (), p, "backend_only", title=f"t{n}", merged_at=_pr(n).merged_at, changed_lines=10
        )
        for n, p in ((5, 0.5), (7, 0.75), (9, 0.75), (3, 0.75))
    ]
    out = tmp_path / "out"
    out.mkdir()
    filtering.write_filter_parquet(verdicts, out / "filter.parquet")
    prs = [_pr(n) for n in (3, 5, 7, 9)]
    curation.write_prs_parquet([*prs, _pr(11)], out / "prs.parquet")
    source = load(tmp_path)
    assert [p.number for p in curation.extraction_candidates(source, out)] == [3, 7, 9, 5]
    assert [p.number for p in curation.extraction_candidates(source, out, "newest")] == [9, 7, 3, 5]
    # extraction.prs: those PRs alone, in the listed order; the others named with why they are not extracted
    filtering.write_filter_parquet(
        [*verdicts, filtering.FilterVerdict(11, False, ("too_large",), 0.0, merged_at=_pr(11).merged_at)],
        out / "filter.parquet",
    )
    listed = (9, 11, 3, 42)
    assert [p.number for p in curation.extraction_candidates(source, out, "newest", listed)] == [9, 3]
    assert curation.listed_not_kept(source, out, listed) == {
        11: "filtered: too_large",
        42: "not in the crawl (outside the season's window or not in the export)",
    }
    # extraction.waive: a listed PR refused only for a waived reason is extracted (a published curation
    # reproduced had no size cap); an unlisted one never is
    waive = ("too_large",)
    assert [p.number for p in curation.extraction_candidates(source, out, "newest", listed, waive)] == [
        9,
        11,
        3,
    ]
    assert 11 not in curation.listed_not_kept(source, out, listed, waive)
    assert 11 not in [p.number for p in curation.extraction_candidates(source, out, "newest", (), waive)]


@pytest.mark.parametrize(
    "value, problem",
    [("[3, 3]", "more than once: [3]"), ('["7"]', "list of PR numbers"), ("[0]", "list of PR numbers"),
     ("7", "list of PR numbers")],
)  # fmt: skip
def test_extraction_prs_is_checked_when_the_season_is_read(tmp_path, monkeypatch, value, problem):
    from tasks_lib.core.errors import InputError
    from tasks_lib.curation.season import load_season

    monkeypatch.setenv("PBENCH_DATA_DIR", str(tmp_path))
    (tmp_path / "season_defs").mkdir()
    body = 'name = "s"\nsources = ["demo"]\ntarget_models = ["m"]\n[extraction]\nprs = '
    (tmp_path / "season_defs" / "s.toml").write_text(body + "[9, 3]\n")
    assert load_season("s").prs == (9, 3)
    (tmp_path / "season_defs" / "s.toml").write_text(body + value + "\n")
    with pytest.raises(InputError, match=r"s\.toml: field 'extraction\.prs': .*" + re.escape(problem)):
        load_season("s")


@pytest.mark.parametrize(
    "body, problem",
    [('head_run = 5\n', "field 'extraction.head_run': is not a known field; did you mean 'extraction.head_runs'?"),
     ('[window]\nsinse = "2025-01-01"\n', "field 'window.sinse': is not a known field; did you mean 'window.since'?"),
     ('[windows]\n', "field 'windows': is not a known field; did you mean 'window'?")],
)  # fmt: skip
def test_a_misspelt_key_of_a_season_is_refused_by_name(tmp_path, monkeypatch, body, problem):
    from tasks_lib.core.errors import InputError
    from tasks_lib.curation.season import load_season

    monkeypatch.setenv("PBENCH_DATA_DIR", str(tmp_path))
    (tmp_path / "season_defs").mkdir()
    head = 'name = "s"\nsources = ["demo"]\ntarget_models = ["m"]\n'
    text = head + ("[extraction]\n" + body if not body.startswith("[") else body)
    (tmp_path / "season_defs" / "s.toml").write_text(text)
    with pytest.raises(InputError, match=re.escape(problem)):
        load_season("s")


@pytest.mark.parametrize(
    "lines, problem",
    [('labels = "swe-bench"', "'extraction.labels': must be one of pbench, published-v0.1"),
     ('waive = ["too_large"]', "'extraction.waive': waives filter reasons for the PRs of extraction.prs only"),
     ('prs = [3]\nwaive = ["bot_author"]', "'extraction.waive': ['bot_author']: only too_large, too_small"),
     ('collection_errors = "skip"', "'extraction.collection_errors': must be one of continue, stop"),
     ('collection_errors = "stop"', "'extraction.collection_errors': 'stop' reproduces a published harness")],
)  # fmt: skip
def test_labelling_rule_and_waived_reasons_are_checked_when_the_season_is_read(
    tmp_path, monkeypatch, lines, problem
):
    from tasks_lib.core.errors import InputError
    from tasks_lib.curation.season import load_season

    monkeypatch.setenv("PBENCH_DATA_DIR", str(tmp_path))
    (tmp_path / "season_defs").mkdir()
    body = 'name = "s"\nsources = ["demo"]\ntarget_models = ["m"]\n[extraction]\n'
    (tmp_path / "season_defs" / "s.toml").write_text(
        body + 'prs = [3]\nlabels = "published-v0.1"\ncollection_errors = "stop"\n'
    )
    season = load_season("s")
    assert (season.labels, season.waive, season.collection_errors) == ("published-v0.1", (), "stop")
    (tmp_path / "season_defs" / "s.toml").write_text(body + lines + "\n")
    with pytest.raises(InputError, match=re.escape(problem)):
        load_season("s")


def _pr(number: int):
    from datetime import UTC, datetime

    from tasks_lib.sources.crawl.base import ChangedFile, PullRequest

    return PullRequest(
        source="gateway",
        repo="acme/gateway",
        number=number,
        title=f"feat: {number}",
        body="",
        author="alice",
        author_login_raw="alice",
        author_is_bot=False,
        labels=(),
        files=(ChangedFile("gateway/services/tools.py", 5, 5),),
        additions=5,
        deletions=5,
        changed_files=1,
        merge_commit="a" * 40,
        base_commit=None,
        head_commit="b" * 40,
        base_ref="main",
        head_ref="x",
        default_branch="main",
        created_at=datetime(2025, 1, 1, tzinfo=UTC),
        merged_at=datetime(2025, 8, 1, tzinfo=UTC),
        url="u",
    )


def test_the_extraction_key_follows_how_the_image_is_built(tmp_path, monkeypatch):
    """Rule: the extraction cache key (deps_key) changes with the backend image's recipe (here the install
    command a lock implies), not only with the lock's bytes: a fix of how images are built re-extracts."""
    from tasks_lib.curation import stages as curation
    from tasks_lib.images import build as images

    source = load(tmp_path)
    contents = {"uv.lock": LOCK_WITH_GIT, "pyproject.toml": b'[project]\nname = "g"\n'}
    monkeypatch.setattr(images, "dependency_contents", lambda src, repo, commit: contents)
    pr = _pr(7)
    before = curation.deps_key(source, tmp_path, pr)
    assert before == curation.deps_key(source, tmp_path, pr)
    monkeypatch.setattr(envspecs, "unfetchable", lambda contents: [])
    monkeypatch.setattr(curation, "_RECIPES", {})  # memoised per process (the code is fixed within one)
    assert curation.deps_key(source, tmp_path, pr) != before


@pytest.mark.parametrize(
    ("line", "expected"),
    [(None, 0), ("warm_up_s = 0", 0), ("warm_up_s = 240", 240)],
    ids=["default", "off", "on"],
)
def test_the_dev_servers_warm_up_is_off_unless_the_record_gives_it_seconds(tmp_path, line, expected):
    """`[frontend] warm_up_s`: seconds the harness may walk the dev server's module graph before Playwright
    (containers/runner/pbench_warm.py); the job carries it to the runner."""
    from tasks_lib.engine import jobs

    text = ROOT if line is None else ROOT.replace("[frontend]\n", f"[frontend]\n{line}\n", 1)
    source = load(tmp_path, text)
    assert source.frontend.warm_up_s == expected
    assert "pbench_warm.py" in jobs.RUNNER_FILES


@pytest.mark.parametrize("value", ["-5", '"240"', "true"])
def test_a_warm_up_that_is_not_seconds_is_refused(tmp_path, value):
    with pytest.raises(SourceError) as err:
        load(tmp_path, ROOT.replace("[frontend]\n", f"[frontend]\nwarm_up_s = {value}\n", 1))
    assert err.value.field == "frontend.warm_up_s" and "positive integer" in err.value.message


def test_a_lock_without_a_group_its_pyproject_declares_is_refused_with_the_reason(tmp_path):
    """Rule: `uv sync --frozen --group dev` reads the group from the lock; a lock written before the group was
    declared (langflow #8536's head) fails the build. The spec says so before any build: the lock, the group,
    the pyproject that declares it. A lock that records the group (or a commit that does not declare it) builds."""
    source = load(tmp_path)
    pyproject = b'[project]\nname = "g"\n[dependency-groups]\ndev = ["pytest"]\n'
    stale = b"""version = 1
requires-python = ">=3.11"

[[package]]
name = "g"
version = "0.1"
source = { editable = "." }
"""
    with pytest.raises(ImageBuildError) as err:
        envspecs.backend_env_spec(source, {"uv.lock": stale, "pyproject.toml": pyproject})
    assert "dependency group dev" in str(err.value) and "pyproject.toml" in str(err.value)
    fresh = stale + b'\n[package.dev-dependencies]\ndev = [{ name = "pytest" }]\n'
    spec = envspecs.backend_env_spec(source, {"uv.lock": fresh, "pyproject.toml": pyproject})
    assert "--group dev" in spec.install
    undeclared = b'[project]\nname = "g"\n'
    spec = envspecs.backend_env_spec(source, {"uv.lock": stale, "pyproject.toml": undeclared})
    assert "--group" not in spec.install


def test_a_locks_workspace_packages_are_read_as_the_whole_lock_says(tmp_path):
    """Rule (`envspecs._workspace_packages`, docs/performance.md section 19): only the lock's tables that can be
    the workspace's are parsed; what it answers is what parsing the whole lock answers (a registry package
    whose name or extras say "virtual"/"editable" is no member), groups included, and a lock whose cut tables
    do not parse alone is parsed whole."""
    import tomllib

    lock = LOCK_WORKSPACE + (
        b'\n[[package]]\nname = "virtualenv"\nversion = "20.1"\nsource = { registry = "https://pypi.org/simple" }\n'
        b'dependencies = [{ name = "editables" }]\n'
        b'\n[[package]]\nname = "app"\nversion = "0.1.0"\nsource = { editable = "app" }\n\n'
        b'[package.dev-dependencies]\ndev = [{ name = "pytest" }]\nlint = [{ name = "ruff" }]\n'
    )

    def whole(data: bytes):
        return tuple(
            (p.get("name") or "", str(p.get("version", "0")), frozenset(p.get("dev-dependencies") or {}))
            for p in tomllib.loads(data.decode()).get("package", [])
            if {"editable", "virtual"} & set(p.get("source") or {})
        )

    cut = envspecs._workspace_packages.__wrapped__(lock)
    assert cut == whole(lock) and {n for n, _, _ in cut} == {"gateway", "gateway-core", "app"}
    assert envspecs.lock_groups({"uv.lock": lock}) == {"dev", "lint"}
    assert envspecs._workspace_packages.__wrapped__(b"version = 1\n[[package]\n") is None  # not a lock
