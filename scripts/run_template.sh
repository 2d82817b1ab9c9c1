#!/usr/bin/env bash
# The fastapi/full-stack-fastapi-template season end to end, given a local mirror of the upstream repository:
#
#   scripts/run_template.sh MIRROR_PATH [PRS_EXPORT]
#
#   1. images: base + Postgres (bootstrap), then the backend environment image of the current uv lock;
#   2. offline filter counts over the whole export, every era allowed (scripts/export_offline_stages.py);
#   3. the published instance #1396 through the engine: base + test_patch, then base + patch + test_patch;
#   4. the curation season `template` (data/season_defs/template.toml) on the export against the mirror;
#   5. the reproduction check against instance-1396.jsonl (fields, F2P, P2P);
#   6. `pbench validate` (gold resolves every instance, empty none) on the season's corpus;
#   7. `pbench cleanup` and a check that no container of ours is left.
#
# Nothing of the upstream repository is written into this project: the engine clones the mirror into
# data/cache/repos/ (gitignored). Outputs: data/seasons/template/, data/runs/self-test-*/, and the logs
# and timings of this script in $PBENCH_TEMPLATE_OUT (default data/cache/template-run/). Not part of CI.
# Figures from a run are in docs/validation.md. Environment: PBENCH_LIMIT=N extracts at most N PRs.
set -euo pipefail

MIRROR=${1:?usage: scripts/run_template.sh MIRROR_PATH [PRS_EXPORT]}
HERE=$(cd "$(dirname "$0")/.." && pwd)
REF=$(cd "$HERE/.." && pwd)/shared/reference/fastapi-template
PRS=${2:-$REF/prs.jsonl}
INSTANCE=$REF/instance-1396.jsonl
OUT=${PBENCH_TEMPLATE_OUT:-$HERE/data/cache/template-run}
PBENCH=${PBENCH:-pbench}
# The template's cached extraction results live apart from the demo's: a rerun resumes from the PRs that
# finished, and results cached by another harness version of the demo never meet this season.
export PREFECT_LOCAL_STORAGE_PATH=${PREFECT_LOCAL_STORAGE_PATH:-$HERE/data/cache/prefect-storage-template}
cd "$HERE"

[ -d "$MIRROR" ] || { echo "no mirror at $MIRROR" >&2; exit 2; }
git --git-dir "$MIRROR" rev-parse -q --verify 'fe3bafc6f6732698ed2c58424f64065a4209ad47^{commit}' >/dev/null \
  || git --git-dir "$MIRROR/.git" rev-parse -q --verify 'fe3bafc6f6732698ed2c58424f64065a4209ad47^{commit}' >/dev/null \
  || { echo "$MIRROR does not hold the base commit of #1396 (fe3bafc6)" >&2; exit 2; }
[ -f "$PRS" ] || { echo "no PR export at $PRS" >&2; exit 2; }
mkdir -p "$OUT"
trap '$PBENCH cleanup >/dev/null 2>&1 || true' EXIT

step() { printf '\n== %s\n' "$*"; }
timed() { # timed NAME CMD...: run, keep the output, record the seconds
  local name=$1; shift
  local t0=$SECONDS rc=0
  "$@" >"$OUT/$name.log" 2>&1 || rc=$?
  echo "$name $((SECONDS - t0))s exit=$rc" | tee -a "$OUT/timings.txt"
  return $rc
}

step "1. images"
: >"$OUT/timings.txt"
timed bootstrap $PBENCH images bootstrap
timed env-image $PBENCH images env --source fastapi-template --mirror "$MIRROR" \
  --commit fe3bafc6f6732698ed2c58424f64065a4209ad47
cat "$OUT/env-image.log"

step "2. offline filter counts over the whole export (all eras allowed)"
python3 scripts/export_offline_stages.py --export "$PRS" --out "$OUT/offline" >"$OUT/offline.txt"
sed -n '1,4p' "$OUT/offline.txt"

step "3. #1396 through the engine (pbench run-tests)"
python3 - "$INSTANCE" "$OUT" <<'EOF'
import json, sys
inst = json.loads(open(sys.argv[1]).readline())
for key in ("patch", "test_patch"):
    open(f"{sys.argv[2]}/1396-{key}.diff", "w").write(inst[key])
EOF
# exit 0 = the harness ran (the failing test at base is the expected outcome)
timed run-tests-base $PBENCH run-tests --source fastapi-template --mirror "$MIRROR" \
  fe3bafc6f6732698ed2c58424f64065a4209ad47 --patch "$OUT/1396-test_patch.diff" --out "$OUT/1396-base"
timed run-tests-head $PBENCH run-tests --source fastapi-template --mirror "$MIRROR" \
  fe3bafc6f6732698ed2c58424f64065a4209ad47 --patch "$OUT/1396-patch.diff" \
  --patch "$OUT/1396-test_patch.diff" --out "$OUT/1396-head"
for side in base head; do
  grep -E '^=+ .*(passed|failed).* =+$' "$OUT/1396-$side/test.log" | sed "s/^/  $side: /"
done

step "4. curation season template"
LIMIT=()
[ -n "${PBENCH_LIMIT:-}" ] && LIMIT=(--limit "$PBENCH_LIMIT")
timed curate $PBENCH curate --season template --source fastapi-template --prs-file "$PRS" --mirror "$MIRROR" \
  "${LIMIT[@]}"
tail -3 "$OUT/curate.log"

step "5. reproduction of the published instance 1396"
python3 - "$INSTANCE" "$HERE/data/seasons/template/instances.jsonl" <<'EOF'
import json, re, sys
pub = json.loads(open(sys.argv[1]).readline())
ours = {i["instance_id"]: i for i in map(json.loads, open(sys.argv[2]))}.get(pub["instance_id"])
if ours is None:
    sys.exit(f"{pub['instance_id']} is not in the season's corpus")
# git writes full blob ids on `index` lines of the diff; the published patches carry 7-hex ones
short = lambda s: re.sub(r"^index ([0-9a-f]{7})[0-9a-f]*\.\.([0-9a-f]{7})[0-9a-f]*", r"index \1..\2", s, flags=re.M)
for key in ("base_commit", "head_commit", "created_at", "stack_domain", "contamination_tier", "problem_statement"):
    print(f"  {key:20} {'same' if pub[key] == ours[key] else 'DIFFERENT'}")
for key in ("patch", "test_patch", "test_patch_backend", "test_patch_frontend"):
    same = short(ours[key]) == pub[key]
    print(f"  {key:20} {'same (index lines abbreviated)' if same else 'DIFFERENT'}")
for key in ("fail_to_pass", "pass_to_pass"):
    a, b = set(pub[key]["backend"]), set(ours[key]["backend"])
    print(f"  {key:20} published {len(a)}, ours {len(b)}, only published {len(a - b)}, only ours {len(b - a)}")
files = {t.split("::")[0] for t in pub["fail_to_pass"]["backend"] + pub["pass_to_pass"]["backend"]}
p2p_files = {t for t in ours["pass_to_pass"]["backend"] if t.split("::")[0] in files}
print(f"  pass_to_pass restricted to the published test files {sorted(files)}: "
      f"{'equal' if p2p_files == set(pub['pass_to_pass']['backend']) else 'DIFFERENT'}")
print(f"  environment          published {pub['environment']}\n                       ours      {ours['environment']}")
EOF

step "6. self-test: gold resolves every instance, empty none"
timed validate $PBENCH validate --dataset template --max-workers 1 --mirror "$MIRROR" || true
grep -E "self-test|resolved" "$OUT/validate.log" | tail -20

step "7. cleanup"
$PBENCH cleanup
left=$(docker ps -aq --filter label=io.prototypebench.managed | wc -l)
echo "containers of ours left: $left"
echo "timings: $OUT/timings.txt"
