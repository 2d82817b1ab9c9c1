#!/bin/sh
# install-deps.sh PACKAGE_MANAGER INSTALL_DIR
# Installs the app's dependencies exactly as locked, in /deps/<INSTALL_DIR>, without any browser
# download (PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 is set in the image).
set -eu
pm="$1"
dir="/deps/$2"
[ -n "${NPM_CONFIG_REGISTRY:-}" ] || unset NPM_CONFIG_REGISTRY
cd "$dir"
case "$pm" in
  npm)
    if [ ! -f package-lock.json ] && [ ! -f npm-shrinkwrap.json ]; then
      echo "no package-lock.json or npm-shrinkwrap.json in $dir" >&2; exit 2
    fi
    npm ci --no-audit --no-fund --cache /tmp/npm-cache ;;
  bun)
    if [ ! -f bun.lock ] && [ ! -f bun.lockb ]; then
      echo "no bun.lock or bun.lockb in $dir" >&2; exit 2
    fi
    BUN_INSTALL_CACHE_DIR=/tmp/bun-cache bun install --frozen-lockfile ;;
  *) echo "PACKAGE_MANAGER must be npm or bun, got '$pm'" >&2; exit 2 ;;
esac
rm -rf /tmp/npm-cache /tmp/bun-cache /root/.npm /root/.bun/install/cache
# Sanity: Playwright must be importable from here when the app has it.
if [ -d node_modules/@playwright/test ]; then
  node -e "require.resolve('@playwright/test')" && npx --no-install playwright --version
fi
