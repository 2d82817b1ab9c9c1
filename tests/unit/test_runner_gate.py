"""The in-container runner's gate, run on the host: a job with "await_gate" runs none of the repository's code
until the host writes the gate (the services answer), and its phase says where it waited (a run stopped
there is the harness's, never the patch's)."""

from __future__ import annotations

import importlib
import sys
import threading

import pytest

from tasks_lib import globs, jsonc, paths
from tasks_lib.engine import results


@pytest.fixture
def runner(monkeypatch, tmp_path):
    sys.modules.setdefault("pbench_globs", globs)
    sys.modules.setdefault("pbench_jsonc", jsonc)
    monkeypatch.syspath_prepend(str(paths.containers_dir() / "runner"))
    module = importlib.import_module("pbench_runner")
    (tmp_path / "in").mkdir()
    (tmp_path / "out").mkdir()
    monkeypatch.setattr(module, "GATE", tmp_path / "in" / "gate")
    monkeypatch.setattr(module, "OUT", tmp_path / "out")
    return module


def test_a_job_that_awaits_the_gate_waits_until_the_host_opens_it(runner, tmp_path):
    run_ = runner.Run({"repo_dir": str(tmp_path), "await_gate": True})
    waiter = threading.Thread(target=run_.await_gate)
    waiter.start()
    waiter.join(timeout=0.5)
    assert waiter.is_alive()  # no gate, no going on
    assert results.last_phase(tmp_path / "out") == "services"
    assert results.blame_for_stop(tmp_path / "out") == "harness"  # stopped here: the patch's code never ran
    (tmp_path / "in" / "gate").write_bytes(b"")
    waiter.join(timeout=10)
    assert not waiter.is_alive()
    assert run_.timings["gate_wait_s"] > 0


def test_a_job_without_services_has_no_gate(runner, tmp_path):
    run_ = runner.Run({"repo_dir": str(tmp_path)})
    run_.await_gate()  # returns at once: nothing to wait for
    assert "gate_wait_s" not in run_.timings
    assert not (tmp_path / "out" / "phase").exists()
