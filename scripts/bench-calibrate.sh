#!/usr/bin/env bash
# Calibration of a workload profile, ON THE GPU MACHINE in one device call: every template alone
# (exclusive), each job's SM activity and occupancy read through NVML GPM, its wall time, work
# phase and peak memory, and the work size (steps, sequences, new tokens) that would bring it to
# the busy profile's target of 60% SM active (55-65%) in at most 40 s. Writes to $OUT:
# calibration.md (the table), profiles-<profile>.json (the footprints, for warm arms: commit it
# as bench/profiles-h200-busy.json once the sizes are settled), the log and the results archive.
# usage: bench-calibrate.sh [TEMPLATES]   (comma-separated, default all; env: see bench-device.sh)
# To try a size: BENCH_EXTRA="--job-env GPUFRAC_BATCH=32 --job-env GPUFRAC_STEPS=30" bash
# scripts/bench-calibrate.sh lora-0.6b  (--job-env wins over the profile's sizes).
set -uo pipefail
if [ -n "${1:-}" ]; then
  export BENCH_EXTRA="${BENCH_EXTRA:-} --templates $1"
fi
BENCH_COMMAND=calibrate BENCH_WORKLOAD=${BENCH_WORKLOAD:-busy} BENCH_SUFFIX=${BENCH_SUFFIX:-} \
  exec bash "$(dirname "$0")/bench-device.sh" "bench-calibrate-${BENCH_WORKLOAD:-busy}" 0 exclusive
