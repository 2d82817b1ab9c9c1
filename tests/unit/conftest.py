"""Fixtures of the unit tests."""

from __future__ import annotations

import importlib
import sys

import pytest


@pytest.fixture(scope="module")
def runner_import():
    """Import modules of the in-container runner as the container has them: containers/runner on sys.path,
    the protocol's modules under the names they are shipped as (tasks_lib/protocol: pbench_protocol, ...)."""
    from tasks_lib import protocol
    from tasks_lib.core import paths

    for module, name in protocol.SHIPPED.items():
        shipped = importlib.import_module(f"tasks_lib.protocol.{module.removesuffix('.py')}")
        sys.modules.setdefault(name.removesuffix(".py"), shipped)
    folder = str(paths.containers_dir() / "runner")
    sys.path.insert(0, folder)
    try:
        yield importlib.import_module
    finally:
        sys.path.remove(folder)
