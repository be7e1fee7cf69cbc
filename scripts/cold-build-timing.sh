#!/usr/bin/env bash
# Times the README's two commands as a new user meets them (issue #39): a fresh clone, an empty
# cargo target directory, nothing built. Prints the machine (cores, load before and after each
# command) and a closing summary; the full transcripts stay under the work directory.
#
#   scripts/cold-build-timing.sh [demo|tests|beside|all]   (default: all = demo then tests)
#
#   demo    `time cargo run --release -- demo` in a fresh clone (build included)
#   tests   `time scripts/test.sh` in another fresh clone
#   beside  `time scripts/test.sh` in a fresh clone with a cold `cargo build --release` of a
#           second fresh clone running beside it (the test command on a busy machine)
#
# Environment: REF (commit to clone, default HEAD), WORK (work directory, default a new one
# under /tmp), FRESH_CARGO_HOME=1 (an empty cargo registry too, so crate downloads count),
# TIMINGS=1 (the demo's build with `--timings`: cargo's per-crate report, kept in the work dir).
# Targets on a 2-core machine: demo <= 12 min, tests <= 20 min (docs/benchmarks.md, "Build time").
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
what="${1:-all}"
ref="$(git -C "$repo" rev-parse "${REF:-HEAD}")"
work="${WORK:-$(mktemp -d /tmp/gantry-cold.XXXXXX)}"
mkdir -p "$work"
unset CARGO_TARGET_DIR CARGO_BUILD_TARGET_DIR RUSTC_WRAPPER RUSTC_WORKSPACE_WRAPPER CLIPPY_ARGS
if [ "${FRESH_CARGO_HOME:-0}" = 1 ]; then
    export CARGO_HOME="$work/cargo-home"
fi

summary=()
note() { echo "== $*"; }
clone() {
    rm -rf "$work/$1"
    git clone --quiet --no-local "$repo" "$work/$1"
    git -C "$work/$1" checkout --quiet "$ref"
}
# Runs a command in a clone with `time`, the load before and after, and its transcript kept.
timed() {
    local name="$1" dir="$2"
    shift 2
    local log="$work/$name.log" start status=0
    note "$name: $* (in $dir)"
    echo "before: $(uptime)" | tee "$log"
    start=$SECONDS
    (cd "$dir" && time "$@") >>"$log" 2>&1 || status=$?
    local secs=$((SECONDS - start))
    echo "after: $(uptime)" | tee -a "$log"
    grep -E 'Finished `release`|^phases:|^tests:|^real|^user|^sys' "$log" | sed 's/^/   /' || true
    summary+=("$(printf '%-7s %5d s (%d min %02d s), exit %s, log %s' "$name" "$secs" \
        $((secs / 60)) $((secs % 60)) "$status" "$log")")
    return 0
}

note "commit $ref, $(nproc) cores, $(rustc --version), work dir $work"
note "load: $(uptime)"

case "$what" in
demo | all)
    clone demo
    if [ "${TIMINGS:-0}" = 1 ]; then
        timed demo "$work/demo" cargo run --release --timings -- demo
        cp "$work"/demo/target/cargo-timings/cargo-timing.html "$work/demo-timings.html" || true
    else
        timed demo "$work/demo" cargo run --release -- demo
    fi
    ;;
esac
case "$what" in
tests | all)
    clone tests
    timed tests "$work/tests" scripts/test.sh
    ;;
esac
if [ "$what" = beside ]; then
    clone tests
    clone other
    (cd "$work/other" && cargo build --release >"$work/other-build.log" 2>&1) &
    other=$!
    timed beside "$work/tests" scripts/test.sh
    wait "$other" || echo "the build beside failed: $work/other-build.log" >&2
fi

note "summary (commit ${ref:0:10}, $(nproc) cores; targets: demo <= 720 s, tests <= 1200 s)"
printf '%s\n' "${summary[@]}"
