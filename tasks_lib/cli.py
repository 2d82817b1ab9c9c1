"""`pbench`: the operators', evaluators' and analysts' command line. Thin: heavy modules load lazily.

Exit codes (ARCHITECTURE.md): 0 resolved / success, 1 not resolved (a meaningful result), 2 the harness
could not run (bad input, infrastructure). Never 0 on an error.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
from pathlib import Path

import typer
from rich.console import Console

from tasks_lib.constants import ExitCode
from tasks_lib.errors import InputError, PbenchError

app = typer.Typer(no_args_is_help=True, add_completion=False, help="PrototypeBench curation and evaluation harness.")
images_app = typer.Typer(no_args_is_help=True, help="Base, service and environment images.")
app.add_typer(images_app, name="images")
console = Console(stderr=True)


def _fail(message: str, code: int = ExitCode.HARNESS_ERROR):
    console.print(f"[red]error:[/red] {message}")
    raise typer.Exit(code)


@images_app.command("bootstrap")
def images_bootstrap():
    """Build (or find) the base and Postgres images. A second call builds nothing."""
    from tasks_lib import images

    refs = images.bootstrap(say=lambda m: console.print(f"[dim]{m}[/dim]"))
    for name, ref in refs.items():
        state = f"built in {ref.seconds:.0f}s" if ref.built else "cached"
        console.print(f"{name:9} {ref.tag}  {ref.id[:19]}  {state}")


@images_app.command("list")
def images_list():
    """Images this project built, with their content keys."""
    from tasks_lib import images

    for row in images.list_images():
        typer.echo(f"{', '.join(row['tags']) or '<untagged>'}\t{row['size_mb']} MB\tkey={str(row['key'])[:16]}")


@images_app.command("env")
def images_env(
    source: str = typer.Option("demo", help="Source name (data/sources/NAME.toml) or path."),
    commit: str = typer.Option("HEAD", help="Commit whose dependency files define the image."),
    mirror: Path | None = typer.Option(None, help="Local mirror of the source repository (overrides the record)."),
):
    """Build (or find) the backend environment image for a commit's lock files."""
    from tasks_lib import gitops, images
    from tasks_lib.sources import load_source

    src = load_source(source)
    repo = gitops.repo_dir(src, mirror)
    sha = gitops.resolve(repo, commit)
    spec = images.backend_env_spec(src, images.dependency_contents(src, repo, sha))
    ref = images.ensure_env_image(spec)
    state = f"built in {ref.seconds:.0f}s, log {ref.log_path}" if ref.built else "cached"
    typer.echo(f"{ref.tag}  lock {spec.lock_sha[:23]}  {state}")


@app.command()
def cleanup():
    """Remove every container, network and volume left by an interrupted run (by the project's label)."""
    from tasks_lib import engine

    counts = engine.cleanup_leftovers()
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
    from tasks_lib import engine, gitops, paths
    from tasks_lib.sources import load_source

    src = load_source(source)
    repo = gitops.repo_dir(src, mirror)
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
    typer.echo(json.dumps({"status": result.status, "suite_ran": result.suite_ran, "exit_code": result.exit_code,
                           "outcomes": counts, "collection_errors": result.collection_errors,
                           "timings": result.timings, "log_dir": result.log_dir, "error": result.error}, indent=2))
    raise typer.Exit(0 if result.status == "completed" else ExitCode.HARNESS_ERROR)


def _on_sigterm(signum, frame):
    # Turn SIGTERM into KeyboardInterrupt so every `finally` removes its containers.
    raise KeyboardInterrupt


def main() -> None:
    logging.basicConfig(level=os.environ.get("PBENCH_LOG_LEVEL", "WARNING"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        rc = app(standalone_mode=False)
    except typer.Exit as exc:
        rc = exc.exit_code
    except (typer.BadParameter, typer.Abort) as exc:
        console.print(f"[red]error:[/red] {exc}")
        sys.exit(ExitCode.HARNESS_ERROR)
    except InputError as exc:
        _print_error(exc)
        sys.exit(ExitCode.HARNESS_ERROR)
    except PbenchError as exc:
        _print_error(exc)
        sys.exit(ExitCode.HARNESS_ERROR)
    except KeyboardInterrupt:
        console.print("[yellow]interrupted[/yellow]: finished work is kept; rerun the same command to resume")
        sys.exit(130)
    except Exception as exc:
        import click

        if isinstance(exc, click.ClickException):
            exc.show()
            sys.exit(ExitCode.HARNESS_ERROR)
        raise
    sys.exit(rc or 0)


def _print_error(exc: PbenchError) -> None:
    console.print(f"[red]error:[/red] {exc}", highlight=False)
