// node pbench-load-errors.mjs REPORT.json
// Prints, one per line, the spec files that failed to load, when the report shows a run that Playwright
// aborted because of them (top-level errors, no test run at all). Prints nothing otherwise.
// Playwright has no --continue-on-collection-errors: pbench-playwright.sh reruns once with these files
// ignored (PBENCH_PW_IGNORE) so that the other files still give outcomes. Same rule as
// tasks_lib/playwright_report.py (`error_file`).
import fs from 'node:fs';

const report = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const stats = report.stats || {};
const ran = ['expected', 'unexpected', 'flaky', 'skipped'].some((k) => (stats[k] || 0) > 0);
const errors = report.errors || [];
if (ran || !errors.length) process.exit(0);

const SOURCE = /(\/[^\s'"`()]+\.[cm]?[jt]sx?)\b/g;
const files = new Set();
for (const error of errors) {
  let file = error.location && error.location.file;
  const text = `${error.message || ''}\n${error.stack || ''}`;
  if (!file) {
    const imported = /imported from (\/\S+)/.exec(text);
    if (imported) file = imported[1];
  }
  if (!file) {
    const inRoot = [...text.matchAll(SOURCE)].map((m) => m[1]).find((p) => !p.includes('/node_modules/'));
    if (inRoot) file = inRoot;
  }
  if (!file) process.exit(0); // an error not tied to a file (config, "No tests found"): nothing to retry
  files.add(file);
}
for (const file of files) console.log(file);
