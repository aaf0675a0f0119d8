#!/usr/bin/env bash
# Cross-builds quant-kernels for aarch64 and runs its tests under qemu-user, once on a CPU
# with NEON + dotprod (`-cpu max`) and once on one without dotprod (`-cpu cortex-a53`), so
# both the `sdot` and the widening-multiply paths of the NEON kernels run.
#
# Usage: scripts/test-aarch64.sh [extra cargo test args, e.g. --test neon or a filter]
# Env:   CPUS="max cortex-a53" (qemu CPU models to run under), RELEASE=1 (test --release).
# Installs qemu-user, gcc-aarch64-linux-gnu and libc6-dev-arm64-cross with apt-get when
# they are missing (needs root), and the rustup target when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v qemu-aarch64 >/dev/null || need+=(qemu-user)
command -v aarch64-linux-gnu-gcc >/dev/null || need+=(gcc-aarch64-linux-gnu)
[ -d /usr/aarch64-linux-gnu/lib ] || need+=(libc6-dev-arm64-cross)
if [ ${#need[@]} -gt 0 ]; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update
    $SUDO apt-get install -y "${need[@]}"
fi
if ! rustup target list --installed | grep -qx aarch64-unknown-linux-gnu; then
    rustup target add aarch64-unknown-linux-gnu
fi

export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
profile=()
[ "${RELEASE:-0}" = 1 ] && profile=(--release)
for cpu in ${CPUS:-max cortex-a53}; do
    echo "=== quant-kernels tests under qemu-aarch64 -cpu $cpu ==="
    CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -cpu $cpu -L /usr/aarch64-linux-gnu" \
        cargo test --target aarch64-unknown-linux-gnu -p quant-kernels "${profile[@]}" "$@"
done
