#!/usr/bin/env bash
# Runs the test phase of scripts/test.sh RUNS times (default 5) with two CPU-burning processes
# beside it, as on a busy machine, and prints each run's counts. Exits non-zero if any run had
# a failure; the full output of a failed run is kept in target/under-load/run-N.log. Build
# first (scripts/test.sh).
#
# `--beside-build`: instead, the whole README test command (`scripts/test.sh`, cold, in a fresh
# clone) with a second cold `cargo build --release` running beside it until the tests end:
# `scripts/cold-build-timing.sh beside` (issue #39's third figure; its summary line says
# whether the tests were green and how long they took).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = --beside-build ]; then
    exec scripts/cold-build-timing.sh beside
fi
# The same compiler settings as scripts/test.sh's build, so its test binaries are reused as built.
source scripts/clippy-env.sh
runs="${1:-5}"
shift || true

hogs=()
for _ in 1 2; do
    (while :; do :; done) &
    hogs+=("$!")
done
trap 'kill "${hogs[@]}" 2>/dev/null || true' EXIT

keep="${CARGO_TARGET_DIR:-target}/under-load"
mkdir -p "$keep"
bad=0
for i in $(seq 1 "$runs"); do
    start=$SECONDS
    log="$(mktemp)"
    cargo nextest run --workspace --locked --no-fail-fast "$@" >"$log" 2>&1 || true
    line="$(grep -E '^ *Summary \[' "$log" | tail -n1 | sed -E 's/^ *//')"
    echo "run $i/$runs under load ($((SECONDS - start)) s): ${line:-no summary}"
    if ! grep -qE 'Summary .* [0-9]+ passed' "$log" || grep -qE '[1-9][0-9]* (failed|timed out)' <<<"$line"; then
        bad=$((bad + 1))
        grep -E '^ +(FAIL|TIMEOUT|SIGSEGV|SIGABRT) ' "$log" | sort -u | sed 's/^/    /' || true
        cp "$log" "$keep/run-$i.log"
        echo "    full output: $keep/run-$i.log"
    fi
    rm -f "$log"
done
echo "under load: $runs runs, $bad with failures"
[ "$bad" -eq 0 ]
