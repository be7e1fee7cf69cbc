#!/usr/bin/env bash
# Prepares what scripts/device/cdi-podman.sh needs on the GPU machine (which has no package
# registry and no compiler), on a Debian 12 machine with network:
#   CARRY/gantry.xz   the given gantry binary, stripped and compressed
#   CARRY/cudaprobe   scripts/device/cdi/cudaprobe.c, built with gcc
#   CARRY/debs/       Debian 12's podman, runc, conmon, containers-common, netavark and the
#                     libraries they need beyond a base system; busybox-static and libc6 for
#                     the container's rootfs
# Usage: scripts/device/cdi-carry.sh PATH/TO/gantry CARRY
set -euo pipefail
GANTRY=$(realpath "$1")
mkdir -p "$2/debs"
CARRY=$(realpath "$2")
HERE=$(dirname "$(realpath "$0")")

(cd "$CARRY/debs" && apt-get download \
    podman runc conmon golang-github-containers-common golang-github-containers-image netavark \
    libdevmapper1.02.1 libgpgme11 libassuan0 libgpg-error0 libseccomp2 libsubid4 \
    libglib2.0-0 libsystemd0 busybox-static libc6)
gcc -O2 -Wall -o "$CARRY/cudaprobe" "$HERE/cdi/cudaprobe.c" -ldl
strip -o "$CARRY/gantry" "$GANTRY"
xz -T0 -6 -f "$CARRY/gantry"
du -sh "$CARRY"
