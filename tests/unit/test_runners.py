"""What the flows' in-process runs change of Prefect's settings, and only while they run."""

from __future__ import annotations

from prefect import flow
from prefect.flow_engine import FlowRunEngine
from prefect.settings import get_current_settings

from flows.runners import without_heartbeats


@flow
def _noop() -> None:
    return None


def test_an_in_process_flow_run_sends_no_heartbeats_and_the_setting_comes_back():
    before = get_current_settings().flows.heartbeat_frequency
    assert FlowRunEngine(flow=_noop).heartbeat_seconds is not None  # Prefect's default: a heartbeat thread
    with without_heartbeats():
        assert FlowRunEngine(flow=_noop).heartbeat_seconds is None  # the engine starts no heartbeat thread
    assert get_current_settings().flows.heartbeat_frequency == before


def test_the_setting_comes_back_when_the_flow_raises():
    before = get_current_settings().flows.heartbeat_frequency
    try:
        with without_heartbeats():
            raise RuntimeError("a flow that failed")
    except RuntimeError:
        pass
    assert get_current_settings().flows.heartbeat_frequency == before
