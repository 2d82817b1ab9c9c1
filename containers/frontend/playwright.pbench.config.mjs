// Playwright config the harness injects at run time: `npx playwright test -c /pbench/in/playwright.pbench.config.mjs`,
// run from the frontend dir. It never edits the repository: it imports the repository's own playwright.config.*
// (when there is one) and overrides only what the harness must control:
//
//   browser      every project runs Debian's Chromium headless (PBENCH_CHROMIUM, default Debian's
//                chromium-headless-shell: the browser Playwright runs headless by default; /usr/bin/chromium when
//                the image has no shell), with the flags it needs as root in a container; projects for
//                firefox/webkit are dropped (no such browser here) and removed from other projects'
//                dependencies; a `channel` is removed.
//   reporter     list (to the test log) + JSON to PBENCH_PW_JSON (default /pbench/out/playwright.json).
//   outputDir    PBENCH_PW_OUTPUT_DIR (default /pbench/out/test-results): nothing is written into the repository
//                tree but what the tests write themselves.
//   retries      PBENCH_PW_RETRIES (default 0): one run, one verdict. Set it > 0 only to detect flaky tests.
//   workers      PBENCH_PW_WORKERS (default 1).
//   webServer    none: the harness starts the servers itself and waits for them before running Playwright.
//   baseURL      PBENCH_BASE_URL, when set (top level and every project that sets its own).
//   globalTimeout  PBENCH_PW_GLOBAL_TIMEOUT_MS, when set: Playwright stops and still writes its JSON report
//                before the harness's wall clock kills the container.
//   trace/video  off; updateSnapshots 'none' (a missing snapshot fails without being written).
//   testIgnore   + PBENCH_PW_IGNORE (absolute or frontend-relative paths, whitespace separated): spec files that
//                failed to load in a first run, so that a second run gives the other files' outcomes.
//   metadata.pbench  { frontendDir, repoConfig, droppedProjects, ignored }: lets the report parser make paths
//                relative to the frontend dir.
//   tsconfig     PBENCH_PW_TSCONFIG, when set: the one tsconfig every spec and what it imports compiles with,
//                the harness's (containers/runner/pbench_tsconfig.py), whatever tsconfig the tree holds.
//
// Relative paths of the repository's config (testDir, outputDir, snapshotDir, globalSetup, globalTeardown,
// tsconfig, per-project testDir/snapshotDir) are resolved against the repository config's directory, because
// Playwright would otherwise resolve them against THIS file's directory.
//
// Inputs: PBENCH_FRONTEND_DIR (default: the cwd), PBENCH_PW_REPO_CONFIG (default: the first of Playwright's own
// default names found in the frontend dir). No import of '@playwright/test' here: this file may live outside any
// node_modules tree.

import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';

const env = process.env;
const CONFIG_NAMES = [
  'playwright.config.ts',
  'playwright.config.js',
  'playwright.config.mts',
  'playwright.config.mjs',
  'playwright.config.cts',
  'playwright.config.cjs',
];
const CHROMIUM_ARGS = ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--disable-background-networking'];
const CHROMIUM_LIKE = new Set(['chromium', 'chrome']);

const frontendDir = path.resolve(env.PBENCH_FRONTEND_DIR || process.cwd());
const repoConfig = findRepoConfig();
const repoConfigDir = repoConfig ? path.dirname(repoConfig) : frontendDir;
const outDir = env.PBENCH_OUT || '/pbench/out';
const jsonFile = path.resolve(env.PBENCH_PW_JSON || path.join(outDir, 'playwright.json'));
const outputDir = path.resolve(env.PBENCH_PW_OUTPUT_DIR || path.join(outDir, 'test-results'));
const HEADLESS_SHELL = '/usr/bin/chromium-headless-shell';
const executablePath = env.PBENCH_CHROMIUM || (fs.existsSync(HEADLESS_SHELL) ? HEADLESS_SHELL : '/usr/bin/chromium');
const extraArgs = (env.PBENCH_CHROMIUM_ARGS || '').split(/\s+/).filter(Boolean);
const ignored = (env.PBENCH_PW_IGNORE || '').split(/\s+/).filter(Boolean).map((p) => path.resolve(frontendDir, p));
const ignoreRegexps = ignored.map((p) => new RegExp(`^${p.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}$`));

function findRepoConfig() {
  if (env.PBENCH_PW_REPO_CONFIG) {
    const given = path.resolve(frontendDir, env.PBENCH_PW_REPO_CONFIG);
    if (!fs.existsSync(given)) throw new Error(`PBENCH_PW_REPO_CONFIG: ${given} does not exist`);
    return given;
  }
  for (const name of CONFIG_NAMES) {
    const candidate = path.join(frontendDir, name);
    if (fs.existsSync(candidate)) return candidate;
  }
  return null;
}

// Playwright's own rule for a config file (its transform module's requireOrImport): an ES module (.mjs/.mts, or
// a package with "type": "module") is imported; anything else is required through Playwright's Babel hook, which
// turns `import` statements into require calls. A TypeScript config with `import` statements in a package
// without "type": "module" (langflow's) only loads that way: Node's import() takes it for CommonJS source. The
// module lives at `playwright/lib/transform/transform` (up to 1.5x) or under `transform` of the bundled
// `playwright/lib/common` (later); without either, import() as before.
function playwrightLoader() {
  const req = createRequire(path.join(repoConfigDir, 'noop.js'));
  for (const [subpath, pick] of [
    ['playwright/lib/transform/transform', (m) => m.requireOrImport],
    ['playwright/lib/common', (m) => m.transform && m.transform.requireOrImport],
  ]) {
    try {
      const fn = pick(req(subpath));
      if (typeof fn === 'function') return fn;
    } catch {
      // not this Playwright's layout
    }
  }
  return null;
}

async function loadRepoConfig() {
  if (!repoConfig) return {};
  const requireOrImport = playwrightLoader();
  const mod = requireOrImport ? await requireOrImport(repoConfig) : await import(pathToFileURL(repoConfig).href);
  let config = mod.default ?? mod;
  // A CommonJS config transpiled to ESM can come back as { default: config }.
  if (config && typeof config === 'object' && 'default' in config && Object.keys(config).length === 1) {
    config = config.default;
  }
  if (typeof config === 'function') config = await config();
  return config && typeof config === 'object' ? config : {};
}

function resolveDir(value) {
  return typeof value === 'string' && value !== '' ? path.resolve(repoConfigDir, value) : value;
}

// Playwright's own rule for globalSetup/globalTeardown: a file relative to the config's directory when it
// exists there, else a module resolved from that directory.
function resolveScript(value) {
  if (typeof value !== 'string' || value === '') return value;
  const local = path.resolve(repoConfigDir, value);
  if (fs.existsSync(local)) return local;
  try {
    return createRequire(path.join(repoConfigDir, 'noop.js')).resolve(value);
  } catch {
    return local;
  }
}

function resolveScripts(value) {
  return Array.isArray(value) ? value.map(resolveScript) : resolveScript(value);
}

function withIgnored(testIgnore) {
  if (!ignoreRegexps.length) return testIgnore;
  const current = testIgnore === undefined ? [] : Array.isArray(testIgnore) ? testIgnore : [testIgnore];
  return [...current, ...ignoreRegexps];
}

function browserOf(use, fallback) {
  return (use && (use.browserName || use.defaultBrowserType)) || fallback;
}

function patchUse(use) {
  const out = { ...(use || {}) };
  const launchOptions = { ...(out.launchOptions || {}) };
  launchOptions.executablePath = executablePath;
  launchOptions.args = [...(launchOptions.args || []), ...CHROMIUM_ARGS, ...extraArgs];
  out.launchOptions = launchOptions;
  out.headless = true;
  delete out.channel;
  out.trace = 'off';
  out.video = 'off';
  if (env.PBENCH_BASE_URL) out.baseURL = env.PBENCH_BASE_URL;
  return out;
}

function patchProjects(projects, topBrowser) {
  if (!Array.isArray(projects)) return { projects, dropped: [] };
  const kept = [];
  const dropped = [];
  for (const project of projects) {
    const browser = browserOf(project.use, topBrowser);
    if (CHROMIUM_LIKE.has(browser)) kept.push(project);
    else dropped.push(project.name);
  }
  const keep = (names) => (Array.isArray(names) ? names.filter((n) => !dropped.includes(n)) : names);
  const patched = kept.map((project) => {
    const out = { ...project, use: patchUse({ ...project.use, browserName: 'chromium' }) };
    for (const key of ['testDir', 'snapshotDir']) {
      if (key in out) out[key] = resolveDir(out[key]);
    }
    if ('outputDir' in out) out.outputDir = path.join(outputDir, project.name || 'project');
    if ('dependencies' in out) out.dependencies = keep(out.dependencies);
    // A project's own testIgnore replaces the top-level one: add the ignored files to both.
    if ('testIgnore' in out) out.testIgnore = withIgnored(out.testIgnore);
    if (out.teardown && dropped.includes(out.teardown)) delete out.teardown;
    return out;
  });
  return { projects: patched, dropped };
}

const base = await loadRepoConfig();
const topBrowser = browserOf(base.use, 'chromium');
const { projects, dropped } = patchProjects(base.projects, topBrowser);

const config = {
  ...base,
  testDir: resolveDir(base.testDir ?? '.'),
  outputDir,
  retries: Number.parseInt(env.PBENCH_PW_RETRIES || '0', 10),
  workers: Number.parseInt(env.PBENCH_PW_WORKERS || '1', 10),
  maxFailures: 0,
  testIgnore: withIgnored(base.testIgnore),
  reporter: [['list'], ['json', { outputFile: jsonFile }]],
  webServer: undefined,
  updateSnapshots: 'none',
  use: patchUse({ ...base.use, ...(CHROMIUM_LIKE.has(topBrowser) ? {} : { browserName: 'chromium' }) }),
  metadata: {
    ...(base.metadata || {}),
    pbench: { frontendDir, repoConfig, droppedProjects: dropped, ignored },
  },
};
for (const key of ['snapshotDir', 'tsconfig']) {
  if (key in base) config[key] = resolveDir(base[key]);
}
for (const key of ['globalSetup', 'globalTeardown']) {
  if (key in base) config[key] = resolveScripts(base[key]);
}
if (projects !== undefined) config.projects = projects;
if (env.PBENCH_PW_TSCONFIG) config.tsconfig = env.PBENCH_PW_TSCONFIG;
if (env.PBENCH_PW_GLOBAL_TIMEOUT_MS) config.globalTimeout = Number.parseInt(env.PBENCH_PW_GLOBAL_TIMEOUT_MS, 10);
if (dropped.length) console.log(`pbench: dropped non-Chromium projects: ${dropped.join(', ')}`);

export default config;
