"""Test-runner configs read the way the tools read them (stdlib only; runs as root in the container).

A protection that parses a config differently from the tool that reads it can be walked around (a section
header one parser reads as another section). So:
  * INI files (setup.cfg's `[tool:pytest]`) are read as pytest reads them, with iniconfig's rules (ported
    here: pytest's own parser, which the root runner cannot import from the image), and also with the
    standard library's configparser: a file the two read differently, or either cannot read, fails closed;
  * pyproject.toml with tomllib, as pytest does;
  * tsconfig/jsconfig with Playwright's rules: `extends` (a string or a list) and `references`, a path
    without a leading "." resolved in the folder first and then as a package in `node_modules` (its
    package.json `tsconfig` field, its tsconfig.json), the options Playwright takes from each file.
"""

from __future__ import annotations

import configparser
import json
import os

from pbench_jsonc import read_jsonc

COMMENT_CHARS = "#;"


class ParseError(ValueError):
    pass


def iniconfig_sections(text: str) -> dict[str, dict[str, str]]:
    """{section: {name: value}} as iniconfig (pytest's INI reader) parses `text`. ParseError where it fails."""
    tokens = []
    section = None
    for lineno, raw in enumerate(text.splitlines()):
        line = "" if raw.lstrip()[:1] in COMMENT_CHARS else raw.rstrip()
        if not line:
            continue
        if line[0] == "[":
            head = line
            for c in COMMENT_CHARS:
                head = head.split(c)[0].rstrip()
            if head[-1:] == "]":
                if not head[1:-1]:
                    raise ParseError(f"line {lineno + 1}: empty section name")
                section = head[1:-1]
                tokens.append((lineno, section, None, None))
                continue
            name, value = None, line.strip()
        elif not line[0].isspace():
            try:
                name, value = line.split("=", 1)
                if ":" in name:
                    raise ValueError
            except ValueError:
                try:
                    name, value = line.split(":", 1)
                except ValueError:
                    raise ParseError(f"line {lineno + 1}: unexpected line {line!r}") from None
            name, value = name.strip(), value.strip()
        else:
            name, value = None, line.strip()
        if name is None:  # a continuation
            if not tokens or tokens[-1][2] is None:
                raise ParseError(f"line {lineno + 1}: unexpected value continuation")
            last = tokens.pop()
            tokens.append((*last[:3], f"{last[3]}\n{value}" if last[3] else value))
        else:
            tokens.append((lineno, section, name, value))
    sections: dict[str, dict[str, str]] = {}
    for lineno, sec, name, value in tokens:
        if sec is None:
            raise ParseError(f"line {lineno + 1}: no section header defined")
        if name is None:
            if sec in sections:
                raise ParseError(f"line {lineno + 1}: duplicate section {sec!r}")
            sections[sec] = {}
        elif name in sections[sec]:
            raise ParseError(f"line {lineno + 1}: duplicate name {name!r}")
        else:
            sections[sec][name] = value
    return sections


def ini_section(text: str, name: str) -> dict | None:
    """The section `name` as pytest reads it. ParseError when iniconfig cannot read the file, or when the
    standard library's reader sees that section differently (two readers, one answer, or none)."""
    ours = iniconfig_sections(text).get(name)
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    try:
        parser.read_string(text)
    except configparser.Error as exc:
        raise ParseError(f"configparser: {exc}") from None
    theirs = dict(parser[name]) if parser.has_section(name) else None
    if (ours is None) != (theirs is None) or (
        ours is not None
        and {k.lower(): v for k, v in ours.items()} != {k.lower(): v for k, v in theirs.items()}
    ):
        raise ParseError(f"the [{name}] section reads differently with iniconfig and configparser")
    return ours


# ----------------------------------------------------------------------------- tsconfig, as Playwright reads it

JSX_OPTIONS = ("jsx", "jsxFactory", "jsxFragmentFactory", "jsxImportSource")


def resolve_config_file(base_file: str, ref: str, exists, read) -> str:
    """Playwright's `resolveConfigFile`: where `extends`/`references` of `base_file` point."""
    here = os.path.dirname(base_file)
    ref_file = ref if ref.endswith(".json") else ref + ".json"
    local = os.path.normpath(os.path.join(here, ref_file))
    if exists(local) or ref.startswith(".") or os.path.isabs(ref):
        return local
    package_dir = os.path.join(here, "node_modules", ref)
    candidates = [os.path.join(here, "node_modules", ref_file)]
    field = _package_tsconfig(os.path.join(package_dir, "package.json"), read)
    if field:
        candidates.append(os.path.normpath(os.path.join(package_dir, field)))
    candidates.append(os.path.join(package_dir, "tsconfig.json"))
    return next((c for c in candidates if exists(c)), local)


def _package_tsconfig(path: str, read) -> str | None:
    try:
        value = json.loads(read(path)).get("tsconfig")
    except (OSError, ValueError, AttributeError, TypeError):
        return None
    return value if isinstance(value, str) else None


def load_tsconfig(path: str, read, exists) -> list[dict]:
    """Playwright's `loadTsConfig`: the config at `path` merged with what it extends, then its references.
    Each: {path, allowJs, jsx..., paths: {mapping, base}, baseUrl (absolute)}; `missing`: files named that
    do not exist; `errors`: files that cannot be read as JSON. `read(path) -> str`, `exists(path)`."""
    references: list[dict] = []
    visited: dict[str, dict] = {}
    main = _inner(path, read, exists, references, visited)
    return [main, *references]


def _inner(path: str, read, exists, references, visited) -> dict:
    if path in visited:
        return visited[path]
    result: dict = {"path": path, "missing": [], "errors": []}
    visited[path] = result
    if not exists(path):
        result["missing"].append(path)
        return result
    try:
        data = read_jsonc(read(path).lstrip("\ufeff"))
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        result["errors"].append(f"{path}: {exc}")
        return result
    extends = data.get("extends")
    for ref in extends if isinstance(extends, list) else [extends] if extends else []:
        if not isinstance(ref, str):
            result["errors"].append(f"{path}: extends {ref!r} is not a path")
            continue
        base = _inner(resolve_config_file(path, ref, exists, read), read, exists, references, visited)
        missing, errors = result["missing"] + base["missing"], result["errors"] + base["errors"]
        result.update(base)
        result.update({"path": path, "missing": missing, "errors": errors})
    options = data.get("compilerOptions") if isinstance(data.get("compilerOptions"), dict) else {}
    for key in ("allowJs", *JSX_OPTIONS, "target", "useDefineForClassFields"):
        if key in options:
            result[key] = options[key]
    if isinstance(options.get("paths"), dict):
        result["paths"] = {"mapping": options["paths"], "base": os.path.dirname(path)}
    if isinstance(options.get("baseUrl"), str):
        result["baseUrl"] = os.path.normpath(os.path.join(os.path.dirname(path), options["baseUrl"]))
    for ref in data.get("references") or []:
        target = ref.get("path") if isinstance(ref, dict) else None
        if isinstance(target, str):
            references.append(
                _inner(resolve_config_file(path, target, exists, read), read, exists, references, visited)
            )
    if os.path.basename(path) == "jsconfig.json" and "allowJs" not in result:
        result["allowJs"] = True
    return result


def nearest_tsconfig(folder: str, root: str, exists) -> str | None:
    """The tsconfig.json / jsconfig.json Playwright would use for a file in `folder` (the nearest one up to
    `root`, tsconfig.json first in each folder)."""
    folder = os.path.normpath(folder)
    while True:
        for name in ("tsconfig.json", "jsconfig.json"):
            candidate = os.path.join(folder, name)
            if exists(candidate):
                return candidate
        if folder == os.path.normpath(root) or os.path.dirname(folder) == folder:
            return None
        folder = os.path.dirname(folder)


def image_view(repo: str, deps: str = "/deps"):
    """(read, exists) over the tree where a path under a node_modules of the tree is the image's (the runner
    links the image's node_modules folders into the checkout at the same relative paths)."""
    repo = os.path.normpath(repo)

    def real(path: str) -> str:
        path = os.path.normpath(path)
        if path.startswith(repo + "/") and "/node_modules/" in path + "/":
            rel = os.path.relpath(path, repo)
            return os.path.join(deps, rel)
        return path

    def read(path: str) -> str:
        with open(real(path), encoding="utf-8") as fh:
            return fh.read()

    return read, lambda path: os.path.exists(real(path))
