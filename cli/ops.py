"""Operations: images, concurrency limits, cleanup, and one engine run by hand."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from cli.app import app, console, images_app, prefect, prefect_ready
from tasks_lib.core.constants import ExitCode
from tasks_lib.core.errors import InputError


@images_app.command("bootstrap")
def images_bootstrap():
    """Build (or find) the base and Postgres images. A second call builds nothing. With PBENCH_REGISTRY: pulled
    from the registry when it holds them, and pushed to it when it does not."""
    from tasks_lib.core import docker_client
    from tasks_lib.core.config import Settings
    from tasks_lib.images import build as images
    from tasks_lib.images import registry

    settings = Settings.from_env()
    refs = images.bootstrap(settings, say=lambda m: console.print(f"[dim]{m}[/dim]"))
    for name, ref in refs.items():
        state = f"pulled in {ref.seconds:.0f}s" if ref.pulled else "cached"
        state = f"built in {ref.seconds:.0f}s" if ref.built else state
        console.print(f"{name:9} {ref.tag}  {ref.id[:19]}  {state}")
    remote = registry.of(settings)
    if remote is not None:
        rootfs = f"{images.ROOTFS_REPO}:{settings.debian_suite}"
        tags = [rootfs, refs["base"].tag, refs["postgres"].tag]
        _print_transfers(registry.publish(docker_client.get(), remote, tags), remote.address)


def _registry(settings):
    from tasks_lib.images import registry

    remote = registry.of(settings)
    if remote is None:
        raise InputError("PBENCH_REGISTRY is not set: name the registry (host:port) of the harness's images")
    return remote


def _print_transfers(rows: list[dict], address: str) -> None:
    for row in rows:
        what = {
            "pushed": f"pushed to {address} in {row['seconds']:.1f}s",
            "pulled": f"pulled from {address} in {row['seconds']:.1f}s",
            "present": "present" + ("" if row["digest"] else " here"),
            "differs": f"NOT pushed: {address} holds another image under this tag",
            "missing": f"not in {address}",
        }[row["state"]]
        typer.echo(f"{row['tag']}\t{row['id'][:19] or '-'}\t{what}\t{row['digest'] or '-'}")


@images_app.command("push")
def images_push(
    tags: list[str] = typer.Argument(
        None, help="Images to push (pbench/env-demo-backend:<key>); none: every image of the harness here."
    ),
):
    """Push this engine's images to the registry (PBENCH_REGISTRY) where it lacks them, the base images first.
    A tag the registry holds with another image is left as it is (exit 1)."""
    from tasks_lib.core import docker_client
    from tasks_lib.core.config import Settings
    from tasks_lib.images import lineage, registry

    remote = _registry(Settings.from_env())
    rows = registry.publish(docker_client.get(), remote, tags or lineage.harness_tags())
    _print_transfers(rows, remote.address)
    if any(r["state"] == "differs" for r in rows):
        raise typer.Exit(ExitCode.NOT_RESOLVED)


@images_app.command("pull")
def images_pull(
    tags: list[str] = typer.Argument(
        ..., help="Images to pull by their content tags (pbench/env-demo-backend:<key>)."
    ),
):
    """Pull images from the registry (PBENCH_REGISTRY) into this engine (a run pulls what it needs by itself;
    this warms a new machine). Exit 1 when the registry lacks one."""
    from tasks_lib.core import docker_client
    from tasks_lib.core.config import Settings
    from tasks_lib.images import registry

    remote = _registry(Settings.from_env())
    rows = registry.fetch(docker_client.get(), remote, tags)
    _print_transfers(rows, remote.address)
    if any(r["state"] == "missing" for r in rows):
        raise typer.Exit(ExitCode.NOT_RESOLVED)


@images_app.command("list")
def images_list(as_json: bool = typer.Option(False, "--json", help="One JSON object per image.")):
    """Images this project built, with their content keys."""
    from tasks_lib.images import build as images

    for row in images.list_images():
        if as_json:
            typer.echo(json.dumps(row))
            continue
        typer.echo(
            f"{', '.join(row['tags']) or '<untagged>'}\t{row['size_mb']} MB\tkey={str(row['key'])[:16]}"
        )


@images_app.command("usage")
def images_usage(
    per_image: bool = typer.Option(
        False, "--images", help="One line per image: tag, parent, disk of its own layers, build time."
    ),
):
    """Environment images per source: count, built on a parent (delta), disk of their own layers, build time."""
    from tasks_lib.images import build as images
    from tasks_lib.images import lineage as image_lineage

    if per_image:
        typer.echo("source\tside\ttag\tparent\tsize MB\tadds MB\tbuild s (ledger)\tbuilt at\tpull s (ledger)")
        for r in image_lineage.image_rows():
            pull_s = f"{r['pull_s']:.1f}" if r["pulled"] else "-"
            typer.echo(
                f"{r['source']}\t{r['side']}\t{r['tag']}\t{r['parent'] or '-'}\t{r['size_mb']:.0f}\t{r['adds_mb']:.0f}\t"
                f"{r['build_s']:.0f}\t{r['built_at'] or '-'}\t{pull_s}"
            )
        return
    typer.echo(
        "source\tside\timages\tdelta\tdisk MB (beyond the base image)\tbuild s (ledger)\tpulled\tpull s (ledger)"
    )
    for row in images.usage():
        typer.echo(
            f"{row['source']}\t{row['side']}\t{row['images']}\t{row['delta']}\t{row['unique_mb']:.0f}\t"
            f"{row['build_s']:.0f}\t{row['pulled']}\t{row['pull_s']:.0f}"
        )


@images_app.command("env")
def images_env(
    source: str = typer.Option("demo", help="Source name (data/sources/NAME.toml) or path."),
    commit: str = typer.Option("HEAD", help="Commit whose dependency files define the image."),
    mirror: Path | None = typer.Option(
        None, help="Local mirror of the source repository (overrides the record)."
    ),
):
    """Build (or find) the backend environment image for a commit's lock files."""
    from tasks_lib.images import build as images
    from tasks_lib.sources import gitops, repos
    from tasks_lib.sources.record import load_source

    src = load_source(source)
    repo = repos.repo_dir(src, mirror)
    sha = gitops.resolve(repo, commit)
    spec = images.backend_env_spec(src, images.dependency_contents(src, repo, sha))
    ref = images.ensure_env_image(spec)
    state = f"pulled in {ref.seconds:.0f}s" if ref.pulled else "cached"
    state = f"built in {ref.seconds:.0f}s, log {ref.log_path}" if ref.built else state
    typer.echo(f"{ref.tag}  lock {spec.lock_sha[:23]}  {state}")


@images_app.command("prune")
def images_prune(
    older_than_days: float = typer.Option(30.0, min=0, help="Remove env images unused for this many days."),
    dry_run: bool = typer.Option(False, help="Only list what would be removed."),
):
    """Free disk: remove environment images not used recently (rebuilt from their lock when needed again)."""
    from tasks_lib.images import build as images

    rows = images.prune_env_images(older_than_days, dry_run)
    for row in rows:
        done = f"kept ({row['kept']})" if row["kept"] else "would remove" if dry_run else "removed"
        typer.echo(f"{done} {', '.join(row['tags'])}  {row['size_mb']} MB  last used {row['last_used']}")
    gone = [r for r in rows if not r["kept"]]
    kept = f", {len(rows) - len(gone)} kept (in use)" if len(gone) < len(rows) else ""
    typer.echo(f"{len(gone)} image(s), {sum(r['size_mb'] for r in gone):.0f} MB{kept}")


@app.command()
def limits(
    docker_slots: int = typer.Option(2, min=1, help="Test stacks running at once on this host."),
    github_per_hour: int = typer.Option(4000, min=1, help="GitHub API calls per hour (of the 5000 allowed)."),
):
    """Set this host's Docker slots and create or update the GitHub API rate limit on the Prefect API."""
    prefect()
    from tasks_lib.core import limits as limits_mod

    prefect_ready()

    configured = limits_mod.ensure_limits(docker_slots, github_per_hour)
    for name, spec in configured.items():
        if "where" in spec:
            typer.echo(
                f"{name}: {spec['limit']} slot(s), {spec['in_use']} in use (file locks in {spec['where']})"
            )
        else:
            typer.echo(
                f"{name}: limit {spec['limit']}, decay {spec['slot_decay_per_second']:.3f}/s, "
                f"active {spec['active']}"
            )


@app.command()
def cleanup(
    all_owners: bool = typer.Option(False, "--all", help="Every owner's objects, not only PBENCH_OWNER's."),
):
    """Remove the containers, networks and volumes left by an interrupted run (by the project's labels)."""
    from tasks_lib import engine

    counts = engine.cleanup_leftovers(all_owners)
    typer.echo(", ".join(f"{v} {k}" for k, v in counts.items()) + " removed")


@app.command("run-tests")
def run_tests_cmd(
    commit: str = typer.Argument(..., help="Commit (or rev) to check out."),
    source: str = typer.Option("demo", help="Source name or path."),
    patch: list[Path] = typer.Option([], help="Patch files, applied in order."),
    select: list[str] = typer.Option([], help="Test ids or files to run (default: the whole suite)."),
    out: Path | None = typer.Option(None, help="Log folder (default: data/cache/adhoc/<commit>)."),
    mirror: Path | None = typer.Option(None, help="Local mirror of the source repository."),
):
    """Run one source's tests at a commit with patches, through the engine (debugging aid)."""
    from tasks_lib import engine
    from tasks_lib.core import paths
    from tasks_lib.sources import gitops, repos
    from tasks_lib.sources.record import load_source

    src = load_source(source)
    repo = repos.repo_dir(src, mirror)
    sha = gitops.resolve(repo, commit)
    patches = []
    for p in patch:
        if not p.is_file():
            raise InputError(f"--patch {p}: no such file")
        patches.append(engine.PatchInput(p.stem, p.read_text()))
    log_dir = out or paths.cache_dir() / "adhoc" / sha[:12]
    result = engine.run_tests(engine.RunRequest(src, repo, sha, log_dir, tuple(patches), tuple(select)))
    counts: dict[str, int] = {}
    for outcome in result.tests.values():
        counts[outcome] = counts.get(outcome, 0) + 1
    typer.echo(
        json.dumps(
            {
                "status": result.status,
                "suite_ran": result.suite_ran,
                "exit_code": result.exit_code,
                "outcomes": counts,
                "collection_errors": result.collection_errors,
                "timings": result.timings,
                "log_dir": result.log_dir,
                "error": result.error,
            },
            indent=2,
        )
    )
    raise typer.Exit(0 if result.status == "completed" else ExitCode.HARNESS_ERROR)
