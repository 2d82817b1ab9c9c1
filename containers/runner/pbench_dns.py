"""The sandbox's answer for names outside the task's network: "no such name here", at once. Stdlib only.

A run's containers sit on an internal Docker network. Docker's embedded DNS (127.0.0.11 in every container)
answers the names of the network's containers itself and forwards any other name to the container's
configured resolvers, which an internal network cannot reach: the forward is never answered, and glibc gives
up after its timeout and second attempt, 10 s later, with "Temporary failure in name resolution". The
template's backend suite spends 20 of its ~33 s there (measured here: `test_recovery_password` and
`test_create_user_new_email` send a mail to smtp.example.com, 10.2-10.9 s each in every run), and a Playwright
test whose backend sends a mail waits as long.

The harness creates its sandbox containers with 127.0.0.1 as their only resolver (`Stack.sandbox`), and the
runner answers on 127.0.0.1:53 before any code of the repository runs: every query it receives gets SERVFAIL,
which glibc turns into the same error as before ("Temporary failure in name resolution", EAI_AGAIN) in ~3 ms.
Nothing resolves that did not resolve before: the network's own names never reach this server, and no name
outside it gets an address. No capability is needed (Docker starts a container's network namespace with
ip_unprivileged_port_start=0); the port is taken before the repository's code starts, so that code cannot
take it (it could only ever answer its own container's lookups of outside names).

The overhead benchmark's bare container starts it too (`start()`), so that the bare command meets the same
network.
"""

from __future__ import annotations

import socket
import struct
import threading

from pbench_await import recv_exactly

ADDRESS = ("127.0.0.1", 53)
SERVFAIL = 2
TCP_IDLE_S = 1.0
_HEADER = struct.Struct(">HHHHHH")


def answer(query: bytes) -> bytes | None:
    """SERVFAIL for `query` (its id, opcode, question and RD flag kept), or None for what is not a query."""
    if len(query) < _HEADER.size:
        return None
    ident, flags, qdcount, _, _, _ = _HEADER.unpack_from(query)
    if flags & 0x8000:  # a response, not a query
        return None
    # QR=1, the query's opcode and RD, RA=1, RCODE=SERVFAIL; the question section echoed, no other records.
    reply_flags = 0x8000 | (flags & 0x7900) | 0x0080 | SERVFAIL
    return _HEADER.pack(ident, reply_flags, qdcount, 0, 0, 0) + query[_HEADER.size :]


def serve_udp(sock: socket.socket) -> None:
    while True:
        try:
            query, peer = sock.recvfrom(4096)
            reply = answer(query)
            if reply is not None:
                sock.sendto(reply, peer)
        except OSError:
            continue


def serve_tcp(sock: socket.socket) -> None:
    """DNS over TCP (a client that asks over TCP, or Docker's embedded DNS relaying such a query): each message
    is prefixed by its length. One connection at a time, each bounded by TCP_IDLE_S, so that no client can make
    this process start threads (they count against the container's pids limit)."""
    while True:
        try:
            conn, _ = sock.accept()
        except OSError:
            continue
        with conn:
            conn.settimeout(TCP_IDLE_S)
            try:
                while True:
                    size = recv_exactly(conn, 2)
                    reply = answer(recv_exactly(conn, struct.unpack(">H", size)[0]))
                    if reply is None:
                        break
                    conn.sendall(struct.pack(">H", len(reply)) + reply)
            except (OSError, ValueError):
                continue


def bind(address: tuple[str, int] = ADDRESS) -> tuple[socket.socket, socket.socket]:
    """The UDP and the TCP socket on `address` (port 0: the TCP socket takes the UDP one's port)."""
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(address)
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        tcp.bind(udp.getsockname())
        tcp.listen(16)
    except OSError:
        udp.close()
        tcp.close()
        raise
    return udp, tcp


def start(address: tuple[str, int] = ADDRESS) -> str:
    """Serve in daemon threads for the life of this process. Returns what happened, for the runner's log: a
    failure to bind leaves lookups of outside names as slow as before, nothing else."""
    try:
        udp, tcp = bind(address)
    except OSError as exc:
        return f"pbench: no resolver on {address[0]}:{address[1]} ({exc}): outside names time out"
    threading.Thread(target=serve_udp, args=(udp,), name="pbench-dns-udp", daemon=True).start()
    threading.Thread(target=serve_tcp, args=(tcp,), name="pbench-dns-tcp", daemon=True).start()
    host, port = udp.getsockname()
    return f"pbench: names outside the task's network get SERVFAIL from {host}:{port} (UDP and TCP)"
