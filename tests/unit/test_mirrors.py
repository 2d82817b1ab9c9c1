"""`--mirror` of the evaluation commands: one path for a one-source selection, SOURCE=PATH for a corpus of
several sources (data/corpus/v0.2: IBM/mcp-context-forge and the template)."""

from __future__ import annotations

import pytest

from tasks_lib.core.errors import InputError
from tasks_lib.sources import repos
from tasks_lib.sources.record import load_source


def test_a_bare_path_is_the_mirror_of_any_source(tmp_path):
    mirrors = repos.parse_mirrors([tmp_path])
    assert mirrors == str(tmp_path)
    assert repos.mirror_for(load_source("demo"), mirrors) == str(tmp_path)
    repos.check_mirrors(mirrors, ["demo", "demo"])


def test_named_mirrors_go_to_their_source_only(tmp_path):
    mirrors = repos.parse_mirrors([f"demo={tmp_path}/a", f"fastapi-template={tmp_path}/b"])
    assert mirrors == {"demo": f"{tmp_path}/a", "fastapi-template": f"{tmp_path}/b"}
    assert repos.mirror_for(load_source("demo"), mirrors) == f"{tmp_path}/a"
    assert repos.mirror_for(load_source("mcp-context-forge"), mirrors) is None
    repos.check_mirrors(mirrors, ["demo", "fastapi-template", "mcp-context-forge"])


def test_an_existing_path_with_an_equals_sign_stays_a_path(tmp_path):
    odd = tmp_path / "a=b"
    odd.mkdir()
    assert repos.parse_mirrors([odd]) == str(odd)


@pytest.mark.parametrize(
    ("values", "sources", "says"),
    [
        (["/m/one", "/m/two"], ["demo"], "a bare path names the mirror of a one-source selection"),
        (["/m/one", "demo=/m/two"], ["demo"], "give each as SOURCE=PATH"),
        (["demo=/a", "demo=/b"], ["demo"], "source 'demo' given twice"),
        (["/m/one"], ["demo", "fastapi-template"], "the selection holds instances of 2 sources"),
        (["nope=/m"], ["demo"], "no selected instance comes from source 'nope'"),
    ],
)
def test_mirrors_that_cannot_be_right_are_input_errors(values, sources, says):
    """Rule: a bare path with several sources would point one repository's clone at another's mirror."""
    with pytest.raises(InputError, match=says):
        repos.check_mirrors(repos.parse_mirrors(values), sources)


def test_the_clone_is_refreshed_only_when_it_lacks_a_commit_it_needs(tmp_path, monkeypatch):
    import subprocess

    monkeypatch.setenv("PBENCH_CACHE_DIR", str(tmp_path / "cache"))
    origin = tmp_path / "origin"

    def commit(message: str) -> str:
        subprocess.run(["git", "-C", str(origin), "commit", "-q", "--allow-empty", "-m", message], check=True)
        return subprocess.run(
            ["git", "-C", str(origin), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()

    subprocess.run(["git", "init", "-q", str(origin)], check=True)
    for key, value in (("user.email", "t@example.com"), ("user.name", "t")):
        subprocess.run(["git", "-C", str(origin), "config", key, value], check=True)
    first = commit("first")
    source = load_source("demo")
    clone = repos.repo_dir(source, origin, needs=(first,))
    assert repos._has_commits(clone, (first,))
    second = commit("second")
    repos.repo_dir(source, origin, needs=(first,))  # it has what it needs: no fetch
    assert not repos._has_commits(clone, (second,))
    repos.repo_dir(source, origin, needs=(first, second))  # it lacks one: fetched
    assert repos._has_commits(clone, (first, second))
    third = commit("third")
    repos.repo_dir(source, origin)  # no needs named: refreshed as before
    assert repos._has_commits(clone, (third,))


def test_a_committed_mirror_names_its_root_by_a_variable_and_an_unset_one_is_an_input_error(
    tmp_path, monkeypatch
):
    """Rule: no committed record holds one machine's path: `clone.mirror` takes `$NAME` / `${NAME}` from the
    environment, and a variable that is not set is named in the error (never a path that lost its root)."""
    import dataclasses

    (tmp_path / "IBM+mcp-context-forge" / "repo").mkdir(parents=True)
    source = load_source("mcp-context-forge")
    assert source.clone.mirror == "${PBENCH_MIRRORS}/IBM+mcp-context-forge/repo"
    monkeypatch.setenv("PBENCH_MIRRORS", str(tmp_path))
    assert repos.origin(source, None) == str(tmp_path / "IBM+mcp-context-forge" / "repo")
    bare = dataclasses.replace(source, clone=dataclasses.replace(source.clone, mirror="$PBENCH_MIRRORS/x"))
    with pytest.raises(InputError, match="does not exist"):
        repos.origin(bare, None)
    monkeypatch.delenv("PBENCH_MIRRORS")
    with pytest.raises(InputError, match=r"needs \$PBENCH_MIRRORS, which is not set .*--mirror PATH"):
        repos.origin(source, None)
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "HEAD").write_text("ref: refs/heads/main\n")
    assert repos.origin(source, tmp_path / "m") == str(tmp_path / "m")  # --mirror wins, no variable needed
    with pytest.raises(InputError, match=r"--mirror .*: not a git repository"):
        repos.origin(source, tmp_path)


def test_no_committed_data_file_holds_a_machine_path():
    """Rule: the records, season definitions and corpora name no path of the machine they were made on (a
    mirror, a checkout, a cache); the containers' own paths (/work/repo, /tmp) are the harness's."""
    import re
    import subprocess

    from tasks_lib.core import paths

    machine = re.compile(r"/work/\.mirror|/work/main|/home/[a-z]|/Users/[A-Z]|\.cache/pbench|data/cache/")
    tracked = (
        subprocess.run(
            ["git", "-C", str(paths.PROJECT_ROOT), "ls-files", "-z", "data"], capture_output=True, check=True
        )
        .stdout.decode()
        .split("\0")
    )
    assert len(tracked) > 20  # the committed records, definitions and corpora (not outputs, not caches)
    found = []
    for path in sorted(paths.PROJECT_ROOT / rel for rel in tracked if rel):
        if path.is_file() and path.suffix in {".toml", ".json", ".md"}:
            for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                if machine.search(line):
                    found.append(f"{path.relative_to(paths.PROJECT_ROOT)}:{n}: {line.strip()[:100]}")
    assert not found, "\n".join(found)
