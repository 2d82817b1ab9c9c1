"""Fixtures of the unit tests."""

from __future__ import annotations

import importlib
import sys

import pytest


@pytest.fixture(scope="module")
def runner_import():
    """Import modules of the in-container runner as the container has them: containers/runner on sys.path,
    the host modules it ships under other names (pbench_globs, pbench_jsonc) in place."""
    from tasks_lib.core import globs, paths
    from tasks_lib.formats import jsonc

    sys.modules.setdefault("pbench_globs", globs)
    sys.modules.setdefault("pbench_jsonc", jsonc)
    folder = str(paths.containers_dir() / "runner")
    sys.path.insert(0, folder)
    try:
        yield importlib.import_module
    finally:
        sys.path.remove(folder)
