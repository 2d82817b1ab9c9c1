"""The harness's pytest launcher: the runner and its plugins load from the image only, then the code under test.

Started by the in-container runner as the test user, with the test environment's interpreter:

    /opt/venv/bin/python -P -s /pbench/tools/pbench_pytest.py [pytest arguments]

`-P` keeps the working directory off `sys.path`, `-s` the user site, and the runner takes PYTHONPATH out of the
environment: while pytest, pluggy and the plugins import, only the image's directories are on `sys.path`.
Then the repository's import roots go in front (as `python -m pytest` would have put them) and pytest runs
with plugin autoloading off, loading by name exactly the entry points found in the image (or the subset the
runner allows, when the patch changed the lock). Before any code of the repository runs, the audit
(pbench_audit.py) opens the evidence channel the runner gave this process, captures what the runner is made
of, and installs an audit hook; its findings and every test report leave through the channel as they happen.
Code in the same process can still lie to all of this; the witnesses the runner wrote into the hidden test
files and the static check are the out-of-band evidence (docs/reliability.md).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import json
import os
import pkgutil
import sys

# The launcher's own folder (/pbench/tools, root's) only for this import: -P left it off sys.path.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pbench_audit import RUNNER_PACKAGES, Audit, Channel, ImageSnapshot, References  # noqa: E402

del sys.path[0]


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


def _read_json(path: str, default):
    if not path:
        return default
    with open(path) as fh:
        return json.load(fh)


def main(argv: list[str]) -> int:
    # Nothing of the repository has run yet: the evidence channel first (its S message says so).
    fd = os.environ.pop("PBENCH_EVIDENCE_FD", "")
    channel = Channel(int(fd) if fd else None)
    channel.send("S", str(os.getpid()))
    sys.dont_write_bytecode = True
    image_dirs = [p for p in sys.path if p and os.path.isdir(p)]
    roots = json.loads(os.environ.pop("PBENCH_IMPORT_ROOTS", "[]"))
    pythonpath = os.environ.pop("PBENCH_PYTHONPATH", "")
    allowed = os.environ.pop("PBENCH_PYTEST_PLUGINS", "")
    work_tree = os.environ.pop("PBENCH_WORK_TREE", "/work/repo")
    agent_files = _read_json(os.environ.pop("PBENCH_AGENT_FILES_JSON", ""), [])
    protected = _read_json(os.environ.pop("PBENCH_PROTECTED_JSON", ""), [])
    references = References(os.environ.pop("PBENCH_REFS_DIR", None), os.environ.pop("PBENCH_REFS_PID", None))
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
    from _pytest.assertion.rewrite import _rewrite_test

    plugin_modules = {ep.module for ep in plugins}
    image_modules = [
        m
        for name, m in list(sys.modules.items())
        if m is not None and (name.split(".", 1)[0] in RUNNER_PACKAGES or name in plugin_modules)
    ]
    audit = Audit(
        channel=channel,
        snapshot=ImageSnapshot(image_modules),
        image_dirs=image_dirs,
        work_tree=work_tree,
        agent_files=agent_files,
        protected=protected,
        plugins=plugin_modules,
        rewrite=_rewrite_test,
        references=references,
    )
    sys.addaudithook(audit.on_event)  # permanent: no code of the process can remove it
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
        channel.send("E", str(channel.sent))
    return int(code)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
