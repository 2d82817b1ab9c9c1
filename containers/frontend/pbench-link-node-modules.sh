#!/bin/sh
# pbench-link-node-modules [DEPS_ROOT] [REPO_ROOT]
# Symlink every top-level node_modules under DEPS_ROOT (default /deps) into REPO_ROOT (default
# /work/repo) at the same relative path: /deps/frontend/node_modules -> /work/repo/frontend/node_modules.
# Run it AFTER the patches are applied and snapshotted (a prestart step): git then never sees the links.
# A node_modules the checkout already has (committed, or a real directory) is left alone, with a warning.
set -eu
deps="${1:-/deps}"
repo="${2:-/work/repo}"
found=0
for nm in $(find "$deps" -name node_modules -type d -prune | sort); do
  rel="${nm#"$deps"/}"
  target="$repo/$rel"
  found=1
  if [ -L "$target" ]; then
    rm -f "$target"
  elif [ -e "$target" ]; then
    echo "pbench-link-node-modules: $target exists in the checkout; left as it is" >&2
    continue
  fi
  mkdir -p "$(dirname "$target")"
  ln -s "$nm" "$target"
  echo "linked $target -> $nm"
done
[ "$found" = 1 ] || { echo "pbench-link-node-modules: no node_modules under $deps" >&2; exit 1; }
