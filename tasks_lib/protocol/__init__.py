"""The host <-> runner protocol and the helpers both sides of the container wall use: standard library only,
importing nothing of the project and not each other, because each module is shipped into every test container
as a flat file (`SHIPPED`), where the image's /usr/bin/python3 runs it beside the runner (containers/runner).

- `wire`: what crosses the wall: the job the host writes, the result and the phase the runner writes, the
  runner's statuses and phases, the output cap (shipped as `pbench_protocol.py`);
- `globs`: the path matcher and the files no patch may touch (`pbench_globs.py`);
- `jsonc`: the JSON-with-comments reader of tsconfig files (`pbench_jsonc.py`).
"""

# Module of this package -> its name in the container's /pbench/tools.
SHIPPED = {"wire.py": "pbench_protocol.py", "globs.py": "pbench_globs.py", "jsonc.py": "pbench_jsonc.py"}
