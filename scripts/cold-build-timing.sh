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
#           second fresh clone running beside it, rebuilt until the tests end (the test
#           command on a busy machine: the issue's third figure; `scripts/test-under-load.sh
#           --beside-build` runs this)
#
# Environment: REF (commit to clone, default HEAD), WORK (work directory, default a new one
# under /tmp), FRESH_CARGO_HOME=1 (an empty cargo registry too, so crate downloads count),
# TIMINGS=1 (the demo's build with `--timings`: cargo's per-crate report, kept in the work dir),
# CPU=1 (the demo's build through scripts/rustc-cpu.sh: CPU seconds per crate, the top printed
# at the end, the whole table kept as demo-cpu.txt in the work dir).
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
    if [ "${CPU:-0}" = 1 ]; then
        export RUSTC_WRAPPER="$repo/scripts/rustc-cpu.sh" RUSTC_CPU_LOG="$work/demo-cpu.log"
    fi
    if [ "${TIMINGS:-0}" = 1 ]; then
        timed demo "$work/demo" cargo run --release --timings -- demo
        cp "$work"/demo/target/cargo-timings/cargo-timing.html "$work/demo-timings.html" || true
    else
        timed demo "$work/demo" cargo run --release -- demo
    fi
    if [ "${CPU:-0}" = 1 ]; then
        unset RUSTC_WRAPPER RUSTC_CPU_LOG
        "$repo/scripts/rustc-cpu.sh" --report "$work/demo-cpu.log" >"$work/demo-cpu.txt"
        note "CPU seconds per crate (release build of the demo; all: $work/demo-cpu.txt)"
        head -n 25 "$work/demo-cpu.txt"
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
    # The second build: a cold `cargo build --release` of another clone, started with the tests;
    # once it is done it rebuilds the workspace's crates again (`touch`), so the machine stays
    # busy until the tests end. Its log says how many builds ran and how long each took.
    other_log="$work/other-build.log"
    (
        cd "$work/other"
        n=0
        while :; do
            n=$((n + 1))
            start=$SECONDS
            cargo build --release >>"$other_log" 2>&1 &
            echo $! >"$work/other.pid"
            if wait $!; then
                echo "== build $n beside: $((SECONDS - start)) s, ok" >>"$other_log"
            else
                echo "== build $n beside: $((SECONDS - start)) s, FAILED" >>"$other_log"
                exit 1
            fi
            [ -e "$work/tests.done" ] && exit 0
            touch crates/*/src/lib.rs
        done
    ) &
    other=$!
    timed beside "$work/tests" scripts/test.sh
    touch "$work/tests.done"
    # The build in progress when the tests ended is not waited for: it is ended.
    kill "$other" "$(cat "$work/other.pid")" 2>/dev/null || true
    wait "$other" 2>/dev/null || true
    grep '^== build' "$other_log" | tail -n 5 | sed 's/^/   /' || true
    if grep -q 'FAILED' "$other_log"; then
        echo "the build beside failed: $other_log" >&2
    fi
    summary+=("$(printf 'build   %d release builds beside the tests (%s); log %s' \
        "$(grep -c '^== build' "$other_log" || true)" \
        "$(grep -q FAILED "$other_log" && echo 'one FAILED' || echo 'all ok; the last one stopped when the tests ended')" \
        "$other_log")")
fi

note "summary (commit ${ref:0:10}, $(nproc) cores; targets: demo <= 720 s, tests <= 1200 s)"
printf '%s\n' "${summary[@]}"
