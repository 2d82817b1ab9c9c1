"""Warm a dev server before Playwright runs: fetch the page, then every module it imports, statically or
dynamically (lazy routes included), the way a browser would ask a Vite dev server for them (stdlib only).

    python3 -I pbench_warm.py URL BUDGET_S

A Vite dev server transforms a module on its first request and pre-bundles dependencies on their first import:
on two cores the first visit of a route of a large app (langflow's flow editor) takes longer than the few
seconds a spec waits for it, a cost the repository's CI never pays twice (it retries, on warm servers). The
harness starts the dev server while the backend starts (a minute or two for langflow) and walks its module
graph meanwhile, so the tests meet a server in the state a second visit would. It only reads: GET requests to
the server's own origin, at most MAX_MODULES modules, MAX_BYTES per answer, within BUDGET_S seconds (the
runner kills it after that anyway). It runs as the tool user, apart from the runner (the answers are the
agent's code). Whatever it does not reach, the tests fetch themselves: it decides no outcome.
"""

from __future__ import annotations

import os
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

MAX_MODULES = 5000
MAX_BYTES = 8 << 20
WORKERS = 4
# What a module a Vite dev server serves imports: `import x from "/src/a.tsx"`, `export * from "..."`,
# `import "/src/a.css"`, `import("/src/Page.tsx")`, and the page's `<script type="module" src="...">`.
_IMPORTS = [
    re.compile(r"""\b(?:import|export)\s[^'";]*?\bfrom\s*["']([^"'\s]+)["']"""),
    re.compile(r"""\bimport\s*["']([^"'\s]+)["']"""),
    re.compile(r"""\bimport\(\s*["']([^"'\s]+)["']\s*\)"""),
    re.compile(r"""<script[^>]*\btype=["']module["'][^>]*\bsrc=["']([^"'\s]+)["']"""),
]
_HEADERS = {"Accept": "*/*", "Sec-Fetch-Dest": "script", "User-Agent": "pbench-warm"}


def imports_of(text: str, base: str, origin: str) -> list[str]:
    """The same-origin URLs `text` (served at `base`) imports; data:, other origins and bare names left out."""
    out = []
    for pattern in _IMPORTS:
        for spec in pattern.findall(text):
            if not spec.startswith(("/", "./", "../", origin)):
                continue
            url = urllib.parse.urljoin(base, spec)
            if urllib.parse.urlsplit(url)._replace(path="", query="", fragment="").geturl() == origin:
                out.append(urllib.parse.urldefrag(url)[0])
    return out


def fetch(url: str, headers: dict, timeout: float) -> str:
    req = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(req, timeout=timeout) as res:
        return res.read(MAX_BYTES).decode("utf-8", "replace")


def warm(url: str, budget_s: float, fetcher=fetch) -> dict:
    """Walk the module graph from `url` until it is done, MAX_MODULES were asked for, or the budget is spent."""
    deadline = time.monotonic() + budget_s
    parts = urllib.parse.urlsplit(url)
    origin = f"{parts.scheme}://{parts.netloc}"
    seen = {url}
    counts = {"fetched": 0, "failed": 0}
    first = _first_answer(url, deadline, fetcher)
    if first is None:
        return counts | {"left": 0, "answered": False}
    pool = ThreadPoolExecutor(WORKERS)
    try:
        pending = {pool.submit(lambda: first): url}
        while pending and time.monotonic() < deadline:
            done, _ = wait(
                pending, timeout=max(0.1, deadline - time.monotonic()), return_when=FIRST_COMPLETED
            )
            for future in done:
                base = pending.pop(future)
                try:
                    text = future.result()
                except (OSError, ValueError):  # urllib's errors (HTTPError too) and a bad URL
                    counts["failed"] += 1
                    continue
                counts["fetched"] += 1
                for nxt in imports_of(text, base, origin):
                    if nxt not in seen and len(seen) < MAX_MODULES:
                        seen.add(nxt)
                        left = max(1.0, deadline - time.monotonic())
                        pending[pool.submit(fetcher, nxt, _HEADERS, min(60.0, left))] = nxt
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    return counts | {"left": len(pending), "answered": True}


def _first_answer(url: str, deadline: float, fetcher) -> str | None:
    """The page, once the server answers it (it may still be starting), or None at the deadline."""
    while time.monotonic() < deadline:
        try:
            return fetcher(url, {"Accept": "text/html"}, 10.0)
        except (OSError, ValueError):
            time.sleep(0.5)
    return None


def main(argv: list[str]) -> int:
    url, budget = argv[1], float(argv[2])
    t0 = time.monotonic()
    counts = warm(url, budget)
    print(
        f"pbench: warmed {url}: {counts['fetched']} module(s) fetched, {counts['failed']} failed, "
        f"{counts['left']} left at the budget, in {time.monotonic() - t0:.1f}s"
        + ("" if counts["answered"] else " (the server never answered)"),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    code = main(sys.argv)
    os._exit(code)  # fetches still in flight at the budget are not waited for
