#!/usr/bin/env bash
# A container started through Gantry's CDI spec on a real GPU machine (the `device` tool).
#
# Gantry's toolkit (`gantry node toolkit --cdi-only`) writes the CDI spec for the machine's
# GPUs; Debian 12's podman 4.3 (with runc 1.1 and conmon) reads it and starts a container from
# a minimal rootfs (Debian's busybox-static and libc6, plus the CUDA probe from
# scripts/device/cdi/cudaprobe.c) with `--device nvidia.com/gpu=0`. Inside, `nvidia-smi -L` must
# list exactly that GPU and the probe must run a kernel. A container without the device must see
# no GPU. Nothing is installed on the machine: the .debs are unpacked into a temp prefix.
#
# Read-only on the GPU: no MIG, clock, power, compute-mode or persistence changes, no resets.
#
# Usage: scripts/device/cdi-podman.sh CARRY OUTDIR
#   CARRY holds gantry (or gantry.xz), cudaprobe and debs/*.deb (podman, runc, conmon,
#   containers-common, netavark and their libraries; busybox-static and libc6 for the rootfs).
#   Prepare it with scripts/device/cdi-carry.sh on a Debian 12 machine.
set -uo pipefail
CARRY=$(realpath "$1")
OUT=$(mkdir -p "$2" && realpath "$2")
HERE=$(dirname "$(realpath "$0")")
T=$(mktemp -d /tmp/gantry-cdi.XXXXXX)
P=$T/prefix
run() { echo "\$ $*"; "$@" 2>&1; local rc=$?; echo "[exit $rc]"; echo; return $rc; }

G=$CARRY/gantry
if [ -f "$CARRY/gantry.xz" ]; then
    { xz -dc "$CARRY/gantry.xz" 2>/dev/null \
        || python3 -c 'import lzma,sys; sys.stdout.buffer.write(lzma.open(sys.argv[1]).read())' "$CARRY/gantry.xz"; } \
        > "$T/gantry" && chmod +x "$T/gantry" && G=$T/gantry
fi

{
    echo "# machine"
    run uname -r
    run grep -E '^(PRETTY_NAME|VERSION_ID)=' /etc/os-release
    run nvidia-smi -L
    run nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,driver_version,mig.mode.current,compute_mode,persistence_mode --format=csv
    run stat -fc 'cgroup fs: %T' /sys/fs/cgroup
    echo "\$ # /usr/bin/nvidia-smi: script or binary?"
    if head -c 2 /usr/bin/nvidia-smi | grep -q '#!'; then cat /usr/bin/nvidia-smi; else echo "(a binary)"; fi
    echo
    run ls -l /usr/local/nvidia/bin
} > "$OUT/01-machine.txt"

# Tools from the .debs, in a prefix of their own; their libraries only for them.
mkdir -p "$P" "$T/rootfs-base"
for deb in "$CARRY"/debs/*.deb; do
    case $(basename "$deb") in
        busybox-static_*|libc6_*) dpkg-deb -x "$deb" "$T/rootfs-base" ;;
        *) dpkg-deb -x "$deb" "$P" ;;
    esac
done
LIBS=$P/usr/lib/x86_64-linux-gnu:$P/lib/x86_64-linux-gnu
# conmon and runc start with a clean environment: wrappers give them their libraries.
mkdir -p "$T/bin"
for b in usr/bin/conmon usr/sbin/runc; do
    printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$LIBS" "$P/$b" > "$T/bin/${b##*/}"
    chmod +x "$T/bin/${b##*/}"
done
cat > "$T/containers.conf" <<EOF
[containers]
log_driver = "k8s-file"
[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
conmon_path = ["$T/bin/conmon"]
helper_binaries_dir = ["$P/usr/lib/podman"]
runtime = "runc"
[engine.runtimes]
runc = ["$T/bin/runc"]
[network]
network_backend = "netavark"
EOF
podman() {
    env LD_LIBRARY_PATH="$LIBS" CONTAINERS_CONF="$T/containers.conf" \
        CONTAINERS_REGISTRIES_CONF="$P/etc/containers/registries.conf" \
        "$P/usr/bin/podman" --root "$T/storage" --runroot "$T/run" --storage-driver vfs "$@"
}
# runc rather than crun: crun 1.8 refuses hosts whose cgroups are in hybrid mode ("cgroups in
# hybrid mode not supported"). Low rlimits: without CAP_SYS_RESOURCE the runtime cannot apply
# podman's defaults (1048576 open files) and fails with EPERM; lowering always works.
RUN="run --rm --network none --ulimit nofile=1024:1024 --ulimit nproc=4096:4096"

# The rootfs: busybox, glibc (nvidia-smi and the probe are dynamic), the probe, and an
# ld.so.conf for the update-ldcache hook. The driver's files come in through CDI mounts.
R=$T/rootfs-base
mkdir -p "$R"/{proc,sys,dev,tmp,etc/ld.so.conf.d,usr/local/bin,usr/bin,root}
for a in sh ls cat env mount grep head wc readlink; do ln -sf /bin/busybox "$R/bin/$a"; done
echo 'include /etc/ld.so.conf.d/*.conf' > "$R/etc/ld.so.conf"
echo 'root:x:0:0:root:/root:/bin/sh' > "$R/etc/passwd"
install -m 0755 "$CARRY/cudaprobe" "$R/usr/local/bin/cudaprobe"
fresh_rootfs() { rm -rf "$T/rootfs-$1"; cp -a "$R" "$T/rootfs-$1"; echo "$T/rootfs-$1"; }

# The stand-in hook (see its header), called by absolute path with this machine's python3.
mkdir -p "$T/toolkit"
{ echo "#!$(command -v python3)"; tail -n +2 "$HERE/cdi/nvidia-cdi-hook"; } > "$T/toolkit/nvidia-cdi-hook"
chmod +x "$T/toolkit/nvidia-cdi-hook"

{
    echo "# tools"
    run env LD_LIBRARY_PATH="$LIBS" "$P/usr/bin/podman" --version
    run env LD_LIBRARY_PATH="$LIBS" "$P/usr/sbin/runc" --version
    echo "\$ ldd podman runc conmon | grep 'not found'"
    env LD_LIBRARY_PATH="$LIBS" ldd "$P/usr/bin/podman" "$P/usr/sbin/runc" "$P/usr/bin/conmon" | grep 'not found' || echo "(none)"
    echo
    run "$G" --version
} > "$OUT/02-tools.txt"

SPECS=/var/run/cdi
INNER='ls -l /usr/bin/nvidia-smi /usr/local/nvidia/bin; echo "--- nvidia-smi -L"; nvidia-smi -L; echo "--- /dev/nvidia*"; ls /dev | grep nvidia; echo "--- cudaprobe"; /usr/local/bin/cudaprobe'
{
    echo "# 1. The spec as the operator's toolkit writes it (hooks at /usr/local/nvidia/toolkit)"
    run "$G" node toolkit --cdi-only --host-root / --cdi-dir "$SPECS" --no-signal
    run ls -l /usr/local/nvidia/toolkit/nvidia-cdi-hook
    run podman $RUN --device nvidia.com/gpu=0 --rootfs "$(fresh_rootfs a)" /bin/sh -c "$INNER"
    rm -f "$SPECS/nvidia.yaml"
} > "$OUT/03-default-hook-path.txt"

{
    echo "# 2. The spec with --toolkit-dir pointing at the stand-in nvidia-cdi-hook"
    run "$G" node toolkit --cdi-only --host-root / --cdi-dir "$SPECS" --no-signal --toolkit-dir "$T/toolkit"
    echo "--- $SPECS/nvidia.yaml"; cat "$SPECS/nvidia.yaml"; echo
} > "$OUT/04-spec.txt"

{
    echo "# 3. --device nvidia.com/gpu=0"
    rm -f /tmp/gantry-cdi-hook.log
    run podman $RUN --device nvidia.com/gpu=0 --rootfs "$(fresh_rootfs b)" /bin/sh -c "$INNER"
    echo "--- what the hooks did"; cat /tmp/gantry-cdi-hook.log 2>&1; echo
    echo "# 4. --device nvidia.com/gpu=all"
    run podman $RUN --device nvidia.com/gpu=all --rootfs "$(fresh_rootfs c)" /bin/sh -c 'nvidia-smi -L'
    echo "# 5. no device: no GPU inside"
    run podman $RUN --rootfs "$(fresh_rootfs d)" /bin/sh -c 'ls /dev; ls /usr/bin; nvidia-smi -L'
    echo "# host, for comparison"
    run nvidia-smi -L
    run nvidia-smi --query-gpu=mig.mode.current,compute_mode,persistence_mode --format=csv
} > "$OUT/05-containers.txt"

# One line per check, for the transcript's summary.
host_gpu0=$(nvidia-smi -L | grep '^GPU 0:')
in_ctr=$(sed -n '/^# 3\./,/^# 4\./p' "$OUT/05-containers.txt" | grep '^GPU ' || true)
{
    [ -n "$host_gpu0" ] && [ "$in_ctr" = "$host_gpu0" ] && echo "PASS gpu=0 container lists exactly host GPU 0: $in_ctr" \
        || echo "FAIL gpu=0 container lists: [$in_ctr], host GPU 0: [$host_gpu0]"
    grep -q ' 0 of 1048576 elements wrong' "$OUT/05-containers.txt" && echo "PASS CUDA kernel ran inside the container" \
        || echo "FAIL CUDA probe (see 05-containers.txt)"
    uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader -i 0)
    probe=$(sed -n '/^# 3\./,/^# 4\./p' "$OUT/05-containers.txt" | grep '^device ' || true)
    [ "$(echo "$probe" | wc -l)" = 1 ] && echo "$probe" | grep -q "$uuid" \
        && echo "PASS CUDA sees exactly one device, host GPU 0 ($uuid)" \
        || echo "FAIL CUDA devices in the container: [$probe], host GPU 0: $uuid"
    sed -n '/^# 5\./,/^# host/p' "$OUT/05-containers.txt" | grep -q '^GPU ' && echo "FAIL container without a device sees a GPU" \
        || echo "PASS container without a device lists no GPU"
} | tee "$OUT/00-summary.txt"
rm -rf "$T"
