"""The Postgres service of a run, against the real Docker engine: what the tests of a task see must not depend on
how the cluster was made (copied from the image's template for the user "postgres", or initdb at start for any
other user): a UTF-8 cluster with the C.UTF-8 locale, the service's user as a superuser that logs in with its
password over TCP (and not without it), and the service's database."""

from __future__ import annotations

import dataclasses
import time
import uuid

import pytest

from tasks_lib import engine
from tasks_lib.core import docker_client, paths
from tasks_lib.core.config import Settings

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def _with_service(source, **changes):
    service = dataclasses.replace(source.backend.services[0], **changes)
    return dataclasses.replace(source, backend=dataclasses.replace(source.backend, services=(service,)))


def _psql(container, service, sql: str, password: str) -> tuple[int, str]:
    code, out = container.exec_run(
        [
            "psql",
            "-h",
            "127.0.0.1",
            "-U",
            service.user,
            "-d",
            service.db,
            "-tA",
            "-v",
            "ON_ERROR_STOP=1",
            "-c",
            sql,
        ],
        environment={"PGPASSWORD": password},
    )
    return code, out.decode(errors="replace").strip()


@pytest.mark.parametrize(
    "changes",
    [
        {},  # the demo's service: user "postgres" (the image's template cluster)
        {"password": 'it\'s "quoted" $x', "db": "Other-DB"},  # the template, with quoting to get right
        {"user": "app_owner", "password": 'it\'s "quoted"', "db": "other_db"},  # initdb at start
    ],
    ids=["template-user", "template-user-quoting", "other-user"],
)
def test_service_cluster_is_the_same_whichever_way_it_was_made(demo_source, base_images, changes):
    source = _with_service(demo_source, **changes)
    service = source.backend.services[0]
    client = docker_client.get()
    stack = engine.Stack(client, "pgtest" + uuid.uuid4().hex[:8])
    try:
        stack.create_network()
        env = engine.services.start_services(stack, source, Settings.from_env(), time.monotonic() + 120)
        assert env["POSTGRES_SERVER"] == engine.DB_ALIAS and env["POSTGRES_DB"] == service.db
        pg = stack.containers[0]
        code, out = _psql(
            pg,
            service,
            "SELECT current_user, current_database(), r.rolsuper, pg_encoding_to_char(d.encoding), "
            "d.datcollate, d.datctype FROM pg_roles r, pg_database d "
            "WHERE r.rolname = current_user AND d.datname = current_database()",
            service.password,
        )
        assert code == 0, out
        assert out.split("|") == [service.user, service.db, "t", "UTF8", "C.UTF-8", "C.UTF-8"]
        code, out = _psql(pg, service, "SELECT 1", "not-the-password")
        assert code != 0 and "password authentication failed" in out
        # Reachable by its alias from another container of the private network, as the tests reach it.
        probe = client.containers.run(
            pg.image.id,
            entrypoint=["pg_isready", "-h", engine.DB_ALIAS, "-U", service.user, "-d", service.db],
            network=stack.network.name,
            labels=stack.labels,
            remove=True,
        )
        assert b"accepting connections" in probe
        # The runner's own gate (pbench_await, no libpq) says the same of it from the private network.
        code = (paths.containers_dir() / "runner" / "pbench_await.py").read_text() + (
            f"\nprint(postgres_ready({engine.DB_ALIAS!r}, 5432, {service.user!r}, {service.db!r}),"
            f" postgres_ready({engine.DB_ALIAS!r}, 5433, {service.user!r}, {service.db!r}))"
        )
        answer = client.containers.run(
            pg.image.id,
            entrypoint=["python3", "-I", "-c", code],
            network=stack.network.name,
            labels=stack.labels,
            remove=True,
        )
        assert answer.split() == [b"True", b"False"]  # the service's port answers; nothing else does
    finally:
        stack.close()
