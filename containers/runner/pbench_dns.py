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

Run as a script (`python3 pbench_dns.py`) it serves in the foreground (the overhead benchmark's bare
container uses it that way, so that the bare command meets the same network).
"""

from __future__ import annotations

import socket
import struct
import sys
import threading

ADDRESS = ("127.0.0.1", 53)
SERVFAIL = 2
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


def serve(sock: socket.socket) -> None:
    while True:
        try:
            query, peer = sock.recvfrom(4096)
            reply = answer(query)
            if reply is not None:
                sock.sendto(reply, peer)
        except OSError:
            continue


def bind(address: tuple[str, int] = ADDRESS) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(address)
    return sock


def start(address: tuple[str, int] = ADDRESS) -> str:
    """Serve in a daemon thread for the life of this process. Returns what happened, for the runner's log: a
    failure to bind leaves lookups of outside names as slow as before, nothing else."""
    try:
        sock = bind(address)
    except OSError as exc:
        return f"pbench: no resolver on {address[0]}:{address[1]} ({exc}): outside names time out"
    threading.Thread(target=serve, args=(sock,), name="pbench-dns", daemon=True).start()
    return f"pbench: names outside the task's network get SERVFAIL from {address[0]}:{address[1]}"


if __name__ == "__main__":
    serve(bind())
    sys.exit(1)
