#!/usr/bin/env bash
# The packing benchmark for one seed, ON THE GPU MACHINE in one device call: prepare (if not
# cached), exclusive, packed under MPS, packed isolated, exclusive again.
# usage: bench-seed.sh SEED   (env: see bench-device.sh; BENCH_ARMS overrides the arm list)
set -uo pipefail
seed=${1:?usage: bench-seed.sh SEED}
exec bash "$(dirname "$0")/bench-device.sh" "bench-seed$seed" "$seed" \
  "${BENCH_ARMS:-exclusive,packed-mps,packed-isolated,exclusive}"
