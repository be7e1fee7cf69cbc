#!/usr/bin/env bash
# The pure crates (types, names, formats; Kubernetes rules) must build without an async
# runtime, an HTTP stack or TLS: their purity is checked on the crate graph, not left to
# discipline. Fails naming the crate and the offending packages.
set -euo pipefail
cd "$(dirname "$0")/.."

status=0
for crate in gantry-api gantry-k8s-rules; do
    bad="$(cargo tree --locked -p "$crate" -e normal --prefix none \
        | awk '{print $1}' | sort -u | grep -E '^(tokio|hyper|rustls)([-_].*)?$' || true)"
    if [ -n "$bad" ]; then
        echo "$crate must not depend on tokio, hyper or rustls, but pulls in:" >&2
        echo "$bad" | sed 's/^/  /' >&2
        status=1
    fi
done
exit "$status"
