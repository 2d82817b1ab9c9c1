#!/bin/sh
# install-deps.sh PACKAGE_MANAGER INSTALL_DIR
# Installs the app's dependencies exactly as locked, in /deps/<INSTALL_DIR>, as the unprivileged build user,
# without any browser download (PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 is set in the image). Lifecycle scripts
# are off: the project's own never run, and a dependency's only when /pbench/allowed-scripts.txt names it
# (the packages the base lock itself needed them for, computed by the harness from that lock). Of those,
# /pbench/optional-scripts.txt names the ones only optional dependencies bring (e.g. canvas under jsdom): when
# such a script fails (it wants a system library or a download), the package is removed and the install goes
# on, as npm itself does with a failed optional dependency; the build log names it.
set -eu
pm="$1"
dir="/deps/$2"
[ -n "${NPM_CONFIG_REGISTRY:-}" ] || unset NPM_CONFIG_REGISTRY
allowed=$(cat /pbench/allowed-scripts.txt 2>/dev/null || true)
optional=$(cat /pbench/optional-scripts.txt 2>/dev/null || true)
mkdir -p "$HOME"
cd "$dir"
case "$pm" in
  npm)
    if [ ! -f package-lock.json ] && [ ! -f npm-shrinkwrap.json ]; then
      echo "no package-lock.json or npm-shrinkwrap.json in $dir" >&2; exit 2
    fi
    npm ci --ignore-scripts --no-audit --no-fund --cache "$HOME/npm-cache"
    if [ -n "$allowed" ]; then
      echo "install scripts allowed (the base lock needs them): $allowed"
      # shellcheck disable=SC2086
      npm rebuild --cache "$HOME/npm-cache" $allowed
    fi
    for name in $optional; do
      echo "install script of an optional dependency: $name"
      if ! npm rebuild --cache "$HOME/npm-cache" "$name" >"$HOME/optional.log" 2>&1; then
        tail -5 "$HOME/optional.log"
        echo "optional dependency $name: its install script failed; removed, as npm does with a failed optional dependency"
        find . -path "*/node_modules/$name" -prune -exec rm -rf {} +
      fi
    done ;;
  bun)
    if [ ! -f bun.lock ] && [ ! -f bun.lockb ]; then
      echo "no bun.lock or bun.lockb in $dir" >&2; exit 2
    fi
    BUN_INSTALL_CACHE_DIR="$HOME/bun-cache" bun install --frozen-lockfile --ignore-scripts
    if [ -n "$allowed" ]; then
      echo "lifecycle scripts allowed (the base package.json trusts them): $allowed"
      # shellcheck disable=SC2086
      BUN_INSTALL_CACHE_DIR="$HOME/bun-cache" bun pm trust $allowed
    fi ;;
  *) echo "PACKAGE_MANAGER must be npm or bun, got '$pm'" >&2; exit 2 ;;
esac
rm -rf "$HOME"
# Vite and friends keep caches in node_modules/.vite*, .cache: the tests' user may create entries at the top
# of each node_modules (sticky; the packages stay the build user's).
find /deps -name node_modules -type d -prune -exec chmod 1777 {} +
# Sanity: Playwright must be importable from here when the app has it.
if [ -d node_modules/@playwright/test ]; then
  node -e "require.resolve('@playwright/test')" && node node_modules/@playwright/test/cli.js --version
fi
