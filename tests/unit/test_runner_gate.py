"""The in-container runner's gate, run on the host against local servers: a job that awaits services runs none
of the repository's code until they answer the runner itself (containers/runner/pbench_await.py: Postgres as
pg_isready judges it, a server by an HTTP status below 500), and its phase says where it waited (a run stopped
there is the harness's, never the patch's)."""

from __future__ import annotations

import http.server
import importlib
import socket
import socketserver
import struct
import sys
import threading
import time

import pytest

from tasks_lib import protocol
from tasks_lib.core import paths
from tasks_lib.engine import results


@pytest.fixture
def runner(monkeypatch, tmp_path):
    for module, name in protocol.SHIPPED.items():  # the protocol's modules under their shipped names
        shipped = importlib.import_module(f"tasks_lib.protocol.{module.removesuffix('.py')}")
        sys.modules.setdefault(name.removesuffix(".py"), shipped)
    monkeypatch.syspath_prepend(str(paths.containers_dir() / "runner"))
    module = importlib.import_module("pbench_runner")
    (tmp_path / "out").mkdir()
    monkeypatch.setattr(module, "OUT", tmp_path / "out")
    return module


def _error(sqlstate: str, message: str) -> bytes:
    fields = b"SFATAL\0C" + sqlstate.encode() + b"\0M" + message.encode() + b"\0\0"
    return b"E" + struct.pack("!I", len(fields) + 4) + fields


AUTH_SASL = b"R" + struct.pack("!II", 23, 10) + b"SCRAM-SHA-256\0\0"
STARTING_UP = _error("57P03", "the database system is starting up")


class FakePostgres(socketserver.ThreadingTCPServer):
    """Answers a startup message with the next of `replies` (the last one forever), recording what it got."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, replies: list[bytes]):
        self.replies, self.startups = list(replies), []

        class Handler(socketserver.BaseRequestHandler):
            def handle(inner):
                (length,) = struct.unpack("!I", inner.request.recv(4))
                self.startups.append(inner.request.recv(length - 4))
                reply = self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]
                inner.request.sendall(reply)

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def port(self) -> int:
        return self.server_address[1]


@pytest.fixture
def fake_postgres():
    servers = []

    def make(replies):
        servers.append(FakePostgres(replies))
        return servers[-1]

    yield make
    for s in servers:
        s.shutdown()
        s.server_close()


def test_postgres_is_ready_when_it_asks_for_authentication_not_while_it_starts(runner, fake_postgres):
    import pbench_await

    server = fake_postgres([STARTING_UP, STARTING_UP, AUTH_SASL])
    assert not pbench_await.postgres_ready("127.0.0.1", server.port, "app", "appdb")
    assert not pbench_await.postgres_ready("127.0.0.1", server.port, "app", "appdb")
    assert pbench_await.postgres_ready("127.0.0.1", server.port, "app", "appdb")
    # A protocol 3.0 startup message naming the service's user and database, as libpq's would.
    assert server.startups[0] == struct.pack("!I", 196608) + b"user\0app\0database\0appdb\0\0"
    # Any other error is an answer too (pg_isready: "accepting connections"), e.g. a wrong database.
    other = fake_postgres([_error("3D000", 'database "x" does not exist')])
    assert pbench_await.postgres_ready("127.0.0.1", other.port, "app", "x")


def test_postgres_not_listening_or_not_speaking_is_not_ready(runner, fake_postgres):
    import pbench_await

    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    assert not pbench_await.postgres_ready("127.0.0.1", port, "app", "appdb")  # refused
    assert not pbench_await.postgres_ready("no-such-host.invalid", 5432, "app", "appdb")  # not resolvable
    assert not pbench_await.postgres_ready("127.0.0.1", fake_postgres([b""]).port, "app", "appdb")  # closed


def test_a_job_that_awaits_postgres_waits_until_it_answers(runner, tmp_path, fake_postgres):
    server = fake_postgres([STARTING_UP])
    probe = {"kind": "postgres", "host": "127.0.0.1", "port": server.port, "user": "app", "db": "appdb"}
    run_ = runner.Run({"repo_dir": str(tmp_path), "await": [probe]})
    waiter = threading.Thread(target=run_.await_gate)
    waiter.start()
    waiter.join(timeout=0.5)
    assert waiter.is_alive()  # still starting up: no going on
    assert len(server.startups) > 3  # asked again and again meanwhile
    assert results.last_phase(tmp_path / "out") == "services"
    assert results.blame_for_stop(tmp_path / "out") == "harness"  # stopped here: the patch's code never ran
    server.replies = [AUTH_SASL]
    waiter.join(timeout=10)
    assert not waiter.is_alive()
    assert run_.timings["gate_wait_s"] >= 0.5


def test_a_lookup_left_unanswered_is_given_up_and_asked_again(runner, monkeypatch, fake_postgres):
    """The container starts before the service's does: Docker's embedded DNS leaves a name it does not know yet
    unanswered (a lookup gives up after 10 s), so the probe bounds each lookup and asks again; the first one
    after the name is known answers."""
    import pbench_await

    server = fake_postgres([AUTH_SASL])
    known = threading.Event()
    real = socket.getaddrinfo
    hanging: list[str] = []

    def getaddrinfo(host, port, *args, **kwargs):
        if host != "db":
            return real(host, port, *args, **kwargs)
        if not known.is_set():
            hanging.append(host)
            known.wait(30)  # unanswered until long after the name is known
            time.sleep(30)
        return real("127.0.0.1", port, *args, **kwargs)

    monkeypatch.setattr(pbench_await.socket, "getaddrinfo", getaddrinfo)
    probe = {"kind": "postgres", "host": "db", "port": server.port, "user": "app", "db": "appdb"}
    assert not pbench_await.ready(probe)
    assert not pbench_await.ready(probe) and len(hanging) == 2  # each try asks again
    known.set()
    waiter = threading.Thread(target=pbench_await.wait_for, args=([probe],))
    waiter.start()
    waiter.join(timeout=5)
    assert not waiter.is_alive()  # answered, though the lookups made before are still hanging
    assert len(server.startups) == 1
    http_probe = {"kind": "http", "url": f"http://db:{server.port}/"}
    known.clear()
    assert not pbench_await.ready(http_probe)  # the same bound before an HTTP probe


def test_lookups_still_hanging_are_bounded(runner, monkeypatch):
    import pbench_await

    release = threading.Event()
    calls: list[str] = []

    def getaddrinfo(host, port, *args, **kwargs):
        calls.append(host)
        release.wait(30)
        raise socket.gaierror(-3, "Temporary failure in name resolution")

    monkeypatch.setattr(pbench_await.socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setattr(pbench_await, "MAX_LOOKUPS", 3)
    monkeypatch.setattr(pbench_await, "_lookups", [])
    try:
        for _ in range(5):
            assert pbench_await.resolve("db", 5432, wait=0.01) is None
        assert len(calls) == 3  # no more threads than the bound while the first ones hang
    finally:
        release.set()


class _Status(http.server.BaseHTTPRequestHandler):
    codes: list[int] = []

    def do_GET(self):
        code = self.codes.pop(0) if len(self.codes) > 1 else self.codes[0]
        self.send_response(code)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_a_server_is_ready_on_any_status_below_500(runner):
    import pbench_await

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Status)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/"
        _Status.codes = [503, 502, 404]
        assert not pbench_await.http_ready(url)
        assert not pbench_await.http_ready(url)
        assert pbench_await.http_ready(url)  # e.g. FastAPI's 404 on "/": it answers
        _Status.codes = [500, 200]
        naps: list[float] = []
        pbench_await.wait_for([{"kind": "http", "url": url}], sleep=naps.append)
        assert naps == [0.1]  # one failed try, then an answer
    finally:
        server.shutdown()
        server.server_close()


def test_a_job_without_services_has_no_gate(runner, tmp_path):
    run_ = runner.Run({"repo_dir": str(tmp_path), "await": []})
    run_.await_gate()  # returns at once: nothing to wait for
    assert "gate_wait_s" not in run_.timings
    assert not (tmp_path / "out" / "phase").exists()


def test_a_frontend_run_without_prestart_starts_its_dev_server_before_the_gate(runner, monkeypatch, tmp_path):
    """Nothing the gate waits for changes what the dev server serves when there are no prestart steps: it starts
    at once, and from then on the repository's code runs, so a run stopped at the gate is the patch's."""
    import pbench_frontend

    started: list[str] = []
    monkeypatch.setattr(
        pbench_frontend, "start_servers", lambda run, out: started.append("servers") or ([], None)
    )
    monkeypatch.setattr(runner.pbench_await, "wait_for", lambda probes: started.append("gate passed"))
    probe = {"kind": "http", "url": "http://backend:8000/"}
    job = {"repo_dir": str(tmp_path), "await": [probe], "test": {"runner": "playwright"}, "prestart": []}
    run_ = runner.Run(job)
    run_.serve_early()
    run_.await_gate()
    assert started == ["servers", "gate passed"] and run_.servers == ([], None)
    assert results.last_phase(tmp_path / "out") == "serving"
    assert results.blame_for_stop(tmp_path / "out") == "patch"

    (tmp_path / "out" / "phase").unlink()
    started.clear()
    for later in (
        {
            **job,
            "prestart": ["npm run generate-client"],
        },  # it may change the tree: the server starts after it
        {**job, "test": {"runner": "pytest"}},
    ):
        run_ = runner.Run(later)
        run_.serve_early()
        run_.await_gate()
        assert run_.servers is None and results.last_phase(tmp_path / "out") == "services"
    assert started == ["gate passed", "gate passed"]
