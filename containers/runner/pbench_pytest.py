"""The harness's pytest launcher: the runner and its plugins load from the image only, then the code under test.

Started by the in-container runner as the test user, with the test environment's interpreter:

    /opt/venv/bin/python -P -s /pbench/tools/pbench_pytest.py [pytest arguments]

`-P` keeps the working directory off `sys.path`, `-s` the user site, and the runner takes PYTHONPATH out of the
environment: while pytest, pluggy and the plugins import, only the image's directories are on `sys.path`.
Then the repository's import roots go in front (as `python -m pytest` would have put them) and pytest runs
with plugin autoloading off, loading by name exactly the entry points found in the image (or the subset the
runner allows, when the patch changed the lock). An audit plugin, registered first, records before any code of
the repository runs what the runner is made of (where its modules come from, the identity of its reporting
functions) and checks it again at the end of the session: a runner module from the work tree, a reporting
function replaced, or a hook registered from a file the agent's patch changed is tampering. The audit goes to
PBENCH_AUDIT as JSON. Code in the same process can still lie to all of this; the canary tests and the static
check are the out-of-band witnesses (docs/reliability.md).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import inspect
import json
import os
import pkgutil
import sys

RUNNER_PACKAGES = ("pytest", "_pytest", "pluggy", "iniconfig", "packaging", "py")
# Where the verdict is made: modules whose functions and classes must be the same objects at the end.
REPORTING = (
    "_pytest.reports",
    "_pytest.runner",
    "_pytest.junitxml",
    "_pytest.terminal",
    "_pytest.main",
    "_pytest.skipping",
    "_pytest.python",
    "_pytest.outcomes",
    "_pytest.unittest",
    "_pytest.nodes",
    "_pytest.config",
    "pluggy._callers",
    "pluggy._hooks",
    "pluggy._manager",
    "pluggy._result",
)


def _preimport(package: str) -> None:
    try:
        module = importlib.import_module(package)
    except ImportError:
        return
    for info in pkgutil.walk_packages(getattr(module, "__path__", []), package + "."):
        if info.name.endswith("__main__"):
            continue
        # An optional submodule (a missing extra) that fails: the real run would not import it either.
        with contextlib.suppress(Exception):
            importlib.import_module(info.name)


def _identities() -> dict[str, int]:
    seen = {}
    for name in REPORTING:
        module = sys.modules.get(name)
        if module is None:
            continue
        for attr, value in list(vars(module).items()):
            if inspect.isfunction(value) or inspect.isclass(value):
                seen[f"{name}.{attr}"] = id(value)
            if inspect.isclass(value) and value.__module__ == name:
                for key, member in list(vars(value).items()):
                    if inspect.isfunction(member) or isinstance(
                        member, (classmethod, staticmethod, property)
                    ):
                        seen[f"{name}.{attr}.{key}"] = id(member)
    return seen


def _lookup(dotted: str):
    for cut in range(dotted.count("."), 0, -1):
        parts = dotted.split(".")
        module = sys.modules.get(".".join(parts[:cut]))
        if module is None:
            continue
        obj = module
        for part in parts[cut:]:
            obj = vars(obj).get(part) if hasattr(obj, "__dict__") else None
            if obj is None:
                return None
        return obj
    return None


def _origin(obj) -> str | None:
    """The source file of a function, method, property or class (None for builtins and the like)."""
    for attr in ("__func__", "fget", "func"):
        obj = getattr(obj, attr, obj) if not inspect.isfunction(obj) else obj
    obj = inspect.unwrap(obj) if callable(obj) else obj
    code = getattr(obj, "__code__", None)
    if code is not None:
        return code.co_filename
    if inspect.isclass(obj):
        return getattr(sys.modules.get(obj.__module__), "__file__", None)
    return None


class Audit:
    """Registered before any plugin of the repository: what the runner is, checked at the end."""

    def __init__(self, image_dirs, plugin_modules, work_tree, agent_files):
        self.image_dirs = tuple(d.rstrip("/") + "/" for d in image_dirs)
        self.work_tree = work_tree.rstrip("/") + "/"
        self.agent_files = {os.path.join(work_tree, f) for f in agent_files}
        self.runner_modules = {
            name: module
            for name, module in sys.modules.items()
            if name.split(".", 1)[0] in RUNNER_PACKAGES or name in plugin_modules
        }
        self.identities = _identities()
        self.findings: list[str] = []
        self.config = None
        self.checked: list[str] = []

    def pytest_configure(self, config):
        self.config = config
        # Autoloading was off for this process only: xdist workers start their own (clean) discovery.
        os.environ.pop("PYTEST_DISABLE_PLUGIN_AUTOLOAD", None)

    def pytest_sessionfinish(self, session):
        self.check("at the end of the session")

    def _from_image(self, path: str | None) -> bool:
        return bool(path) and os.path.realpath(path).startswith(self.image_dirs)

    def check(self, when: str) -> None:
        self.checked.append(when)
        found = []
        for name, module in self.runner_modules.items():
            if sys.modules.get(name) is not module:
                found.append(f"the runner module {name} was replaced in sys.modules")
        for name, module in list(sys.modules.items()):
            if name.split(".", 1)[0] in RUNNER_PACKAGES:
                path = getattr(module, "__file__", None)
                if path and not self._from_image(path):
                    found.append(f"the runner module {name} was loaded from {path}, not from the image")
        for dotted, ident in self.identities.items():
            now = _lookup(dotted)
            # pytest's own plugins replace some of these at configure time (legacypath patches Config): a
            # replacement is tampering when its code does not come from the image.
            if id(now) != ident and not self._from_image(_origin(now)):
                found.append(
                    f"{dotted} was replaced while the tests ran (by code from {_origin(now) or 'nowhere'})"
                )
        if self.config is not None:
            found += self._hooks()
        for finding in found:
            if finding not in self.findings:
                self.findings.append(finding)

    def _hooks(self) -> list[str]:
        found = []
        pm = self.config.pluginmanager
        for hook_name in sorted(vars(pm.hook)):
            caller = getattr(pm.hook, hook_name)
            for impl in getattr(caller, "get_hookimpls", lambda: [])():
                fn = inspect.unwrap(impl.function)
                code = getattr(fn, "__code__", None) or getattr(getattr(fn, "func", None), "__code__", None)
                path = getattr(code, "co_filename", None)
                where = f"{hook_name} of plugin {impl.plugin_name!r}"
                if not path or path.startswith("<"):
                    found.append(f"hook {where} has no source file ({path or type(fn).__name__})")
                elif os.path.realpath(path) in self.agent_files or (
                    path.startswith(self.work_tree) and not os.path.exists(path)
                ):
                    found.append(f"hook {where} is defined in {path}, which the agent's patch changed")
        return found

    def write(self, path: str) -> None:
        with open(path, "w") as fh:
            json.dump({"findings": self.findings, "checked": self.checked}, fh, indent=1)


def main(argv: list[str]) -> int:
    image_dirs = [p for p in sys.path if p and os.path.isdir(p)]
    roots = json.loads(os.environ.pop("PBENCH_IMPORT_ROOTS", "[]"))
    pythonpath = os.environ.pop("PBENCH_PYTHONPATH", "")
    allowed = os.environ.pop("PBENCH_PYTEST_PLUGINS", "")
    audit_path = os.environ.pop("PBENCH_AUDIT", "")
    work_tree = os.environ.pop("PBENCH_WORK_TREE", "/work/repo")
    agent_files_json = os.environ.pop("PBENCH_AGENT_FILES_JSON", "")
    agent_files = []
    if agent_files_json:
        with open(agent_files_json) as fh:
            agent_files = json.load(fh)
    for package in RUNNER_PACKAGES:
        _preimport(package)
    plugins = [ep for ep in importlib.metadata.entry_points(group="pytest11")]
    if allowed:
        names = set(json.loads(allowed))
        plugins = [ep for ep in plugins if ep.name in names]
    plugins = list({ep.name: ep for ep in plugins}.values())
    for ep in plugins:
        # A plugin that cannot load: pytest reports it when it loads it by name, as a plain run would.
        with contextlib.suppress(Exception):
            importlib.import_module(ep.module)
    import pytest

    audit = Audit(image_dirs, {ep.module for ep in plugins}, work_tree, agent_files)
    # As `python -m pytest` would have it, from here on: the working directory and PYTHONPATH first.
    sys.path[:0] = [os.getcwd(), *roots]
    if pythonpath:
        os.environ["PYTHONPATH"] = pythonpath
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    args = list(argv)
    for ep in plugins:
        args += ["-p", ep.name]
    try:
        code = pytest.main(args, plugins=[audit])
    finally:
        audit.check("after pytest returned")
        if audit_path:
            audit.write(audit_path)
    return int(code)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
