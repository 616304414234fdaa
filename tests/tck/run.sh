#!/usr/bin/env bash
# Run the A2A TCK against a murmur-door standalone door (tests/tck/README.md).
#
#   tests/tck/run.sh [--auth] [--level must|should|may] [--out DIR] [-- pytest args...]
#
# Packs tests/tck/sut (with --auth: its manifest replaced by tests/tck/murmur-auth.yaml),
# installs it into a temporary project and MURMUR_HOME, starts the door (loopback only,
# bounded by --deadline), runs the TCK on every transport the card lists, copies the
# reports to --out, and stops the door. Environment:
#   TCK_DIR     the a2a-tck checkout (default /tmp/tck), with its venv in TCK_DIR/.venv
#   MUR_PYTHON  a python that has murmur-door's dependencies (default: python3)
#   TCK_TIMEOUT seconds the TCK may run (default 1200)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
TCK_DIR="${TCK_DIR:-/tmp/tck}"
TCK_PYTHON="${TCK_PYTHON:-$TCK_DIR/.venv/bin/python}"
MUR_PYTHON="${MUR_PYTHON:-python3}"
TCK_TIMEOUT="${TCK_TIMEOUT:-1200}"
AUTH=0
LEVEL=()
OUT="$PWD/tck-reports"
EXTRA=()
while [ $# -gt 0 ]; do
  case "$1" in
    --auth) AUTH=1 ;;
    --level) LEVEL=(--level "$2"); shift ;;
    --out) OUT="$2"; shift ;;
    --) shift; EXTRA=("$@"); break ;;
    *) echo "usage: $0 [--auth] [--level must|should|may] [--out DIR] [-- pytest args]" >&2; exit 2 ;;
  esac
  shift
done

WORK="$(mktemp -d /tmp/mur-tck.XXXXXX)"
export MURMUR_HOME="$WORK/home"
mkdir -p "$MURMUR_HOME" "$WORK/project" "$WORK/src"
mur() { PYTHONPATH="$REPO" "$MUR_PYTHON" -m launcher.cli "$@"; }

DOOR_PID=""
SESSION=""
cleanup() {
  if [ -n "$SESSION" ]; then (cd "$WORK/project" && mur stop "$SESSION" >/dev/null 2>&1) || true; fi
  if [ -n "$DOOR_PID" ]; then
    for _ in $(seq 1 50); do kill -0 "$DOOR_PID" 2>/dev/null || break; sleep 0.1; done
    kill "$DOOR_PID" 2>/dev/null || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

cp "$HERE/sut/murmur.yaml" "$HERE/sut/tck_agent.py" "$WORK/src/"
if [ "$AUTH" = 1 ]; then
  cp "$HERE/murmur-auth.yaml" "$WORK/src/murmur.yaml"
  TCK_TOKEN="$("$MUR_PYTHON" -c 'import secrets; print(secrets.token_urlsafe(32))')"
  export TCK_TOKEN
fi

cd "$WORK/project"
mur pack "$WORK/src" -o "$WORK/tck-sut.mur.zip" >/dev/null
mur install "$WORK/tck-sut.mur.zip" >/dev/null
# The door ends by itself at the deadline even if this script is killed.
DEADLINE=$(( TCK_TIMEOUT + 120 ))
timeout "$(( DEADLINE + 30 ))" bash -c 'PYTHONPATH="$1" exec "$2" -m launcher.cli run --capsule local/tck-sut --capsule-version 1.0.0 --deadline "$3s" --isolation "${MURMUR_ISOLATION:-auto}" --json' \
  _ "$REPO" "$MUR_PYTHON" "$DEADLINE" > "$WORK/door.out" 2> "$WORK/door.err" &
DOOR_PID=$!
for _ in $(seq 1 600); do
  grep -q '"event":"ready"' "$WORK/door.out" 2>/dev/null && break
  kill -0 "$DOOR_PID" 2>/dev/null || { cat "$WORK/door.err" >&2; exit 1; }
  sleep 0.1
done
READY="$(head -n 1 "$WORK/door.out")"
DOOR_URL="$("$MUR_PYTHON" -c 'import json, sys; print(json.loads(sys.argv[1])["door_url"])' "$READY")"
SESSION="$("$MUR_PYTHON" -c 'import json, sys; print(json.loads(sys.argv[1])["session_id"])' "$READY")"
RECORDS="$("$MUR_PYTHON" -c 'import json, sys; print(json.loads(sys.argv[1])["records_dir"])' "$READY")"
echo "door: $DOOR_URL (session $SESSION, auth=$AUTH)"

PLUGINS=(-p tck_loopback)
[ "$AUTH" = 1 ] && PLUGINS+=(-p tck_auth)
status=0
(cd "$TCK_DIR" && rm -rf reports && PYTHONPATH="$HERE" timeout "$TCK_TIMEOUT" \
   "$TCK_PYTHON" run_tck.py --sut-host "$DOOR_URL" "${LEVEL[@]}" -- \
   "${PLUGINS[@]}" --webhook-host 127.0.0.1 -p no:cacheprovider "${EXTRA[@]}") || status=$?
mkdir -p "$OUT"
cp -r "$TCK_DIR/reports/." "$OUT/" 2>/dev/null || true
cp "$WORK/door.err" "$OUT/door.err" 2>/dev/null || true
cp "$RECORDS/trace.jsonl" "$OUT/door-trace.jsonl" 2>/dev/null || true
"$MUR_PYTHON" "$HERE/summarize.py" "$OUT/compatibility.json" 2>/dev/null || true
echo "reports: $OUT (TCK exit status $status)"
exit "$status"
