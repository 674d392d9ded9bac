#!/usr/bin/env bash
# The comparison arms for one seed, ON THE GPU MACHINE in one device call: exclusive (the
# reference), static 2-slot split, uncapped co-location, uncapped co-location with a retry loop
# (a failed job started again up to 3 times), packed with cold then warm profiles (the warm arm
# reuses the footprints the cold arm measured), all in BENCH_MODE (default isolated).
# usage: bench-arms.sh SEED   (env: see bench-device.sh; BENCH_ARMS overrides)
set -uo pipefail
seed=${1:?usage: bench-arms.sh SEED}
# The probe window of bench-seed.sh (see there): without one a cold probe runs the whole job.
export BENCH_PROBE_WINDOW=${BENCH_PROBE_WINDOW:-19s}
BENCH_SUFFIX=${BENCH_SUFFIX:-arms} exec bash "$(dirname "$0")/bench-device.sh" "bench-arms$seed" "$seed" \
  "${BENCH_ARMS:-exclusive,static,uncapped,uncapped-retry,packed-cold,packed-warm}"
