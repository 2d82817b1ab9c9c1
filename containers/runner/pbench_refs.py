"""Reference code for the launcher's audit, compiled before the tests (stdlib and the image's pytest only).

The audit (pbench_audit.py) compares the code that ran with code compiled from the protected files' bytes,
rewritten as pytest rewrites asserts. In the test process that is a second rewrite of every graded test module
after pytest's own, on the critical path: 2 s of mcp-context-forge #3325's 15 s. The runner starts this script
as the tool user as soon as the tree is frozen (before a staged run's "go", the services' gate and the prestart
steps), with the test environment's interpreter in isolated mode (no working directory, no PYTHONPATH: nothing
of the repository is importable), on the graded test files and the conftests on their way: it rewrites them
with the image's pytest, as the launcher would with no assertion pass hook, and writes each file's code object
(marshal) as soon as it is compiled into a folder only the tool user may write: first the manifest (the files it
will write), then one file per module (`ref_name`), then `done`. The launcher waits only for a module it needs
and the manifest names, and only while this process runs; it takes a function's reference from there when it
is equal, and compiles anything else itself.

    python -I pbench_refs.py OUT_DIR FILE...
"""

from __future__ import annotations

import hashlib
import json
import marshal
import os
import sys
import time

MANIFEST = "manifest.json"
DONE = "done"


def ref_name(path: str) -> str:
    """The file in the folder that holds `path`'s code."""
    return hashlib.sha256(path.encode("utf-8", "surrogateescape")).hexdigest()[:40] + ".marshal"


def _write(out_dir: str, name: str, data: bytes) -> None:
    tmp = os.path.join(out_dir, f".{name}.tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
    os.replace(tmp, os.path.join(out_dir, name))


def main(argv: list[str]) -> int:
    out_dir, files = argv[0], argv[1:]
    try:
        _write(out_dir, MANIFEST, json.dumps(files).encode())
        from pathlib import Path

        from _pytest.assertion.rewrite import _rewrite_test

        for path in files:
            t0 = time.monotonic()
            try:
                code = _rewrite_test(Path(path), None)[1]
            except Exception as exc:  # the launcher compiles this one itself
                print(f"{path}: {type(exc).__name__}: {exc}", flush=True)
                continue
            _write(out_dir, ref_name(path), marshal.dumps(code))
            print(f"{path}: {time.monotonic() - t0:.3f} s", flush=True)
    finally:
        _write(out_dir, DONE, b"")  # whatever happened: the launcher stops waiting
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
