"""An agent's starting tree, and its answer read back out of it.

`checkout` writes the instance's repository as it was at the base commit into a new folder: a fresh git
repository of one commit whose tree is the base commit's tree. Not a clone: a clone of the source carries the
history after the base (the merge commit is the reference solution, its descendants hold the hidden tests), and
an agent with `git log --all` or `git show <merge>` would read the answer. The one commit has no parent and
the repository no remote, so no object of the future is there to find. The test patch is never applied.

`read_change` is the prediction: everything the work tree holds that the base does not (edits, new files,
deletions, whatever the agent committed), as one diff against that commit. It stages into a private index, so
the agent's own index, branches and commits are left as it left them.
"""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from tasks_lib.core.errors import InputError, PbenchError
from tasks_lib.corpus.instance import TaskInstance
from tasks_lib.sources import gitops

MARKER = "pbench-checkout.json"  # in the checkout's .git: what it was made from, for `read_change`
BASE_TAG = "pbench-base"  # the one commit, by a name that stays when the agent commits on top
BRANCH = "main"
# Written into the checkout's .git/info/exclude (never into its tree, never into the diff): what running a
# project's tests or tools leaves behind. Bytecode in a diff would make the whole prediction `patch_invalid`
# (binary files are refused) for a reason that has nothing to do with the fix.
EXCLUDED = (
    "__pycache__/",
    "*.py[cod]",
    ".pytest_cache/",
    ".mypy_cache/",
    ".ruff_cache/",
    ".venv/",
    "node_modules/",
    "test-results/",
    "playwright-report/",
)
# The checkout's own settings: a caller's global git config (autocrlf, a missing identity) must not make a
# fresh checkout look modified or refuse the agent's commits.
LOCAL_CONFIG = (
    ("core.autocrlf", "false"),
    ("core.fileMode", "true"),
    ("user.name", "pbench agent"),
    ("user.email", "agent@pbench.invalid"),
)


@dataclass(frozen=True)
class _Person:
    name: str = "pbench"
    email: str = "pbench@pbench.invalid"


@dataclass(frozen=True)
class Checkout:
    """A checkout made by `checkout`: where, of what, and its one commit (`root`), the base of the diff."""

    dir: Path
    instance_id: str
    repo: str
    base_commit: str
    root: str
    # The base commit's tree written exactly (same tree id). Not so where the source's clone lacks blobs
    # (`stubbed_files`, written empty as in the harness's own snapshot) or the tree holds submodules.
    same_tree: bool
    stubbed_files: tuple[str, ...] = ()

    def to_json(self) -> dict:
        return {**asdict(self), "dir": str(self.dir), "stubbed_files": list(self.stubbed_files)}


def refuse_non_empty(dest: Path) -> None:
    """A checkout goes into a new or empty folder: never over files that would end up in the diff."""
    if dest.is_symlink() or (dest.exists() and not dest.is_dir()):
        raise InputError(f"{dest}: exists and is not a folder (a checkout goes into a new or empty folder)")
    if dest.is_dir() and any(dest.iterdir()):
        raise InputError(f"{dest}: not empty (a checkout goes into a new or empty folder)")


def checkout(instance: TaskInstance, clone: Path, dest: Path) -> Checkout:
    """The repository of `instance` at its base commit, from the source's `clone`, as a one-commit repository
    in `dest` (new or empty): HEAD on branch `main` and tag `pbench-base`, a clean status, no remote."""
    dest = Path(dest).absolute()
    refuse_non_empty(dest)
    base = instance.base_commit
    if not gitops.commit_exists(clone, base):
        raise InputError(f"{instance.instance_id}: base commit {base} is not in the source's clone {clone}")
    tar, stubbed = gitops.snapshot(clone, base)
    dest.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
            archive.extractall(dest, filter="tar")
    except tarfile.TarError as exc:
        raise PbenchError(
            f"{instance.instance_id}: the tree of {base} cannot be written to {dest}: {exc}"
        ) from None
    when = gitops.git(["--git-dir", str(clone), "show", "-s", "--format=%cI", base]).stdout.decode().strip()
    base_tree = _tree_of(clone, base)
    with tempfile.TemporaryDirectory(prefix="pbench-checkout-") as home:
        git = gitops.PinnedGit(dest, Path(home))
        git("init", "--quiet", "--template=", ".")
        for key, value in LOCAL_CONFIG:
            git("config", key, value)
        (dest / ".git" / "info").mkdir(exist_ok=True)
        (dest / ".git" / "info" / "exclude").write_text("".join(f"{p}\n" for p in EXCLUDED))
        git("add", "--all", "--force")  # every file of the tree, also those its .gitignore names
        tree = git("write-tree")
        message = (
            f"{instance.repo} at {base}\n\nThe base commit's tree, without its history (pbench checkout)."
        )
        root = git.commit(tree, [], message, _Person(), _Person(), when)
        git("update-ref", f"refs/heads/{BRANCH}", root)
        git("symbolic-ref", "HEAD", f"refs/heads/{BRANCH}")
        git("tag", BASE_TAG, root)
    made = Checkout(dest, instance.instance_id, instance.repo, base, root, tree == base_tree, tuple(stubbed))
    (dest / ".git" / MARKER).write_text(json.dumps(made.to_json(), indent=2) + "\n")
    return made


def _tree_of(clone: Path, commit: str) -> str:
    return gitops.git(["--git-dir", str(clone), "rev-parse", f"{commit}^{{tree}}"]).stdout.decode().strip()


def read_marker(checkout_dir: Path) -> Checkout:
    """The checkout's record (`.git/pbench-checkout.json`); an input error when the folder is no checkout."""
    path = Path(checkout_dir) / ".git" / MARKER
    try:
        data = json.loads(path.read_text())
        return Checkout(
            Path(data["dir"]),
            data["instance_id"],
            data["repo"],
            data["base_commit"],
            data["root"],
            bool(data["same_tree"]),
            tuple(data.get("stubbed_files", ())),
        )
    except FileNotFoundError:
        raise InputError(f"{checkout_dir}: not a pbench checkout (no .git/{MARKER})") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise InputError(f"{path}: unreadable ({type(exc).__name__}: {exc})") from None


def read_change(checkout_dir: Path, root: str) -> str:
    """The work tree's change against `root` as one git diff (`git add -A` then `git diff --cached --binary`,
    in a private index): edits, new and deleted files, committed or not; what .gitignore and the checkout's
    exclude list leave out is not part of it. A PbenchError when git cannot read it (the agent removed .git)."""
    checkout_dir = Path(checkout_dir)
    with tempfile.TemporaryDirectory(prefix="pbench-diff-") as tmp:
        env = {**gitops.PinnedGit(checkout_dir, Path(tmp)).env, "GIT_INDEX_FILE": str(Path(tmp) / "index")}

        def git(*args: str) -> bytes:
            # The agent may have rewritten .git/config: every setting that shapes the diff is given here.
            cmd = [
                "git",
                *gitops.PINNED_GIT_OPTIONS,
                "-c",
                "core.fsmonitor=false",
                "-c",
                "diff.noprefix=false",
            ]
            cmd += ["--git-dir", str(checkout_dir / ".git"), "--work-tree", str(checkout_dir), *args]
            proc = subprocess.run(cmd, cwd=checkout_dir, env=env, capture_output=True, timeout=600)
            if proc.returncode != 0:
                reason = proc.stderr.decode(errors="replace").strip()[-500:]
                raise PbenchError(f"{checkout_dir}: git {args[0]} failed: {reason}")
            return proc.stdout

        git("read-tree", root)
        git("add", "--all")
        out = git(
            "diff",
            "--cached",
            "--binary",
            "--full-index",
            "--no-color",
            "--no-ext-diff",
            "--no-textconv",
            "--no-relative",
            "--src-prefix=a/",
            "--dst-prefix=b/",
            root,
        )
    return out.decode("utf-8", errors="surrogateescape")
