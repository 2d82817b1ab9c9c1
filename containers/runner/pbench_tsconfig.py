"""The TypeScript config the hidden specs compile with: the harness's, root's (stdlib only, runs as root).

Playwright looks up a tsconfig.json / jsconfig.json for every file it loads and resolves bare imports through
its `paths` and `baseUrl`; whoever writes such a file (the patch, or the dev server at run time) decides
where a spec's `import { test, expect } from '@playwright/test'` goes. The injected config therefore always
names one tsconfig of the harness's (`config.tsconfig`), written here before any code of the repository runs:

  * derived from the BASE commit's effective config for the specs' folder, read as Playwright reads it
    (pbench_configs.load_tsconfig: the nearest tsconfig/jsconfig, what it extends, its references);
  * every `paths` mapping that would capture an installed package (or its scope) removed;
  * a `baseUrl` (which makes Playwright try every bare import there first) replaced by one explicit mapping
    per entry its folder holds now, before any code runs, but for entries named like installed packages:
    an entry created later is never consulted;
  * values made absolute, so that nothing in the tree or written at run time changes the resolution.
"""

from __future__ import annotations

import json
import os
import subprocess

from pbench_configs import JSX_OPTIONS, image_view, load_tsconfig, nearest_tsconfig
from pbench_rules import BASE_TAG, key_matches_package

_CODE_EXTENSIONS = (".ts", ".tsx", ".mts", ".cts", ".js", ".jsx", ".mjs", ".cjs")


def base_view(repo: str, deps: str = "/deps"):
    """(read, exists) over the tree at the base commit (git's), node_modules paths the image's."""
    image_read, image_exists = image_view(repo, deps)

    def rel(path: str) -> str | None:
        path = os.path.normpath(path)
        if "/node_modules/" in path + "/" or not path.startswith(os.path.normpath(repo) + "/"):
            return None
        return os.path.relpath(path, repo)

    def show(path: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", "show", f"{BASE_TAG}:{rel(path)}"], cwd=repo, capture_output=True)

    def read(path: str) -> str:
        if rel(path) is None:
            return image_read(path)
        out = show(path)
        if out.returncode != 0:
            raise OSError(f"{path}: not in the base commit")
        return out.stdout.decode("utf-8")

    def exists(path: str) -> bool:
        if rel(path) is None:
            return image_exists(path)
        return (
            subprocess.run(
                ["git", "cat-file", "-e", f"{BASE_TAG}:{rel(path)}"], cwd=repo, capture_output=True
            ).returncode
            == 0
        )

    return read, exists


def _mapping(config: dict, packages: set[str], dropped: list[str]) -> dict[str, list[str]]:
    paths = config.get("paths") or {}
    base = config.get("baseUrl") or paths.get("base") or os.path.dirname(config["path"])
    out: dict[str, list[str]] = {}
    for key, values in (paths.get("mapping") or {}).items():
        hit = key_matches_package(str(key), packages)
        if hit or not isinstance(values, list):
            dropped.append(
                f"{os.path.basename(config['path'])}: paths {key!r}" + (f" (captures {hit!r})" if hit else "")
            )
            continue
        out[str(key)] = [os.path.normpath(os.path.join(base, str(v))) for v in values if isinstance(v, str)]
    base_url = config.get("baseUrl")
    if base_url and os.path.isdir(base_url):
        for entry in sorted(os.listdir(base_url)):
            name = entry
            for ext in _CODE_EXTENSIONS:
                if entry.endswith(ext):
                    name = entry[: -len(ext)]
                    break
            if entry.startswith(".") or entry == "node_modules" or name in packages or entry in packages:
                continue
            target = os.path.join(base_url, name)
            out.setdefault(name, [target])
            if os.path.isdir(os.path.join(base_url, entry)):
                out.setdefault(f"{name}/*", [f"{target}/*"])
    return out


def write(repo: str, spec_folder: str, out_dir: str, packages: set[str]) -> tuple[str, list[str]]:
    """Write the harness's tsconfig (and one file per reference) into `out_dir`; its path, and what was
    left out of the base config and why."""
    read, exists = base_view(repo)
    found = nearest_tsconfig(spec_folder, repo, exists)
    configs = load_tsconfig(found, read, exists) if found else []
    notes = [f"from the base commit's {os.path.relpath(found, repo)}"] if found else ["no tsconfig at base"]
    os.makedirs(out_dir, exist_ok=True)
    files = []
    for i, config in enumerate(configs):
        notes += [f"unreadable, left out: {e}" for e in config["errors"]]
        options: dict = {"allowJs": bool(config.get("allowJs"))}
        options |= {k: config[k] for k in (*JSX_OPTIONS, "target", "useDefineForClassFields") if k in config}
        options["paths"] = _mapping(config, packages, notes)
        data: dict = {"compilerOptions": options}
        path = os.path.join(out_dir, "tsconfig.json" if i == 0 else f"reference-{i}.json")
        files.append((path, data))
    if not files:
        files.append((os.path.join(out_dir, "tsconfig.json"), {"compilerOptions": {"allowJs": False}}))
    files[0][1]["references"] = [{"path": path} for path, _ in files[1:]]
    for path, data in files:
        with open(path, "w") as fh:
            json.dump(data, fh, indent=1)
        os.chmod(path, 0o644)
    return files[0][0], notes
