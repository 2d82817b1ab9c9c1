"""Docker slots outside Prefect: a command that runs no flow (`pbench score`, `run-tests`) must not pay for
importing Prefect (about 2 s) only to learn that it is not in a flow run (docs/performance.md)."""

from __future__ import annotations

import subprocess
import sys


def test_docker_slot_outside_a_flow_does_not_import_prefect():
    code = (
        "import sys\n"
        "from tasks_lib.core import limits\n"
        "with limits.docker_slot():\n"
        "    pass\n"
        "limits.github_call()\n"
        "assert 'prefect' not in sys.modules, 'prefect was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_a_process_with_prefect_but_no_run_is_not_in_a_run():
    import prefect  # noqa: F401  (imported: the answer must come from Prefect's run context)

    from tasks_lib.core import limits

    assert limits._in_prefect_run() is False


def _in_run(monkeypatch, tmp_path, slots: int):
    from tasks_lib.core import limits

    monkeypatch.setenv("PBENCH_SLOTS_DIR", str(tmp_path))
    monkeypatch.setattr(limits, "_in_prefect_run", lambda: True)
    limits.set_docker_slots(slots)
    return limits


def test_threads_of_one_process_never_hold_more_slots_than_the_host_has(monkeypatch, tmp_path):
    import threading

    limits = _in_run(monkeypatch, tmp_path, 2)
    monkeypatch.setattr(limits, "_POLL_S", 0.01)
    lock, now, peak = threading.Lock(), [0], [0]

    def work():
        with limits.docker_slot("t"):
            with lock:
                now[0] += 1
                peak[0] = max(peak[0], now[0])
            threading.Event().wait(0.05)
            with lock:
                now[0] -= 1

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert peak[0] == 2
    assert limits.slots_in_use() == 0


def test_a_slot_held_by_a_killed_process_is_free_again(monkeypatch, tmp_path):
    """What a Prefect concurrency limit could not do: a run killed with its slot (SIGKILL, a crashed ephemeral
    server) left it taken for good, and every later run of the host had one stack fewer."""
    import os
    import signal

    limits = _in_run(monkeypatch, tmp_path, 1)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from tasks_lib.core import limits\n"
            "limits._in_prefect_run = lambda: True\n"
            "with limits.docker_slot('holder'):\n"
            "    print('held', flush=True)\n"
            "    time.sleep(600)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PBENCH_SLOTS_DIR": str(tmp_path)},
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        assert limits.slots_in_use() == 1
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
        assert limits.slots_in_use() == 0
        with limits.docker_slot("next"):
            assert limits.slots_in_use() == 1
    finally:
        holder.kill()
        holder.stdout.close()


def test_a_waiting_run_stops_when_a_stop_is_asked(monkeypatch, tmp_path):
    import pytest

    from tasks_lib.core import stopping

    limits = _in_run(monkeypatch, tmp_path, 1)
    with limits.docker_slot("first"):
        stopping.request_stop()
        try:
            with pytest.raises(stopping.Interrupted), limits.docker_slot("second"):
                pass
        finally:
            stopping.reset()


def test_bad_slot_counts_are_refused_and_an_unreadable_limit_falls_back(monkeypatch, tmp_path):
    import pytest

    limits = _in_run(monkeypatch, tmp_path, 3)
    assert limits.docker_slots() == 3
    with pytest.raises(ValueError, match="at least 1"):
        limits.set_docker_slots(0)
    (limits.slots_dir() / "limit").write_text("lots\n")
    assert limits.docker_slots() == limits.DEFAULT_DOCKER_SLOTS
