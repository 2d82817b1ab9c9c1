"""Patched dependency files reference the package index only; build code runs only where the base lock needs it
(tasks_lib/formats/lockcheck.py, pure)."""

from __future__ import annotations

import json

import pytest

from tasks_lib.core.constants import Status
from tasks_lib.formats import lockcheck

REQS = b"fastapi==0.115.6\npytest==8.3.4\n"


def _check(path: str, before: bytes | None, after: bytes) -> list[str]:
    problems = lockcheck.check({path: before}, {path: after})
    assert all(p.status == Status.PATCH_INVALID and p.path == path for p in problems)
    return [p.message for p in problems]


def test_an_unchanged_file_is_never_checked():
    """Rule: only what the patch changed is the agent's; a base file with odd content is the repository's."""
    odd = b"-e ../local\n"
    assert _check("backend/requirements.txt", odd, odd) == []


@pytest.mark.parametrize(
    "line",
    [
        "-e .",
        "--index-url https://evil.example/simple",
        "--extra-index-url https://evil.example/simple",
        "-r other.txt",
        "demo @ git+https://github.com/evil/demo",
        "demo @ https://evil.example/demo-1.0.tar.gz",
        "./local-package",
        "git+https://github.com/evil/demo#egg=demo",
    ],
)
def test_requirements_refuse_everything_but_index_requirements(line):
    messages = _check("backend/requirements.txt", REQS, REQS + line.encode() + b"\n")
    assert (
        len(messages) == 1
        and "not a plain requirement" in messages[0]
        and "package index only" in messages[0]
    )


def test_plain_requirements_with_extras_markers_and_hashes_pass():
    after = (
        REQS
        + b"psycopg[binary]==3.2.3 ; python_version >= '3.10' --hash=sha256:"
        + b"ab" * 32
        + b"\nhttpx>=0.27,<1\n"
    )
    assert _check("backend/requirements.txt", REQS, after) == []


UV_BASE = b"""
version = 1
[[package]]
name = "app"
version = "0.1.0"
source = { editable = "backend" }

[[package]]
name = "fastapi"
version = "0.115.6"
source = { registry = "https://pypi.org/simple" }
wheels = [{ url = "https://files.pythonhosted.org/x/fastapi-0.115.6-py3-none-any.whl" }]
"""


@pytest.mark.parametrize(
    ("source", "kind"),
    [
        ('{ git = "https://github.com/evil/x?rev=1#abc" }', "git"),
        ('{ path = "../x" }', "path"),
        ('{ url = "https://evil.example/x-1.0.tar.gz" }', "url"),
        ('{ registry = "https://evil.example/simple" }', "registry"),
    ],
)
def test_uv_lock_sources_other_than_the_base_index_are_refused(source, kind):
    after = UV_BASE + f'\n[[package]]\nname = "x"\nversion = "1.0"\nsource = {source}\n'.encode()
    messages = _check("uv.lock", UV_BASE, after)
    assert len(messages) == 1 and "'x'" in messages[0] and kind in messages[0]


def test_uv_lock_workspace_members_of_the_base_and_index_packages_pass():
    after = (
        UV_BASE
        + b'\n[[package]]\nname = "httpx"\nversion = "0.28.1"\nsource = { registry = "https://pypi.org/simple" }\n'
    )
    assert _check("uv.lock", UV_BASE, after) == []


def test_pyproject_sources_and_indexes():
    base = b'[project]\nname = "app"\ndependencies = ["fastapi"]\n'
    git = base + b'\n[tool.uv.sources]\nx = { git = "https://github.com/evil/x" }\n'
    assert any("[tool.uv.sources] x" in m for m in _check("pyproject.toml", base, git))
    index = base + b'\n[[tool.uv.index]]\nurl = "https://evil.example/simple"\n'
    assert any("index changed" in m for m in _check("pyproject.toml", base, index))
    direct = b'[project]\nname = "app"\ndependencies = ["fastapi", "x @ https://evil.example/x.whl"]\n'
    assert any("direct reference" in m for m in _check("pyproject.toml", base, direct))


LOCK_BASE = {
    "lockfileVersion": 3,
    "packages": {"": {"name": "f"}, "node_modules/react": {"version": "19.3.1"}},
}


@pytest.mark.parametrize(
    ("entry", "what"),
    [
        ({"version": "1.0.0", "resolved": "https://evil.example/x-1.0.0.tgz"}, "resolved from"),
        ({"version": "1.0.0", "resolved": "git+ssh://git@github.com/evil/x.git#abc"}, "resolved from"),
        ({"resolved": "../x", "link": True}, "links to"),
    ],
)
def test_package_lock_entries_off_the_registry_are_refused(entry, what):
    after = json.loads(json.dumps(LOCK_BASE))
    after["packages"]["node_modules/x"] = entry
    messages = _check(
        "frontend/package-lock.json", json.dumps(LOCK_BASE).encode(), json.dumps(after).encode()
    )
    assert len(messages) == 1 and what in messages[0]


def test_package_lock_entries_of_the_registry_pass():
    after = json.loads(json.dumps(LOCK_BASE))
    after["packages"]["node_modules/is-number"] = {
        "version": "7.0.0",
        "resolved": "https://registry.npmjs.org/is-number/-/is-number-7.0.0.tgz",
    }
    assert (
        _check("frontend/package-lock.json", json.dumps(LOCK_BASE).encode(), json.dumps(after).encode()) == []
    )


@pytest.mark.parametrize(
    "spec",
    [
        "file:../x",
        "link:../x",
        "git+https://github.com/evil/x",
        "github:evil/x",
        "evil/x",
        "https://evil.example/x.tgz",
    ],
)
def test_package_json_specs_off_the_registry_are_refused(spec):
    base = {"name": "f", "dependencies": {"react": "19.3.1"}}
    after = {"name": "f", "dependencies": {"react": "19.3.1", "x": spec}}
    messages = _check("frontend/package.json", json.dumps(base).encode(), json.dumps(after).encode())
    assert len(messages) == 1 and "dependencies.x" in messages[0]


def test_package_json_scripts_and_registry_specs_are_the_agents():
    """Rule: lifecycle scripts may be edited (they never run at build: --ignore-scripts); registry specs and
    npm: aliases of registry packages pass; trustedDependencies (bun's allowlist of build scripts) may not."""
    base = {"name": "f", "dependencies": {"react": "19.3.1"}}
    after = {
        "name": "f",
        "scripts": {"postinstall": "node evil.js"},
        "dependencies": {"react": "^19", "x": "npm:is-number@7"},
    }
    assert _check("frontend/package.json", json.dumps(base).encode(), json.dumps(after).encode()) == []
    trusted = dict(base, trustedDependencies=["x"])
    assert any(
        "trustedDependencies" in m
        for m in _check("package.json", json.dumps(base).encode(), json.dumps(trusted).encode())
    )


def test_bun_lock_git_and_tarball_entries_are_refused():
    base = b'{"lockfileVersion": 1, "packages": {"react": ["react@19.3.1", "", {}, "sha512-x"]}}'
    after = b'{"lockfileVersion": 1, "packages": {"react": ["react@19.3.1", "", {}, "sha512-x"], "x": ["x@github:evil/x#abc", {}],}}'
    assert any("'x'" in m for m in _check("bun.lock", base, after))


def test_install_scripts_only_optional_dependencies_bring_are_told_apart():
    """A package every copy of which is an optional dependency (canvas under jsdom, fsevents) may fail its
    script without failing the install (npm's rule); one copy a required dependency makes it required."""
    lock = {
        "packages": {
            "": {},
            "node_modules/canvas": {"hasInstallScript": True, "optional": True},
            "node_modules/x/node_modules/canvas": {"hasInstallScript": True, "optional": True, "peer": True},
            "node_modules/fsevents": {"hasInstallScript": True, "optional": True},
            "node_modules/esbuild": {"hasInstallScript": True},
            "node_modules/y/node_modules/esbuild": {"hasInstallScript": True, "optional": True},
        }
    }
    text = json.dumps(lock)
    assert lockcheck.npm_install_scripts(text) == ["esbuild"]
    assert lockcheck.npm_install_scripts(text, optional=True) == ["canvas", "fsevents"]


def test_what_may_run_build_code_comes_from_the_base_lock():
    """Rule: npm lifecycle scripts only for packages the base lock records with install scripts; Python source
    builds only for packages of the base uv.lock without a wheel for this Python and machine."""
    lock = {
        "packages": {
            "": {},
            "node_modules/esbuild": {"hasInstallScript": True},
            "node_modules/a/node_modules/b": {"hasInstallScript": True},
            "node_modules/react": {},
        }
    }
    assert lockcheck.npm_install_scripts(json.dumps(lock)) == ["b", "esbuild"]
    assert lockcheck.npm_install_scripts(json.dumps(lock), optional=True) == []
    uv = (
        UV_BASE.decode()
        + """
[[package]]
name = "oldlib"
version = "1.0"
source = { registry = "https://pypi.org/simple" }
sdist = { url = "https://files.pythonhosted.org/x/oldlib-1.0.tar.gz" }

[[package]]
name = "fastnative"
version = "2.0"
source = { registry = "https://pypi.org/simple" }
wheels = [{ url = "https://files.pythonhosted.org/x/fastnative-2.0-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl" }]

[[package]]
name = "macwheel"
version = "3.0"
source = { registry = "https://pypi.org/simple" }
wheels = [{ url = "https://files.pythonhosted.org/x/macwheel-3.0-cp311-cp311-macosx_11_0_arm64.whl" }]
"""
    )
    assert lockcheck.uv_source_builds(uv) == ["macwheel", "oldlib"]
    assert lockcheck.bun_trusted('{"trustedDependencies": ["esbuild"]}') == ["esbuild"]


UV_LOCK = """version = 1
revision = 3
requires-python = ">=3.11"

[[package]]
name = "app"
version = "0.1.0"
source = { editable = "." }
dependencies = [
    { name = "fastapi" },
]

[[package]]
name = "fastapi"
version = "0.115.0"
source = { registry = "https://pypi.org/simple" }
sdist = { url = "https://files.pythonhosted.org/f/fastapi.tar.gz", hash = "sha256:00", size = 1 }

[[package]]
name = "gitdep"
version = "1.0"
source = { git = "https://github.com/o/r?rev=main#abc" }

[[package]]
name = "nover"
source = { url = "https://example.com/nover.whl" }
"""


@pytest.mark.parametrize(
    "text",
    [
        UV_LOCK,
        # A package whose head is not the one uv writes (a comment in it): the whole lock is parsed.
        UV_LOCK.replace('name = "nover"\n', '# hand-edited\nname = "nover"\n'),
        # The same name twice: the later table wins, as in the parsed lock.
        UV_LOCK
        + '\n[[package]]\nname = "fastapi"\nversion = "0.116.0"\nsource = { url = "https://x/f.whl" }\n',
        "version = 1\n[[package]\nname = 'broken'\n",
    ],
)
def test_uv_sources_from_the_heads_are_those_of_the_parsed_lock(text):
    """Rule: the fast reading of a uv.lock (the packages' heads) gives what parsing the whole lock gives."""
    import tomllib

    lockcheck.uv_sources.cache_clear()
    try:
        parsed = lockcheck._uv_sources(tomllib.loads(text))
    except tomllib.TOMLDecodeError:
        parsed = {}
    assert lockcheck.uv_sources(text.encode()) == parsed
    if text == UV_LOCK:
        assert parsed["gitdep"] == {"git": "https://github.com/o/r?rev=main#abc"} and "nover" in parsed
