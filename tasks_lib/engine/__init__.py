"""The execution engine shared by curation and evaluation: run one side's tests for one task.

"Different inputs, same machine": extraction and scoring both call `run_tests(RunRequest) -> RunResult` with a
commit and an ordered list of patches. Per call: the environment image for the (patched) dependency files, a
private network without a route out, the services the source needs, and a test container in which the
harness's runner applies the patches, protects the tree, runs the prestart steps and the tests.

Public steps, for the benchmarks and for whoever wants to run a part by hand: `env_images` (images of a run),
`Stack` (its Docker objects), `services.start_services` / `services.wait_for_postgres` /
`services.wait_for_http`, `jobs.backend_job` / `jobs.serve_job` / `jobs.frontend_job` / `jobs.archive`
(what a container is given), `runners.get(name).read` (reading what it left; the test runners' registry),
`staging.stage` (a run made ahead, taken over by `run_tests` of an equal request).
"""

from __future__ import annotations

import os

from tasks_lib.core import docker_client
from tasks_lib.core.constants import LABEL, LABEL_OWNER, Blame
from tasks_lib.engine import jobs, results, services, staging
from tasks_lib.engine.records import (
    DB_ALIAS,
    OUTPUT_CAP_BYTES,
    PINNED_ENV,
    PatchInput,
    RunRequest,
    RunResult,
)
from tasks_lib.engine.run import env_images, finish, run_tests
from tasks_lib.engine.stack import Stack, extract_out, tar

__all__ = [
    "DB_ALIAS",
    "OUTPUT_CAP_BYTES",
    "PINNED_ENV",
    "Blame",
    "PatchInput",
    "RunRequest",
    "RunResult",
    "Stack",
    "cleanup_leftovers",
    "env_images",
    "extract_out",
    "finish",
    "jobs",
    "results",
    "run_tests",
    "services",
    "staging",
    "tar",
]


def cleanup_leftovers(all_owners: bool = False) -> dict[str, int]:
    """Remove the containers, networks and volumes left by a crash: this owner's (PBENCH_OWNER, default
    "pbench"), or every owner's with `all_owners` (a test session or another user may be running now)."""
    client = docker_client.get()
    owner = os.environ.get("PBENCH_OWNER", "pbench")
    flt = {"label": LABEL} if all_owners else {"label": f"{LABEL_OWNER}={owner}"}
    counts = {"containers": 0, "networks": 0, "volumes": 0}
    for c in client.containers.list(all=True, filters=flt):
        c.remove(force=True, v=True)
        counts["containers"] += 1
    for n in client.networks.list(filters=flt):
        n.remove()
        counts["networks"] += 1
    for v in client.volumes.list(filters=flt):
        v.remove(force=True)
        counts["volumes"] += 1
    return counts
