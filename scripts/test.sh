#!/usr/bin/env bash
# The README's test command. Installs what the tests need that cargo does not bring,
# then runs formatting, lints and the whole test suite. `.ci/run` calls this same script.
set -euo pipefail
cd "$(dirname "$0")/.."

# Python's prometheus_client parses our exposition output in the exporter tests.
if ! python3 -c 'import prometheus_client' 2>/dev/null; then
    python3 -m pip install --quiet --disable-pip-version-check prometheus_client
fi

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked "$@"
