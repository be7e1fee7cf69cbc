#!/usr/bin/env bash
# Builds Gantry's OCI image without a container daemon (Debian's buildah, vfs storage, chroot
# isolation) and writes it as an OCI archive. docs/install.md has the push and install steps.
#
#   scripts/image.sh [--binary PATH] [--output FILE] [--tag IMAGE:TAG] [--smoke]
#
#   --binary  the gantry binary to ship (default: `cargo build --release` of this checkout)
#   --output  the OCI archive (default: target/image/gantry-VERSION.oci.tar)
#   --tag     the image name recorded in the archive (default: ghcr.io/gantry-dev/gantry:VERSION,
#             the chart's default image at its appVersion)
#   --smoke   run `gantry --version`, `gantry node discovery --print --sim-model H100-80GB` and
#             `gantry validate` inside the image before writing it
#   --ensure-buildah  only install buildah if it is missing (scripts/test.sh uses this)
#
# The image: the binary at /usr/local/bin/gantry (entrypoint; symbol table stripped), the shared libraries it links
# (glibc, libgcc_s: copied from the Debian packages installed here, named in a label), Debian's
# CA certificates, an /etc/passwd with the non-root user `gantry` (65532, the default user; the
# node agents that need root set runAsUser in their pod spec), a writable /tmp, OCI labels.
set -euo pipefail
cd "$(dirname "$0")/.."

binary="" output="" tag="" smoke=0 ensure_only=0
while [ $# -gt 0 ]; do
    case "$1" in
        --binary) binary="$2"; shift 2 ;;
        --output) output="$2"; shift 2 ;;
        --tag) tag="$2"; shift 2 ;;
        --smoke) smoke=1; shift ;;
        --ensure-buildah) ensure_only=1; shift ;;
        -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
        *) echo "image.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done

if ! command -v buildah >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        (apt-get install -y -qq buildah >/dev/null 2>&1 ||
            (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq buildah >/dev/null)) ||
            { echo "image.sh: could not install buildah with apt-get" >&2; exit 3; }
    else
        echo "image.sh: buildah is not installed and this is not root (Debian: apt-get install buildah)" >&2
        exit 3
    fi
fi
[ "$ensure_only" = 1 ] && exit 0

if [ -z "$binary" ]; then
    cargo build --release --locked -p gantry
    binary="${CARGO_TARGET_DIR:-target}/release/gantry"
fi
[ -x "$binary" ] || { echo "image.sh: $binary is not an executable" >&2; exit 2; }

version="$(sed -nE 's/^version = "([^"]+)"/\1/p' Cargo.toml | head -n1)"
app_version="$(sed -nE 's/^appVersion: "?([^"]+)"?/\1/p' deploy/helm/gantry/Chart.yaml)"
if [ "$version" != "$app_version" ]; then
    echo "image.sh: workspace version $version differs from the chart's appVersion $app_version" >&2
    exit 2
fi
binary_version="$("$binary" --version | awk '{print $2}')"
if [ "$binary_version" != "$version" ]; then
    echo "image.sh: $binary is gantry $binary_version, this checkout is $version" >&2
    exit 2
fi
tag="${tag:-ghcr.io/gantry-dev/gantry:$version}"
output="${output:-target/image/gantry-$version.oci.tar}"
mkdir -p "$(dirname "$output")"
revision="$(git rev-parse HEAD 2>/dev/null || echo unknown)"

export STORAGE_DRIVER=vfs BUILDAH_ISOLATION=chroot
b() { buildah --storage-driver vfs "$@"; }
ctr="$(b from --name "gantry-image-$$" scratch)"
cleanup() { b rm "$ctr" >/dev/null 2>&1 || true; }
trap cleanup EXIT
root="$(b mount "$ctr")"

install -D -m 0755 "$binary" "$root/usr/local/bin/gantry"
# The symbol table is a fifth of a release binary; panics keep their message and location.
if command -v strip >/dev/null 2>&1; then
    strip --strip-unneeded "$root/usr/local/bin/gantry"
fi
# The package owning a library. dpkg records the path the package ships, which on a merged-/usr
# system (Debian 12) is often neither the path ldd prints nor the resolved one: /lib/…/libc.so.6
# is libc6's, /usr/lib/…/libc.so.6 (what readlink -f gives) is nobody's. Try each spelling.
owner() {
    local p
    for p in "$1" "$2" "${1#/usr}" "${2#/usr}" "/usr${1#/usr}" "/usr${2#/usr}"; do
        dpkg -S "$p" 2>/dev/null | head -n1 | cut -d: -f1 && return 0
    done
    return 1
}
# The libraries the binary links, from this Debian system's packages (ldd resolves them).
packages=()
for lib in $(ldd "$binary" | grep -oE '/[^ ]+\.so[^ ]*'); do
    real="$(readlink -f "$lib")"
    install -D -m 0755 "$real" "$root$lib"
    if command -v dpkg >/dev/null 2>&1; then
        pkg="$(owner "$lib" "$real" || true)"
        if [ -z "$pkg" ]; then
            echo "image.sh: no Debian package owns $lib ($real)" >&2
            exit 1
        fi
        entry="$pkg=$(dpkg-query -W -f='${Version}' "$pkg")"
        case " ${packages[*]:-} " in *" $entry "*) ;; *) packages+=("$entry") ;; esac
    fi
done
install -D -m 0644 /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
install -d -m 1777 "$root/tmp"
install -d -m 0755 "$root/home/gantry"
chown 65532:65532 "$root/home/gantry"
printf 'root:x:0:0:root:/root:/sbin/nologin\ngantry:x:65532:65532:gantry:/home/gantry:/sbin/nologin\n' >"$root/etc/passwd"
printf 'root:x:0:\ngantry:x:65532:\n' >"$root/etc/group"
b umount "$ctr" >/dev/null

b config \
    --entrypoint '["/usr/local/bin/gantry"]' --cmd '["--help"]' \
    --user 65532:65532 --workingdir /home/gantry \
    --env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
    --label org.opencontainers.image.title=gantry \
    --label "org.opencontainers.image.description=GPU infrastructure for Kubernetes: operator, node agents, scheduler" \
    --label "org.opencontainers.image.version=$version" \
    --label "org.opencontainers.image.revision=$revision" \
    --label org.opencontainers.image.source=https://github.com/gantry-dev/gantry \
    --label org.opencontainers.image.licenses=Apache-2.0 \
    --label "org.opencontainers.image.created=$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
    --label "dev.gantry.debian-packages=$(IFS=,; echo "${packages[*]:-}")" \
    "$ctr"

if [ "$smoke" = 1 ]; then
    run() { echo "+ gantry $*" >&2; b run --isolation chroot --user 65532:65532 "$ctr" -- /usr/local/bin/gantry "$@"; }
    run --version
    run node discovery --print --sim-model H100-80GB | grep -q '^nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3$' ||
        { echo "image.sh: discovery inside the image printed no H100 product label" >&2; exit 1; }
    b copy --chown 65532:65532 "$ctr" deploy/examples/demo/03-queues.yaml /home/gantry/queues.yaml >/dev/null
    run validate -f /home/gantry/queues.yaml
    # The smoke test's file is not part of the image.
    rm -f "$(b mount "$ctr")/home/gantry/queues.yaml"
    b umount "$ctr" >/dev/null
fi

rm -f "$output"
b commit --quiet --format oci --disable-compression=false --rm "$ctr" "oci-archive:$output:$tag" >/dev/null
trap - EXIT
size="$(du -k "$output" | cut -f1)"
echo "image: $tag"
echo "archive: $output ($((size / 1024)) MiB; binary $(( $(stat -c %s "$binary") / 1024 / 1024 )) MiB before strip)"
