"""Whether a season's outputs are already those of its inputs, decided before Prefect starts.

A completed curation run leaves `season-state.json` in each source's folder: the fingerprint of everything
that decides the season's outputs, and the sha256 of each output file. `pbench curate` with the same inputs
finds the same fingerprint and untouched outputs, and answers from them: no server, no flow run, no container
(docs/performance.md, section 3). The fingerprint covers:

- the command's arguments (season, sources, crawl method, export file, `--limit`) and the season definition;
- each source record, and what its crawl reads: the export's bytes, the refs of the repository it is
  crawled or extracted from (a mirror that gained commits is a new input);
- the project's code and committed inputs (`tasks_lib/`, `flows/`, `cli/`, `containers/`, the committed
  files under `data/`), the base images' ids, and every `PBENCH_*` setting;

A crawl from GitHub has no fingerprint (what GitHub answers changes without any local input changing); nor
does a run that left an extraction to retry (an infrastructure error or a timeout is never a final answer):
those seasons run the flow every time, as before.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import os
import subprocess
from pathlib import Path

from tasks_lib.core import paths

STATE_FILE = "season-state.json"
_CODE_DIRS = ("tasks_lib", "flows", "cli", "containers")
_DATA_INPUTS = (
    "demo", "sources", "season_defs", "schema", "filter_rules.toml", "model_cutoffs.toml", "statement_rules.toml",
)  # fmt: skip
_NOT_OUTPUTS = {STATE_FILE, "season-runs.jsonl"}
_RETRIED = {"infra_error", "timeout"}


def fingerprint(
    season: str,
    sources: list[str] | None,
    crawl_method: str | None,
    prs_file: str | None,
    mirror: str | None,
    limit: int | None,
) -> str | None:
    """sha256 of every input of the season's outputs, or None when they cannot be known offline."""
    from tasks_lib.curation.season import load_season
    from tasks_lib.images import build as images
    from tasks_lib.sources import repos
    from tasks_lib.sources.record import load_source

    spec = load_season(season, sources=sources)
    h = hashlib.sha256()
    h.update(json.dumps([season, list(spec.sources), crawl_method, limit]).encode())
    h.update(repr(spec).encode())
    for name in spec.sources:
        source = load_source(name)
        method = crawl_method or ("export" if prs_file or source.clone.generator else None)
        if method is None:
            method = "mirror" if (mirror or source.clone.mirror) else "github"
        if method == "github":
            return None
        h.update(repr(dataclasses.replace(source, path=Path(source.name))).encode())
        try:
            origin = Path(repos.origin(source, mirror))
        except Exception:
            return None
        if prs_file:
            h.update(hashlib.sha256(Path(prs_file).read_bytes()).digest())
        elif source.clone.generator == "demo":
            from tasks_lib.sources.demo_repo import demo_prs_path

            h.update(hashlib.sha256(demo_prs_path(origin).read_bytes()).digest())
        refs = _refs(origin)
        if refs is None:
            return None
        h.update(refs)
    _hash_tree(h, [paths.PROJECT_ROOT / d for d in _CODE_DIRS])
    _hash_tree(h, [paths.data_dir() / d for d in _DATA_INPUTS])
    for name in spec.sources:  # the curated statements packaging prefers (a new one re-packages, cached)
        from tasks_lib.curation import statements

        path = statements.statements_file(name)
        h.update(path.read_bytes() if path.is_file() else b"-")
    h.update(repr(sorted((k, v) for k, v in os.environ.items() if k.startswith("PBENCH_"))).encode())
    try:
        with images.lookup_only():
            h.update(images.identity().encode())
    except Exception:  # a base image to build, no daemon: the flow decides
        return None
    return h.hexdigest()


def record(out: Path, fp: str | None, summary: dict, statuses: list[str]) -> None:
    """After a completed run of one source: its fingerprint and outputs, unless something is left to retry."""
    path = out / STATE_FILE
    if fp is None or _RETRIED & set(statuses):
        path.unlink(missing_ok=True)
        return
    state = {"fingerprint": fp, "outputs": _outputs(out), "summary": summary}
    tmp = path.with_name(f".{STATE_FILE}.{os.getpid()}")
    tmp.write_text(json.dumps(state, indent=1, default=str))
    tmp.replace(path)


def forget(out: Path) -> None:
    """A run started: until it completes, the folder's outputs are not those of any fingerprint."""
    (out / STATE_FILE).unlink(missing_ok=True)


def up_to_date(outs: dict[str, Path], fp: str | None, lock_path: Path | None = None) -> dict | None:
    """The stored summaries per source when every source's folder holds the outputs of `fp`, untouched, and
    no run of the season holds its lock; else None."""
    if fp is None or (lock_path is not None and _locked(lock_path)):
        return None
    summaries = {}
    for name, out in outs.items():
        try:
            state = json.loads((out / STATE_FILE).read_text())
        except (OSError, ValueError):
            return None
        if state.get("fingerprint") != fp or state.get("outputs") != _outputs(out):
            return None
        summaries[name] = state["summary"]
    return summaries


def _refs(repo: Path) -> bytes | None:
    res = subprocess.run(
        ["git", "--git-dir" if (repo / "HEAD").is_file() else "-C", str(repo), "for-each-ref"],
        capture_output=True,
        timeout=60,
    )
    return res.stdout if res.returncode == 0 else None


def _hash_tree(h, roots: list[Path]) -> None:
    for root in roots:
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        for p in files:
            if "__pycache__" in p.parts or p.suffix == ".pyc":
                continue
            h.update(str(p.relative_to(root.parent)).encode() + b"\0")
            h.update(hashlib.sha256(p.read_bytes()).digest())


def _outputs(out: Path) -> dict[str, str]:
    """sha256 of each output file of a source's folder (its tables, records, chart, dataset export; not the
    extraction logs, the run ledger or lock files)."""
    found = {}
    for p in sorted(out.iterdir()):
        if p.name in _NOT_OUTPUTS or p.name.startswith("."):
            continue
        if p.is_file():
            found[p.name] = hashlib.sha256(p.read_bytes()).hexdigest()
        elif p.is_dir() and p.name == "hf":
            for q in sorted(x for x in p.rglob("*") if x.is_file()):
                found[str(q.relative_to(out))] = hashlib.sha256(q.read_bytes()).hexdigest()
    return found


def _locked(path: Path) -> bool:
    if not path.exists():
        return False
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)
