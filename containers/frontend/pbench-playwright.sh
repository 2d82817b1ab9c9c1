#!/bin/sh
# pbench-playwright.sh [playwright test args...]
# The frontend test step, run from the frontend dir of the patched checkout, after
# `pbench-link-node-modules` (a prestart step). In order:
#   1. PBENCH_FORWARD="8000=backend:8000 ..."  TCP forwards from localhost to other containers (optional)
#   2. PBENCH_SERVE_COMMAND                     the frontend server, in the background (optional; e.g.
#                                               "npx vite --host 127.0.0.1 --port 5173 --strictPort"),
#                                               its output in $PBENCH_OUT/serve.log
#   3. wait until PBENCH_SERVE_URL (default $PBENCH_BASE_URL) answers, PBENCH_SERVE_TIMEOUT s at most (120);
#      without a server command, wait only when PBENCH_SERVE_URL is set (a server in another container)
#   4. $PBENCH_PW_COMMAND -c $PBENCH_PW_CONFIG "$@"   (default "npx --no-install playwright test"; never
#      pass --reporter: it would replace the JSON reporter of the config)
#   5. when Playwright aborted because spec files failed to load (it has no equivalent of pytest's
#      --continue-on-collection-errors), the first report is kept as playwright-load-errors.json and the
#      run is repeated once with those files ignored (PBENCH_PW_IGNORE); PBENCH_PW_CONTINUE_ON_LOAD_ERRORS=0
#      turns that off
#   6. stop the server and the forwards
# Exit code: Playwright's (0 all passed, 1 a test failed or a file failed to load); 3 when the server did
# not answer in time or exited first (then no Playwright report exists).
# Timings go to $PBENCH_OUT/frontend-timings.json.
set -u
OUT="${PBENCH_OUT:-/pbench/out}"
HERE="$(cd "$(dirname "$0")" && pwd)"
CONFIG="${PBENCH_PW_CONFIG:-$HERE/playwright.pbench.config.mjs}"
PW="${PBENCH_PW_COMMAND:-npx --no-install playwright test}"
SERVE_URL="${PBENCH_SERVE_URL:-${PBENCH_BASE_URL:-}}"
mkdir -p "$OUT"
pids=""

now() { date +%s.%N; }
cleanup() {
  for pid in $pids; do kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT INT TERM

t0=$(now)
if [ -n "${PBENCH_FORWARD:-}" ]; then
  # shellcheck disable=SC2086
  setsid node "$HERE/pbench-forward.mjs" $PBENCH_FORWARD >>"$OUT/forward.log" 2>&1 &
  pids="$pids $!"
fi

if [ -n "${PBENCH_SERVE_COMMAND:-}" ]; then
  echo "\$ $PBENCH_SERVE_COMMAND" >>"$OUT/serve.log"
  setsid sh -c "$PBENCH_SERVE_COMMAND" >>"$OUT/serve.log" 2>&1 &
  server=$!
  pids="$pids $server"
  if [ -z "$SERVE_URL" ]; then
    echo "pbench-playwright: PBENCH_SERVE_COMMAND needs PBENCH_SERVE_URL or PBENCH_BASE_URL" >&2
    exit 3
  fi
  if ! node "$HERE/pbench-wait-http.mjs" "$SERVE_URL" "${PBENCH_SERVE_TIMEOUT:-120}" "$server"; then
    tail -n 30 "$OUT/serve.log" >&2
    exit 3
  fi
elif [ -n "${PBENCH_SERVE_URL:-}" ]; then
  # The server runs in another container (reached directly or through PBENCH_FORWARD): wait for it too.
  node "$HERE/pbench-wait-http.mjs" "$PBENCH_SERVE_URL" "${PBENCH_SERVE_TIMEOUT:-120}" || exit 3
fi

t1=$(now)
JSON="${PBENCH_PW_JSON:-$OUT/playwright.json}"
export PBENCH_PW_JSON="$JSON"
# shellcheck disable=SC2086
$PW -c "$CONFIG" "$@"
code=$?
if [ "$code" != 0 ] && [ "${PBENCH_PW_CONTINUE_ON_LOAD_ERRORS:-1}" = 1 ] && [ -f "$JSON" ]; then
  broken=$(node "$HERE/pbench-load-errors.mjs" "$JSON" || true)
  if [ -n "$broken" ]; then
    first="$(dirname "$JSON")/playwright-load-errors.json"
    mv "$JSON" "$first"
    echo "pbench-playwright: spec files failed to load; running again without them:" $broken
    # shellcheck disable=SC2086
    PBENCH_PW_IGNORE="$broken" $PW -c "$CONFIG" "$@"
    code2=$?
    # The run as a whole failed (files did not load), whatever the second run says.
    [ "$code2" -gt 1 ] && code=$code2
  fi
fi
t2=$(now)
node -e '
  const [serve, test, code] = process.argv.slice(1);
  require("fs").writeFileSync(process.argv[4], JSON.stringify({serve_s: +(+serve).toFixed(3), playwright_s: +(+test).toFixed(3), exit_code: +code}) + "\n");
' "$(node -p "$t1 - $t0")" "$(node -p "$t2 - $t1")" "$code" "$OUT/frontend-timings.json"
exit $code
