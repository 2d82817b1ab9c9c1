"""The judge cannot be forged (issue 15), frontend forms: the demo's frontend-only and fullstack instances.

Playwright, its config, reporters and the TypeScript path mapping the specs are compiled with come from the
image or the harness; Playwright runs as a user of its own that the dev server (the agent's code) cannot reach.
None of these wrong solutions is resolved, and each verdict names what was detected.
"""

from __future__ import annotations

import dataclasses
import time

import pytest
from attack_kit import Task, edit, logs, new, said

from tasks_lib.judge import evaluation

pytestmark = [pytest.mark.docker, pytest.mark.slow]

# A shim of @playwright/test whose expect does nothing: the specs' assertions would all pass.
SHIM = """
import * as real from './node_modules/@playwright/test/index.mjs';

export const test = real.test;
const noop = new Proxy(function () {}, { get: (_t, p) => (p === 'then' ? undefined : noop), apply: () => noop });
export const expect = () => noop;
export default real.default;
"""
REDIRECT = '{"compilerOptions": {"paths": {"@playwright/test": ["./pw-shim.mjs"]}}}\n'


def _dev_server(task: Task, code: str) -> str:
    """A patch whose vite.config.js runs `code` when the dev server starts (before and during Playwright)."""
    vite = task.base_file("frontend/vite.config.js")
    return edit("frontend/vite.config.js", vite, code + "\n" + vite)


@pytest.mark.parametrize(
    ("name", "patch", "why"),
    [
        (
            "node_modules",
            new("frontend/node_modules/@playwright/test/index.mjs", SHIM)
            + new(
                "frontend/node_modules/@playwright/test/package.json",
                '{"name": "@playwright/test", "main": "index.mjs"}',
            ),
            "node_modules (packages come from the image)",
        ),
        (
            "paths",
            new("frontend/jsconfig.json", REDIRECT) + new("frontend/pw-shim.mjs", SHIM),
            "maps the installed package '@playwright/test'",
        ),
        (
            "base_url",
            new("frontend/jsconfig.json", '{"compilerOptions": {"baseUrl": "."}}')
            + new("frontend/@playwright/test/index.mjs", SHIM),
            "shadows the installed package '@playwright'",
        ),
        (
            "npmrc",
            new("frontend/.npmrc", "node-options=--require ./preload.cjs")
            + new("frontend/preload.cjs", "// preload"),
            "harness file",
        ),
    ],
)
def test_frontend_tools_and_configs_never_come_from_the_patch(
    frontend, tmp_path, no_validator, name, patch, why
):
    """A node_modules shipped in the patch, a jsconfig/tsconfig `paths` entry (or a `baseUrl` folder) that
    redirects the specs' @playwright/test, and a project .npmrc that preloads code: with the validator off,
    each is found in the container from the tree and the files restored; patch_touches_tests naming why."""
    v = frontend.score(patch, tmp_path / name)
    assert not v.resolved and v.status == "patch_touches_tests", said(v)
    assert why in v.note, said(v)


RUNTIME_CONFIGS = """
import pbenchFs from 'node:fs';
import pbenchPath from 'node:path';

const pbenchRoot = pbenchPath.dirname(new URL(import.meta.url).pathname);
const pbenchTry = (what, act) => {
  try { act(); console.log(`hostile: did ${what}`); } catch (e) { console.log(`hostile: could not ${what} ${e.code}`); }
};
pbenchTry('write shim', () => pbenchFs.writeFileSync(pbenchPath.join(pbenchRoot, 'pw-shim.mjs'), SHIM));
pbenchTry('write jsconfig', () => pbenchFs.writeFileSync(pbenchPath.join(pbenchRoot, 'jsconfig.json'), REDIRECT));
pbenchTry('write npmrc', () => pbenchFs.writeFileSync(pbenchPath.join(pbenchRoot, '.npmrc'), 'node-options=--require /tmp/x.cjs'));
pbenchTry('rewrite spec', () => pbenchFs.writeFileSync(pbenchPath.join(pbenchRoot, 'tests', 'items.spec.js'), 'x'));
pbenchTry('rename tests', () => pbenchFs.renameSync(pbenchPath.join(pbenchRoot, 'tests'), pbenchPath.join(pbenchRoot, 'tests-orig')));
"""


def _runtime(code: str) -> str:
    return f"const SHIM = {SHIM!r};\nconst REDIRECT = {REDIRECT!r};\n" + code


@pytest.mark.parametrize("which", ["frontend", "fullstack"])
def test_configs_the_dev_server_writes_at_run_time_are_seen(frontend, fullstack, tmp_path, which):
    """The dev server (the agent's code) writes a jsconfig redirect and a .npmrc into the frontend folder at run
    time, and tries to rewrite the injected spec and rename the spec folder: the specs and their folder are
    root's (refused), and the kernel's watch names every runner-relevant file that appeared."""
    task = frontend if which == "frontend" else fullstack
    v = task.score(_dev_server(task, _runtime(RUNTIME_CONFIGS)), tmp_path / which)
    assert not v.resolved, said(v)
    assert any("frontend/jsconfig.json" in t and "runner-relevant" in t for t in v.tampering), said(v)
    assert any("frontend/.npmrc" in t for t in v.tampering), said(v)
    text = logs(v)
    assert "hostile: could not rewrite spec EACCES" in text
    assert "hostile: could not rename tests" in text and "hostile: did rename tests" not in text


REACH_PLAYWRIGHT = """
import pbenchFs from 'node:fs';

const pbenchTry = (what, act) => {
  try { act(); console.log(`hostile: did ${what}`); } catch (e) { console.log(`hostile: could not ${what} ${e.code}`); }
};
setTimeout(() => {
  for (const pid of pbenchFs.readdirSync('/proc').filter((p) => /^\\d+$/.test(p))) {
    let cmd = '';
    try { cmd = pbenchFs.readFileSync(`/proc/${pid}/cmdline`, 'utf8'); } catch (e) { continue; }
    if (!cmd.includes('cli.js')) continue;
    pbenchTry(`append a summary to ${pid}`, () => pbenchFs.appendFileSync(`/proc/${pid}/fd/1`, '\\n  99 passed (1.0s)\\n'));
    pbenchTry(`signal ${pid}`, () => process.kill(Number(pid), 'SIGSTOP'));
  }
  pbenchTry('write the report', () => pbenchFs.writeFileSync('/pbench/pw/stage/playwright.json', '{}'));
  pbenchTry('read the job', () => pbenchFs.readFileSync('/pbench/in/job.json'));
}, 4000).unref();
"""


def test_the_dev_server_cannot_reach_playwright_its_report_or_the_job(frontend, tmp_path):
    """While Playwright runs, the dev server tries to append a summary to Playwright's output, stop it, write
    its JSON report and read the job (which names the graded tests the witnesses copy): Playwright runs as another user, its report
    stage is its own, the job is root's. Every attempt is refused; the wrong solution fails."""
    v = frontend.score(_dev_server(frontend, REACH_PLAYWRIGHT), tmp_path / "reach")
    assert not v.resolved and v.status == "tests_failed", said(v)
    text = logs(v)
    assert "hostile: could not write the report EACCES" in text
    assert "hostile: could not read the job EACCES" in text
    assert "hostile: did append" not in text and "hostile: did signal" not in text
    assert "hostile: could not append a summary" in text


def test_a_dev_server_that_never_answers_is_the_patchs_timeout(frontend, tmp_path):
    """A dev server that hangs at start-up, with the frontend timeout lowered to 60 s: one attempt, `timeout`
    charged to the patch, within timeout + 30 s."""
    source = dataclasses.replace(
        frontend.source, frontend=dataclasses.replace(frontend.source.frontend, timeout_s=60)
    )
    patch = _dev_server(frontend, "setInterval(() => {}, 1000);\nawait new Promise(() => {});\n")
    start = time.monotonic()
    v = evaluation.score_instance(
        frontend.instance,
        frontend.prediction(patch),
        source,
        frontend.repo,
        tmp_path / "hang",
        cache=evaluation.VerdictCache(tmp_path / "cache"),
    )
    assert v.status == "timeout" and v.blame == "patch" and v.attempts == 1, said(v)
    assert time.monotonic() - start <= 60 + 30


def test_a_dev_server_that_floods_its_output_is_cut_and_charged_to_the_patch(frontend, tmp_path):
    """The dev server prints 400 MiB: the runner's pipe cuts it at the cap (the dev server too is counted),
    stops the run, and charges it to the patch in one attempt."""
    flood = "const pbenchChunk = 'x'.repeat(1 << 20) + '\\n';\nfor (let i = 0; i < 400; i++) process.stdout.write(pbenchChunk);\n"
    v = frontend.score(_dev_server(frontend, flood), tmp_path / "flood")
    assert not v.resolved and v.blame == "patch" and v.attempts == 1, said(v)
    assert "cap" in v.note, said(v)


def test_fullstack_both_sides_guarded_in_one_patch(fullstack, tmp_path):
    """One patch against both sides of the fullstack instance: the backend's report objects replaced in memory,
    the frontend's @playwright/test redirected through jsconfig paths. Neither side can pass; the verdict names
    what each side's guards saw."""
    from test_judge import IN_MEMORY

    patch = (
        fullstack.at_import("backend/app/main.py", IN_MEMORY)
        + new("frontend/jsconfig.json", REDIRECT)
        + new("frontend/pw-shim.mjs", SHIM)
    )
    v = fullstack.score(patch, tmp_path / "both")
    assert not v.resolved, said(v)
    assert v.backend_status != "resolved" and v.frontend_status == "patch_touches_tests", said(v)
    assert any("(must fail) was reported passed" in t or "was replaced" in t for t in v.tampering), said(v)
