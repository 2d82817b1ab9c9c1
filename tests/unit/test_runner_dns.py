"""The sandbox's resolver (containers/runner/pbench_dns.py), run on the host on a free port: every query gets
SERVFAIL at once, with its id and question, so that a name outside the task's network fails as it did (glibc's
"Temporary failure in name resolution") without the 10-s wait of an unanswered forward."""

from __future__ import annotations

import importlib
import socket
import struct
import time

import pytest

from tasks_lib.core import paths


@pytest.fixture
def dns(monkeypatch):
    monkeypatch.syspath_prepend(str(paths.containers_dir() / "runner"))
    return importlib.import_module("pbench_dns")


def _query(ident: int, name: str, flags: int = 0x0100) -> bytes:
    question = (
        b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0" + struct.pack(">HH", 1, 1)
    )
    return struct.pack(">HHHHHH", ident, flags, 1, 0, 0, 0) + question


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_every_query_gets_servfail_with_its_id_and_question(dns):
    query = _query(0xBEEF, "smtp.example.com")
    reply = dns.answer(query)
    ident, flags, qd, an, ns, ar = struct.unpack(">HHHHHH", reply[:12])
    assert ident == 0xBEEF
    assert flags & 0x8000, "a response"
    assert flags & 0x0100, "recursion desired, as asked"
    assert flags & 0x000F == dns.SERVFAIL
    assert (qd, an, ns, ar) == (1, 0, 0, 0)
    assert reply[12:] == query[12:]


def test_what_is_not_a_query_gets_no_answer(dns):
    assert dns.answer(b"\x00\x01") is None
    assert dns.answer(_query(7, "a.b", flags=0x8100)) is None  # a response


def test_the_server_answers_over_udp_at_once(dns):
    port = _free_udp_port()
    message = dns.start(("127.0.0.1", port))
    assert "SERVFAIL" in message
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as client:
        client.settimeout(2)
        start = time.monotonic()
        client.sendto(_query(1, "pypi.org"), ("127.0.0.1", port))
        reply, _ = client.recvfrom(4096)
        assert time.monotonic() - start < 1
        client.sendto(b"junk", ("127.0.0.1", port))  # ignored; the server goes on
        client.sendto(_query(2, "db"), ("127.0.0.1", port))
        second, _ = client.recvfrom(4096)
    assert struct.unpack(">H", reply[:2])[0] == 1 and struct.unpack(">H", second[:2])[0] == 2


def test_a_port_already_taken_is_reported_not_raised(dns):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as taken:
        taken.bind(("127.0.0.1", 0))
        message = dns.start(taken.getsockname())
    assert message.startswith("pbench: no resolver")


def test_the_server_answers_over_tcp_too(dns):
    port = _free_udp_port()
    assert "UDP and TCP" in dns.start(("127.0.0.1", port))
    with socket.create_connection(("127.0.0.1", port), timeout=2) as conn:
        for ident in (5, 6):  # two queries on one connection
            query = _query(ident, "smtp.example.com")
            conn.sendall(struct.pack(">H", len(query)) + query)
            size = struct.unpack(">H", conn.recv(2))[0]
            reply = conn.recv(size)
            assert struct.unpack(">H", reply[:2])[0] == ident
            assert struct.unpack(">H", reply[2:4])[0] & 0x000F == dns.SERVFAIL


def test_a_silent_tcp_client_does_not_hold_the_server(dns):
    port = _free_udp_port()
    dns.start(("127.0.0.1", port))
    with socket.create_connection(("127.0.0.1", port), timeout=5) as silent:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
            query = _query(9, "pypi.org")
            conn.sendall(struct.pack(">H", len(query)) + query)
            start = time.monotonic()
            assert conn.recv(2)  # answered once the silent one is dropped (TCP_IDLE_S)
            assert time.monotonic() - start < dns.TCP_IDLE_S + 1.5
        assert silent.recv(1) == b""  # closed by the server
