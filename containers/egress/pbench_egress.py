"""Egress proxy of environment-image builds (stdlib only, runs in a container of the base image).

The build's containers sit on an internal network whose only way out is this proxy: HTTPS through CONNECT,
plain HTTP (Debian's mirror) through absolute-URI requests, to the hosts of PBENCH_EGRESS_ALLOW only. Every
request is printed as one JSON line (host, port, method, allowed), which the engine keeps in the build log.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from urllib.parse import urlsplit

ALLOW = frozenset(h.lower() for h in os.environ.get("PBENCH_EGRESS_ALLOW", "").split())
PORT = int(os.environ.get("PBENCH_EGRESS_PORT", "3128"))


def _say(**record) -> None:
    print(json.dumps({"t": round(time.time(), 3), **record}), flush=True)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


async def _handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        request = (await reader.readline()).decode("latin-1").strip()
        headers = []
        while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
            headers.append(line)
        method, target, version = request.split(" ", 2)
        if method == "CONNECT":
            host, _, port = target.rpartition(":")
            path = None
        else:
            url = urlsplit(target)
            host, port = url.hostname or "", str(url.port or 80)
            path = (url.path or "/") + (f"?{url.query}" if url.query else "")
        allowed = host.lower() in ALLOW
        _say(method=method, host=host, port=int(port), allowed=allowed)
        if not allowed:
            writer.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
            await writer.drain()
            writer.close()
            return
        up_reader, up_writer = await asyncio.open_connection(host, int(port))
        if method == "CONNECT":
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await writer.drain()
        else:
            up_writer.write(f"{method} {path} {version}\r\n".encode("latin-1") + b"".join(headers) + b"\r\n")
            await up_writer.drain()
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
    except (ValueError, ConnectionError, OSError) as exc:
        _say(error=f"{type(exc).__name__}: {exc}")
        writer.close()


async def main() -> None:
    server = await asyncio.start_server(_handle, "0.0.0.0", PORT)
    _say(listening=PORT, allow=sorted(ALLOW))
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
