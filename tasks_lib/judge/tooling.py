"""The test tooling an environment image holds, read from its files: the test runners' versions (pytest, pluggy,
Playwright) and the pytest plugins it would load (pytest11 entry points).

A patch that changes the lock gets the image of its patched lock. Its test tooling must be the base lock's (or
the reference patch's, when the reference itself changes it): a runner of another version is refused
(`patch_touches_tests`), and a plugin the base does not have is never loaded (the launcher loads the allowed
entry points by name).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tasks_lib.core import docker_client, paths
from tasks_lib.core.config import Settings
from tasks_lib.corpus.instance import TaskInstance
from tasks_lib.engine import runners
from tasks_lib.formats import lockcheck
from tasks_lib.images import build as images
from tasks_lib.sources.record import SourceRecord

RUNNERS = tuple(package for runner in runners.REGISTRY.values() for package in runner.tooling)

# Runs in a container of the image with the system interpreter, isolated and without site: nothing the image's
# packages install (a .pth, say) runs; it only reads metadata files.
_SCRIPT = r"""
import configparser, glob, json, os
out = {"runners": {}, "plugins": {}}
for info in glob.glob("/opt/venv/lib/python3*/site-packages/*.dist-info"):
    meta = {}
    try:
        for line in open(os.path.join(info, "METADATA"), errors="replace"):
            if not line.strip():
                break
            key, _, value = line.partition(":")
            meta.setdefault(key.strip().lower(), value.strip())
    except OSError:
        continue
    name = meta.get("name", "").lower().replace("_", "-")
    if name in ("pytest", "pluggy"):
        out["runners"][name] = meta.get("version", "")
    eps = os.path.join(info, "entry_points.txt")
    if os.path.exists(eps):
        parser = configparser.ConfigParser(interpolation=None, delimiters=("=",))
        try:
            parser.read(eps)
        except configparser.Error:
            continue
        if parser.has_section("pytest11"):
            for ep in parser["pytest11"]:
                out["plugins"][ep] = f"{name}=={meta.get('version', '')}"
for pkg in ("@playwright/test", "playwright", "playwright-core"):
    for path in sorted(glob.glob(f"/deps/**/node_modules/{pkg}/package.json", recursive=True), key=len)[:1]:
        try:
            out["runners"][pkg] = json.load(open(path)).get("version", "")
        except (OSError, ValueError):
            pass
print(json.dumps(out))
"""


@dataclass(frozen=True)
class Tooling:
    runners: dict[str, str]
    plugins: dict[str, str]  # entry-point name -> distribution==version

    def runner_changes(self, base: Tooling) -> list[str]:
        return [
            f"{name} {base.runners.get(name, 'absent')} -> {self.runners.get(name, 'absent')}"
            for name in RUNNERS
            if self.runners.get(name) != base.runners.get(name)
        ]


def of_image(image_id: str) -> Tooling:
    """The tooling of an image, cached on disk by image id (an image never changes)."""
    cache = paths.cache_dir() / "tooling" / f"{image_id.replace(':', '_')}.json"
    if cache.exists():
        data = json.loads(cache.read_text())
    else:
        import os

        from tasks_lib.core.constants import LABEL, LABEL_OWNER

        images.require_build(f"tooling probe of {image_id}")
        client = docker_client.get()
        out = client.containers.run(
            image_id,
            ["/usr/bin/python3", "-I", "-S", "-c", _SCRIPT],
            network_disabled=True,
            user="65533:65533",
            remove=True,
            entrypoint=[],
            labels={LABEL: "1", LABEL_OWNER: os.environ.get("PBENCH_OWNER", "pbench")},
        )
        data = json.loads(out.decode().strip().splitlines()[-1])
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps(data, indent=1))
    return Tooling(data["runners"], data["plugins"])


def check(patched: Tooling, base: Tooling, reference: Tooling | None = None) -> tuple[list[str], list[str]]:
    """(problems, allowed plugin names) for a run in the image of a patched lock."""
    problems = patched.runner_changes(base)
    if problems and reference is not None and not patched.runner_changes(reference):
        problems = []
    allowed = set(base.plugins) | (set(reference.plugins) if reference else set())
    return problems, sorted(allowed)


# ----------------------------------------------------------------------------- an agent's dependency change


def dependency_problems(
    source: SourceRecord, repo: Path, instance: TaskInstance, patch: str, settings: Settings
):
    """What the agent's change to the dependency files references beyond the package index (patch_invalid)."""
    out = []
    for side in ("backend", "frontend") if source.frontend is not None else ("backend",):
        commit, test_patch = instance.base_commit, instance.test_patch
        base = images.dependency_contents(source, repo, commit, [test_patch], side)
        patched = images.dependency_contents(source, repo, commit, [patch, test_patch], side)
        out += lockcheck.check(base, patched, npm_registry=settings.npm_registry)
    return out


def patched_tooling(source: SourceRecord, instance: TaskInstance, patch: str, book: images.EnvSpecBook):
    """(problems, allowed pytest plugins) when the agent's patch changes a lock: the patched image's test
    runners must be the base lock's (or the reference patch's), and only the plugins those have may load.
    `book`: the scoring's environment specs (at the instance's base commit)."""
    test_patch, settings = instance.test_patch, book.settings
    sides = ["backend", "frontend"] if source.frontend is not None else ["backend"]

    def specs(name: str):
        chain = {
            "agent": [(patch, True), (test_patch, False)],
            "base": [(test_patch, False)],
            "reference": [(instance.patch, True), (test_patch, False)],
        }[name]
        return book.of(chain, sides[-1])

    problems, plugins = [], None
    agent_specs, base_specs = specs("agent"), specs("base")
    for i, side in enumerate(sides):
        agent, base = agent_specs[i], base_specs[i]
        if agent is None or agent.key("") == base.key(""):
            continue
        of = lambda spec: of_image(images.ensure_env_image(spec, settings).id)  # noqa: E731
        patched, before = of(agent), of(base)
        reference = None
        if patched.runner_changes(before) or set(patched.plugins) - set(before.plugins):
            reference = of(specs("reference")[i])
        side_problems, allowed = check(patched, before, reference)
        problems += side_problems
        if side == "backend":
            plugins = tuple(allowed)
    return problems, plugins
