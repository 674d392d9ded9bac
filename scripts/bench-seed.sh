#!/usr/bin/env bash
# The packing benchmark for one seed, ON THE GPU MACHINE in one device call: prepare (if not
# cached), exclusive, packed under MPS, packed isolated, exclusive again (the second exclusive run
# usually needs a call of its own: BENCH_ARMS=exclusive BENCH_SUFFIX=exclusive-rerun).
# usage: bench-seed.sh SEED   (env: see bench-device.sh; BENCH_ARMS overrides the arm list)
set -uo pipefail
seed=${1:?usage: bench-seed.sh SEED}
# The packed arms start from the stored H200 footprints (bench/profiles-h200.json) and probe the
# leaker, which has none, in a 15 s window: the settings of the published seed-1 run.
export BENCH_PROBE_WINDOW=${BENCH_PROBE_WINDOW:-15s}
exec bash "$(dirname "$0")/bench-device.sh" "bench-seed$seed" "$seed" \
  "${BENCH_ARMS:-exclusive,packed-mps-warm,packed-isolated-warm,exclusive}"
