# Sourced by scripts/test.sh and scripts/test-under-load.sh: makes clippy's driver the compiler
# of the workspace's own crates, so one compile both lints and builds the tests.
#
# `cargo clippy` would first check the whole workspace and its dependencies (metadata only),
# which the test build cannot reuse: a cold run compiled everything twice. This is how `cargo
# clippy` runs the driver itself: RUSTC_WORKSPACE_WRAPPER, with the lint arguments in
# CLIPPY_ARGS, each followed by __CLIPPY_HACKERY__. The test build compiles every target
# `cargo clippy --all-targets` checks (libraries, binaries and both as tests, integration tests,
# examples; the workspace has no benches), so any clippy or rustc warning fails the build.
# Every cargo command sharing the target dir must run with the same settings, or cargo rebuilds
# the workspace's crates (the wrapper is part of their fingerprint).
if ! clippy_driver="$(rustup which clippy-driver 2>/dev/null)"; then
    clippy_driver="$(command -v clippy-driver)" || {
        echo "clippy-driver not found: install clippy (rustup component add clippy)" >&2
        exit 1
    }
fi
export RUSTC_WORKSPACE_WRAPPER="$clippy_driver"
export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"

# A one-off build gains nothing from incremental compilation's on-disk cache (it costs time and
# gigabytes): the suite's build turns it off, as CI's fresh clones would want anyway.
export CARGO_INCREMENTAL=0
