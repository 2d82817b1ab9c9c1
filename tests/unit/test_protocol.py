"""The host <-> runner protocol (tasks_lib/protocol): one definition of the job, the result, the statuses, the
phases and the output cap, used on both sides of the container wall and shipped as the container has it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tasks_lib import protocol
from tasks_lib.core.constants import RunStatus
from tasks_lib.engine import jobs, records, results
from tasks_lib.protocol import wire


def test_every_status_the_runner_writes_is_one_the_host_reads():
    """Rule: a runner status the host did not know would be an unexpected ValueError after a real run."""
    for status in wire.RunnerStatus:
        if status == wire.RunnerStatus.SERVING:  # the backend-serve container's, while its server runs
            continue
        assert results._RUNNER_STATUS.get(status) or RunStatus(status.value)


def test_the_host_and_the_runner_share_one_output_cap_and_one_set_of_phases():
    assert records.OUTPUT_CAP_BYTES == wire.OUTPUT_CAP_BYTES
    assert set(results.PATCH_PHASES) <= set(wire.Phase)


def test_the_protocol_ships_as_flat_files_the_runner_imports_with_the_images_python(tmp_path):
    """Rule: what the container gets is importable there: every shipped file of /pbench/tools, with the
    standard library only (an isolated interpreter, nothing of the project or of a venv on its path); the
    pytest launcher runs in the test environment's interpreter and is left out."""
    files = jobs.tool_files(frontend=True)
    for module, name in protocol.SHIPPED.items():
        assert name in files, f"{module} is not shipped as {name}"
    tools = tmp_path / "tools"
    tools.mkdir()
    for name, data in files.items():
        (tools / name).write_bytes(data)
    modules = sorted(n.removesuffix(".py") for n in files if n.endswith(".py") and n != "pbench_pytest.py")
    code = f"import sys; sys.path.insert(0, {str(tools)!r}); " + "; ".join(f"import {m}" for m in modules)
    python = "/usr/bin/python3" if sys.platform == "linux" else sys.executable
    done = subprocess.run([python, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_result_and_the_phase_read_back_as_written(tmp_path):
    wire.write_result(tmp_path, {"status": wire.RunnerStatus.COMPLETED, "test": {"exit_code": 0}})
    assert wire.read_result(tmp_path) == {"status": "completed", "test": {"exit_code": 0}}
    assert wire.read_result(tmp_path / "none") is None
    (tmp_path / wire.PHASE_FILE).write_text(f"{wire.Phase.PATCHES} 1.0\n{wire.Phase.TESTS} 2.0\n")
    assert wire.last_phase(tmp_path) == wire.Phase.TESTS


def test_each_test_runner_is_one_entry_on_each_side_of_the_wall(runner_import):
    """Rule: a runner a source record may name has its host entry (reader, witness rule, tooling), its
    function in the container's dispatch table and its witness planner: adding one touches these three."""
    from tasks_lib.engine import runners
    from tasks_lib.sources import record

    container = runner_import("pbench_runner")
    witness = runner_import("pbench_witness")
    assert tuple(runners.REGISTRY) == wire.TEST_RUNNERS == record.TEST_RUNNERS
    assert tuple(container.TEST_RUNNERS) == wire.TEST_RUNNERS
    assert tuple(container.WITNESS_PLANS) == wire.TEST_RUNNERS
    assert all(callable(getattr(witness, name)) for name in container.WITNESS_PLANS.values())
    assert wire.SERVE not in wire.TEST_RUNNERS
    with pytest.raises(ValueError, match="no test runner 'vitest' \\(known: pytest, playwright\\)"):
        runners.get("vitest")
