"""`pbench`: the operators', evaluators' and analysts' command line, and the project's composition root: it
parses, then calls flows or the library (which never import it). Thin: heavy modules load lazily.

Exit codes (ARCHITECTURE.md): 0 resolved / success, 1 not resolved (a meaningful result), 2 the harness
could not run (bad input, infrastructure). Never 0 on an error.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys

import typer
from rich.markup import escape

from cli import agent, corpus, evaluate, ops, report  # noqa: F401  (their commands register on the app)
from cli.app import app, console
from tasks_lib.core.constants import ExitCode
from tasks_lib.core.errors import InputError, PbenchError


def _on_stop(signum, frame):
    # Every thread sees the stop (the engine checks it while it waits: worker threads stop within seconds);
    # the main thread gets a KeyboardInterrupt, so every `finally` removes its containers.
    from tasks_lib.core import stopping

    stopping.request_stop()
    raise KeyboardInterrupt


def main() -> None:
    from tasks_lib.core import api_server

    api_server.ENABLED = True  # this process is the command's own: it may start its Prefect API server early
    logging.basicConfig(
        level=os.environ.get("PBENCH_LOG_LEVEL", "WARNING"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    signal.signal(signal.SIGTERM, _on_stop)
    signal.signal(signal.SIGINT, _on_stop)
    # `--debug` anywhere on the line (or PBENCH_DEBUG=1): an unexpected error shows its traceback.
    debug = "--debug" in sys.argv[1:] or os.environ.get("PBENCH_DEBUG") == "1"
    args = [a for a in sys.argv[1:] if a != "--debug"]
    stdout = sys.stdout
    try:
        rc = app(args=args, standalone_mode=False)
    except SystemExit:
        if sys.stdout is not stdout:
            # typer's answer to a reader that closed its end (`pbench list | head -1`): stdout swapped for a
            # quiet wrapper, exit 1. Not "not resolved": the reader had what it wanted.
            sys.exit(0)
        raise
    except BrokenPipeError:
        _quiet_stdout()
        sys.exit(0)
    except typer.Exit as exc:
        rc = exc.exit_code
    except typer.BadParameter as exc:
        console.print(f"[red]error:[/red] {escape(_bad_parameter(exc))}", highlight=False)
        sys.exit(ExitCode.HARNESS_ERROR)
    except typer.Abort as exc:
        console.print(f"[red]error:[/red] {escape(str(exc) or 'aborted')}", highlight=False)
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
        if callable(getattr(exc, "show", None)) and hasattr(exc, "exit_code"):
            exc.show()  # a usage error (click's, or the copy typer ships): its own message, exit 2
            sys.exit(ExitCode.HARNESS_ERROR)
        if debug:
            raise
        # Never exit 1 by accident (1 is "not resolved" for `pbench score`): an unexpected error is the
        # harness's, exit 2, one line.
        reason = " ".join(str(exc).split()) or "no message"
        console.print(
            f"[red]error:[/red] unexpected {type(exc).__name__}: {escape(reason)}; "
            "rerun with --debug for the traceback",
            highlight=False,
        )
        sys.exit(ExitCode.HARNESS_ERROR)
    sys.exit(rc or 0)


def _bad_parameter(exc: typer.BadParameter) -> str:
    """A refused value named by its flag as typed in the docs (`--max-workers: ...`, `--model-cutoff is
    required`), never by the Python parameter (`model_cutoff`) or without a name."""
    param = getattr(exc, "param", None)
    if param is None:
        return str(exc)
    flags = [o for o in getattr(param, "opts", ()) if o.startswith("-")]
    name = flags[0] if flags else str(param.name).upper()  # an argument: its name as the usage line shows it
    if type(exc).__name__ == "MissingParameter":  # click's class, or the copy typer ships
        help_text = (getattr(param, "help", None) or "").rstrip(".")
        return f"{name} is required" + (f" ({help_text[:1].lower()}{help_text[1:]})" if help_text else "")
    return f"{name}: {exc.message}"


def _quiet_stdout() -> None:
    """The reader of stdout is gone: what is still buffered goes nowhere, not into a second error at exit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    with contextlib.suppress(OSError, ValueError):
        os.dup2(devnull, sys.stdout.fileno())


def _print_error(exc: PbenchError) -> None:
    # Messages quote user input ("[acme__app-1]", "[/x]"): print it as written, never as Rich markup.
    console.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False)


if __name__ == "__main__":
    main()
