"""Docker slots outside Prefect: a command that runs no flow (`pbench score`, `run-tests`) must not pay for
importing Prefect (about 2 s) only to learn that it is not in a flow run (docs/performance.md)."""

from __future__ import annotations

import subprocess
import sys


def test_docker_slot_outside_a_flow_does_not_import_prefect():
    code = (
        "import sys\n"
        "from tasks_lib import limits\n"
        "with limits.docker_slot():\n"
        "    pass\n"
        "limits.github_call()\n"
        "assert 'prefect' not in sys.modules, 'prefect was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_a_process_with_prefect_but_no_run_is_not_in_a_run():
    import prefect  # noqa: F401  (imported: the answer must come from Prefect's run context)

    from tasks_lib import limits

    assert limits._in_prefect_run() is False
