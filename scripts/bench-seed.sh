#!/usr/bin/env bash
# The packing benchmark for one seed, ON THE GPU MACHINE in one device call: prepare (if not
# cached), exclusive, packed under MPS, packed isolated, exclusive again (the second exclusive run
# usually needs a call of its own: BENCH_ARMS=exclusive BENCH_SUFFIX=exclusive-rerun).
# usage: bench-seed.sh SEED   (env: see bench-device.sh; BENCH_ARMS overrides the arm list)
set -uo pipefail
seed=${1:?usage: bench-seed.sh SEED}
# Warm arms start from the stored H200 footprints (bench/profiles-h200.json) and probe the leaker,
# which has none; cold arms probe every template. 19 s covers every template's peak (14-19 s after
# start on the H200) and ends before the leaker's small phase does (20 s). The morning runs of
# 2026-11-29 used 15 s, which only the leaker's probe saw.
export BENCH_PROBE_WINDOW=${BENCH_PROBE_WINDOW:-19s}
exec bash "$(dirname "$0")/bench-device.sh" "bench-seed$seed" "$seed" \
  "${BENCH_ARMS:-exclusive,packed-mps-warm,packed-isolated-warm,exclusive}"
