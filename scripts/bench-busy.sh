#!/usr/bin/env bash
# The busy profile for one seed, ON THE GPU MACHINE, one part per device call (busy jobs run
# 25-40 s each, so a seed's exclusive arm of 12 fills most of a call):
#   exclusive  the exclusive arm (the reference, the SM bound's baseline)
#   arms       the comparison arms, checked against an earlier call's exclusive arm: BENCH_REF
#              must name it (docs/bench-results/<date>-seed<N>-busy-exclusive/exclusive, unpacked
#              there by bench-collect.sh and carried in the working tree); BENCH_ARMS overrides
#              the default packed-isolated-warm,uncapped-retry (about 4 minutes each at 1.5x)
#   aa         the exclusive arm twice on the seed's first BENCH_QUEUE_LEN jobs (default 6), the
#              A/A noise of the busy profile in one call
# usage: bench-busy.sh SEED exclusive|arms|aa   (env: see bench-device.sh)
set -uo pipefail
seed=${1:?usage: bench-busy.sh SEED exclusive|arms|aa}
part=${2:?usage: bench-busy.sh SEED exclusive|arms|aa}
export BENCH_WORKLOAD=busy
# The probe window of bench-seed.sh: the busy jobs reach their peaks in the same 19 s (their
# start-up is the same; only their work phase is longer), before the leaker's small phase ends.
export BENCH_PROBE_WINDOW=${BENCH_PROBE_WINDOW:-19s}
here=$(dirname "$0")
case $part in
  exclusive)
    BENCH_SUFFIX=${BENCH_SUFFIX:-exclusive} exec bash "$here/bench-device.sh" "bench-busy-seed$seed-exclusive" "$seed" exclusive ;;
  arms)
    if [ -z "${BENCH_REF:-}" ]; then
      echo "bench-busy.sh arms: set BENCH_REF to the exclusive arm of an earlier call for seed $seed" >&2
      exit 2
    fi
    BENCH_SUFFIX=${BENCH_SUFFIX:-arms} exec bash "$here/bench-device.sh" "bench-busy-seed$seed-arms" "$seed" \
      "${BENCH_ARMS:-packed-isolated-warm,uncapped-retry}" ;;
  aa)
    export BENCH_EXTRA="${BENCH_EXTRA:-} --queue-len ${BENCH_QUEUE_LEN:-6}"
    BENCH_SUFFIX=${BENCH_SUFFIX:-aa} exec bash "$here/bench-device.sh" "bench-busy-seed$seed-aa" "$seed" exclusive,exclusive ;;
  *)
    echo "bench-busy.sh: part $part: want exclusive, arms or aa" >&2
    exit 2 ;;
esac
