"""Dependency files an agent's patch changed: they may reference the package index only, and they decide which
packages an image build may run build code for (pure functions over file contents).

An environment image of a patched lock is built with network. What the build runs must never be the agent's
code: local paths, VCS and URL references are refused (`patch_invalid`, with the reason) before any build, and
build code (npm lifecycle scripts, Python source builds) runs only for packages the *base* lock needed it for.
"""

from __future__ import annotations

import functools
import json
import re
import tomllib
from collections.abc import Mapping

from tasks_lib.core.constants import Status
from tasks_lib.formats.patches import PatchProblem
from tasks_lib.protocol.jsonc import read_jsonc

DEFAULT_NPM_REGISTRY = "https://registry.npmjs.org/"
_REQ_LINE = re.compile(
    r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9._,\s-]*\])?\s*"
    r"((===|==|!=|~=|<=|>=|<|>)\s*[A-Za-z0-9.*+!_-]+\s*(,\s*(===|==|!=|~=|<=|>=|<|>)\s*[A-Za-z0-9.*+!_-]+\s*)*)?"
    r"(;[^#@]*)?(\s+--hash=[a-z0-9]+:[A-Fa-f0-9]+)*\s*(#.*)?$"
)
_NPM_NON_INDEX = re.compile(
    r"^(file:|link:|portal:|git[+:]|github:|gitlab:|bitbucket:|gist:|https?:|[\w.-]+/[\w.-]+(#.*)?$)"
)


def _problem(path: str, why: str) -> PatchProblem:
    return PatchProblem(
        Status.PATCH_INVALID,
        f"{path}: {why} (a patched dependency file may reference the package index only)",
        path,
    )


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", errors="replace")


def check(
    base: Mapping[str, bytes | None], patched: Mapping[str, bytes | None], *, npm_registry: str | None = None
) -> list[PatchProblem]:
    """Problems of the dependency files the patch changed (`patched` differs from `base`)."""
    problems: list[PatchProblem] = []
    for path, data in patched.items():
        if data is None or data == base.get(path):
            continue
        name = path.rsplit("/", 1)[-1]
        text, before = _text(data), _text(base.get(path))
        try:
            if name.endswith(".txt") and "requirements" in name:
                problems += _requirements(path, text)
            elif name == "uv.lock":
                problems += _uv_lock(path, text, before)
            elif name == "pyproject.toml":
                problems += _pyproject(path, text, before)
            elif name == "package-lock.json":
                problems += _package_lock(path, text, before, npm_registry or DEFAULT_NPM_REGISTRY)
            elif name == "package.json":
                problems += _package_json(path, text, before)
            elif name == "bun.lock":
                problems += _bun_lock(path, text, before)
        except (ValueError, tomllib.TOMLDecodeError) as exc:
            problems.append(_problem(path, f"cannot be read ({exc})"))
    return problems


def _requirements(path: str, text: str) -> list[PatchProblem]:
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.startswith("-") or not _REQ_LINE.match(stripped):
            out.append(_problem(path, f"line {number} is not a plain requirement: {stripped[:80]!r}"))
    return out


def _uv_sources(lock: dict) -> dict[str, dict]:
    return {p.get("name", ""): p.get("source") or {} for p in lock.get("package", [])}


# The head of a package as uv writes it: `[[package]]`, `name`, an optional `version`, `source` (an inline table).
_UV_PACKAGE_HEAD = re.compile(
    r'^\[\[package\]\]\nname = ("[^"\n]*")\n(?:version = "[^"\n]*"\n)?source = (\{[^\n]*\})$', re.M
)
_UV_PACKAGE = re.compile(r"^\[\[package\]\]$", re.M)


@functools.lru_cache(maxsize=64)
def uv_sources(lock_bytes: bytes) -> dict[str, dict]:
    """name -> `source` table of every package a uv.lock holds (memoised on its bytes: a season's PRs share a
    few locks); {} for a lock that does not parse. Read from the packages' heads when every package has the
    head uv writes (a twentieth of the time of parsing the whole lock: 0.1 s for mcp-context-forge's 1 MB,
    once per lock and command), else from the whole lock."""
    text = lock_bytes.decode("utf-8", "replace")
    heads = _UV_PACKAGE_HEAD.findall(text)
    if heads and len(heads) == len(_UV_PACKAGE.findall(text)):
        try:
            return {
                table["name"]: table["source"]
                for table in (tomllib.loads(f"name = {name}\nsource = {src}") for name, src in heads)
            }
        except tomllib.TOMLDecodeError:
            pass
    try:
        return _uv_sources(tomllib.loads(text))
    except tomllib.TOMLDecodeError:
        return {}


def _uv_lock(path: str, text: str, before: str | None) -> list[PatchProblem]:
    lock = tomllib.loads(text)
    base = _uv_sources(tomllib.loads(before)) if before else {}
    registries = {s.get("registry") for s in base.values() if s.get("registry")} or {
        "https://pypi.org/simple"
    }
    out = []
    for name, source in _uv_sources(lock).items():
        if "registry" in source and source["registry"] in registries:
            continue
        if base.get(name) == source:  # a workspace member (virtual/editable) or a source the base had
            continue
        kind = next(iter(source), "no source")
        out.append(_problem(path, f"package {name!r} comes from {kind} {source.get(kind, '')!r}"))
    return out


def _pyproject(path: str, text: str, before: str | None) -> list[PatchProblem]:
    data, base = tomllib.loads(text), tomllib.loads(before) if before else {}
    out = []
    uv, base_uv = data.get("tool", {}).get("uv", {}), base.get("tool", {}).get("uv", {})
    for key in ("index", "index-url", "extra-index-url", "find-links"):
        if uv.get(key) != base_uv.get(key):
            out.append(_problem(path, f"[tool.uv] {key} changed"))
    sources, base_sources = uv.get("sources", {}), base_uv.get("sources", {})
    for name, spec in sources.items():
        if spec != base_sources.get(name) and not (
            isinstance(spec, dict) and set(spec) <= {"index", "workspace"}
        ):
            out.append(_problem(path, f"[tool.uv.sources] {name} is not from the index: {spec!r}"))
    project = data.get("project", {})
    deps = list(project.get("dependencies", []))
    for group in [
        *project.get("optional-dependencies", {}).values(),
        *data.get("dependency-groups", {}).values(),
    ]:
        deps += [d for d in group if isinstance(d, str)]
    for dep in deps:
        if (
            "@" in dep.split(";", 1)[0]
            and "://" in dep
            or dep.strip().startswith(("git+", "file:", ".", "/"))
        ):
            out.append(_problem(path, f"dependency {dep!r} is a direct reference"))
    return out


def _package_lock(path: str, text: str, before: str | None, registry: str) -> list[PatchProblem]:
    lock, base = json.loads(text), json.loads(before) if before else {}
    base_packages = base.get("packages", {})
    out = []
    for key, entry in (lock.get("packages") or {}).items():
        if not key or not isinstance(entry, dict):
            continue
        if entry.get("link"):
            if base_packages.get(key, {}).get("resolved") != entry.get("resolved"):
                out.append(_problem(path, f"{key} links to {entry.get('resolved')!r}"))
            continue
        resolved = entry.get("resolved")
        if resolved and not resolved.startswith(registry.rstrip("/") + "/"):
            out.append(_problem(path, f"{key} is resolved from {resolved[:100]!r}"))
    return out


def _package_json(path: str, text: str, before: str | None) -> list[PatchProblem]:
    data, base = json.loads(text), json.loads(before) if before else {}
    out = []
    for field in (
        "dependencies",
        "devDependencies",
        "optionalDependencies",
        "peerDependencies",
        "overrides",
        "resolutions",
    ):
        for name, spec in (data.get(field) or {}).items():
            if not isinstance(spec, str) or (base.get(field) or {}).get(name) == spec:
                continue
            target = spec.split("@", 1)[1] if spec.startswith("npm:") and "@" in spec[4:] else spec
            if _NPM_NON_INDEX.match(target.strip()):
                out.append(_problem(path, f"{field}.{name} is not from the registry: {spec!r}"))
    if data.get("trustedDependencies") != base.get("trustedDependencies"):
        out.append(_problem(path, "trustedDependencies changed (it would let packages run build scripts)"))
    return out


def _bun_lock(path: str, text: str, before: str | None) -> list[PatchProblem]:
    data, base = read_jsonc(text), read_jsonc(before) if before else {}
    base_packages = base.get("packages", {})
    out = []
    for name, entry in (data.get("packages") or {}).items():
        if not isinstance(entry, list) or not entry:
            continue
        spec = str(entry[0])
        version = spec.rsplit("@", 1)[-1]
        if base_packages.get(name) == entry:
            continue
        if _NPM_NON_INDEX.match(version) or (
            len(entry) > 1 and isinstance(entry[1], str) and entry[1].startswith(("http", "git"))
        ):
            out.append(_problem(path, f"package {name!r} is not from the registry: {spec!r}"))
    return out


# ----------------------------------------------------------------------------- what may run build code


def npm_install_scripts(lock_text: str | None, *, optional: bool = False) -> list[str]:
    """Packages of a package-lock.json that have install scripts (npm records `hasInstallScript`).

    `optional=False`: those some install needs (one copy at least not marked `optional`); `optional=True`: those
    only optional dependencies bring (every copy `optional`, e.g. `canvas` under jsdom, `fsevents`): npm itself
    goes on without them when their script fails, and so does the image build."""
    if not lock_text:
        return []
    packages = (json.loads(lock_text).get("packages") or {}).items()
    scripted: dict[str, bool] = {}
    for key, e in packages:
        if key and e.get("hasInstallScript"):
            name = key.rsplit("node_modules/", 1)[-1]
            scripted[name] = scripted.get(name, True) and bool(e.get("optional"))
    return sorted(name for name, only_optional in scripted.items() if only_optional == optional)


def bun_trusted(manifest_text: str | None) -> list[str]:
    """Packages a bun project lets run lifecycle scripts (`trustedDependencies` of its package.json)."""
    if not manifest_text:
        return []
    return sorted(json.loads(manifest_text).get("trustedDependencies") or [])


_WHEEL = re.compile(
    r"/(?P<name>[^/-]+)-(?P<ver>[^/-]+)(-\d[^/-]*)?-(?P<py>[^/-]+)-(?P<abi>[^/-]+)-(?P<plat>[^/-]+)\.whl$"
)


def _wheel_fits(url: str, python: tuple[int, int], machine: str) -> bool:
    m = _WHEEL.search(url)
    if not m:
        return False
    plat, abi, py = m.group("plat"), m.group("abi"), m.group("py")
    if plat != "any" and not any(
        machine in p and ("manylinux" in p or p.startswith("linux")) for p in plat.split(".")
    ):
        return False
    tags = py.split(".")
    cp = f"cp{python[0]}{python[1]}"
    if any(t in (f"py{python[0]}", f"py{python[0]}{python[1]}", cp) for t in tags):
        return abi in ("none", "abi3", cp)
    return abi == "abi3" and any(
        t.startswith(f"cp{python[0]}") and int(t[3:] or 0) <= python[1] for t in tags
    )


def uv_source_builds(lock_text: str | None, python=(3, 11), machine="x86_64") -> list[str]:
    """Packages of a uv.lock from the index that have no wheel for this Python and machine: installing them
    runs their build code."""
    if not lock_text:
        return []
    out = []
    for package in tomllib.loads(lock_text).get("package", []):
        if "registry" not in (package.get("source") or {}):
            continue
        wheels = [w.get("url", "") for w in package.get("wheels", [])]
        if not any(_wheel_fits(u, python, machine) for u in wheels):
            out.append(package.get("name", ""))
    return sorted(filter(None, out))


def uv_package_names(lock_text: str | None) -> list[str]:
    if not lock_text:
        return []
    return sorted({p.get("name", "") for p in tomllib.loads(lock_text).get("package", []) if p.get("name")})


def uv_packages(lock_text: str | None) -> set[str]:
    """`name==version` of every package a uv.lock pins (what an environment built from it holds)."""
    if not lock_text:
        return set()
    return {
        f"{p['name']}=={p.get('version', '')}"
        for p in tomllib.loads(lock_text).get("package", [])
        if p.get("name")
    }
