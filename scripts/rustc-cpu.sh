#!/usr/bin/env bash
# Per-crate CPU time of a build (docs/benchmarks.md, "Build time").
#
#   RUSTC_WRAPPER=scripts/rustc-cpu.sh RUSTC_CPU_LOG=/tmp/cpu.log cargo build --release
#   scripts/rustc-cpu.sh --report /tmp/cpu.log      # the table, most CPU first
#
# As cargo's compiler wrapper it runs rustc and appends one line per compile to RUSTC_CPU_LOG:
# crate name, crate type, opt-level, user and system CPU seconds (every thread of that rustc,
# LLVM's included) and wall seconds. CPU time, unlike cargo's `--timings` wall times, hardly
# moves with the machine's load. C compiled by build scripts (SQLite, ring) is not rustc and
# is not counted. Use it only in a target directory of its own: cargo rebuilds when the
# wrapper changes.
set -euo pipefail
if [ "${1:-}" = --report ]; then
    awk '{cpu[$1" "$2" "$3] += $4 + $5; all += $4 + $5}
        END {for (k in cpu) printf "%8.1f  %s\n", cpu[k], k; printf "%8.1f  total\n", all}' "$2" |
        sort -rn
    exit 0
fi
rustc="$1"
shift
log="${RUSTC_CPU_LOG:-}"
# cargo asks the compiler for its version and target info first (no crate, or `___`).
if [ -z "$log" ] || [[ " $* " != *" --crate-name "* ]] || [[ " $* " == *" --crate-name ___ "* ]]; then
    exec "$rustc" "$@"
fi
name=- type=- opt=0 prev=
for a in "$@"; do
    case "$prev" in
    --crate-name) name="$a" ;;
    --crate-type) type="$a" ;;
    esac
    case "$a" in opt-level=*) opt="${a#opt-level=}" ;; --test) type=test ;; esac
    prev="$a"
done
TIMEFORMAT="%U %S %R"
status=0
{ time "$rustc" "$@" 2>&3 3>&-; } 3>&2 2>"$log.$$" || status=$?
printf '%s %s O%s %s\n' "$name" "$type" "$opt" "$(tail -n1 "$log.$$")" >>"$log"
rm -f "$log.$$"
exit "$status"
