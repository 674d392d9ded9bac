#!/usr/bin/env bash
# One benchmark invocation ON THE GPU MACHINE, inside one device call (at most 10 minutes):
# prepare the checkpoints if they are not cached, run gpufrac-bench for one seed and a list of
# arms, and leave everything under $OUT, also when something fails or time runs out.
# Called by scripts/bench-seed.sh and scripts/bench-arms.sh; see docs/benchmarks.md.
#
# usage: bench-device.sh NAME SEED ARMS
# env:   OUT                 where results go (the device tool sets it; default ./out/bench)
#        GPUFRAC_BENCH       the carried binary (default bin/gpufrac-bench)
#        GPUFRAC_CACHE       checkpoint cache (default /tmp/gpufrac-cache)
#        BENCH_BUDGET_S      seconds for the whole script (default 570: under the 600 s call limit)
#        BENCH_MODE          mode of arms that name none (default isolated)
#        BENCH_PROBE_WINDOW  cold probe window, e.g. 20s (default 0: whole-run probes)
#        BENCH_SUFFIX        appended to the results directory name (<date>-seed<N>-SUFFIX)
#        BENCH_PROFILES      stored footprints for warm arms (default bench/profiles-h200.json)
#        BENCH_EXTRA         more gpufrac-bench run flags, e.g. "--job-env GPUFRAC_STEPS=4"
#        BENCH_WORKLOAD      workload profile: startup (default) or busy (jobs sized to keep the
#                            SMs 55-65% active alone; their footprints: BENCH_PROFILES, default
#                            bench/profiles-h200-busy.json when it exists, else none)
#        BENCH_REF           an earlier call's exclusive arm directory (docs/bench-results/<run>/
#                            exclusive): check results against it, so ARMS need not start with
#                            exclusive (a busy seed's exclusive arm fills a call of its own)
#        BENCH_COMMAND       run (default) or calibrate (every template alone; ARMS is ignored)
#        BENCH_WORKLOADS     python (default) or sim; BENCH_BACKEND nvml (default) or simulated:
#                            sim + simulated rehearse this script on any machine, no GPU needed
# Files in $OUT (at most 8 come back from the device): NAME.log, NAME.tgz (the whole results
# tree), summary.md, summary.json, env.txt, vmstat.txt and cpu-canary.txt (the host's CPU over the
# call: the jobs are mostly CPU start-up, so a slow stretch of the VM's CPUs shows in their times).
set -uo pipefail
name=${1:?usage: bench-device.sh NAME SEED ARMS}
seed=${2:?usage: bench-device.sh NAME SEED ARMS}
arms=${3:?usage: bench-device.sh NAME SEED ARMS}
start=$(date +%s)
OUT=${OUT:-$PWD/out/bench}
bin=${GPUFRAC_BENCH:-bin/gpufrac-bench}
cache=${GPUFRAC_CACHE:-/tmp/gpufrac-cache}
budget=${BENCH_BUDGET_S:-570}
mode=${BENCH_MODE:-isolated}
window=${BENCH_PROBE_WINDOW:-0}
workloads=${BENCH_WORKLOADS:-python}
backend=${BENCH_BACKEND:-nvml}
workload=${BENCH_WORKLOAD:-startup}
command=${BENCH_COMMAND:-run}
case $command in run|calibrate) ;; *) echo "BENCH_COMMAND=$command: want run or calibrate" >&2; exit 2 ;; esac
# Footprints measured on one profile's jobs would give the other's the wrong caps: the busy
# profile uses its own file, or none (the bench refuses a file of the other profile).
profiles=${BENCH_PROFILES-}
if [ -z "${BENCH_PROFILES+x}" ]; then
  case $workload in
    busy) [ -f bench/profiles-h200-busy.json ] && profiles=bench/profiles-h200-busy.json ;;
    *) profiles=bench/profiles-h200.json ;;
  esac
fi
# One directory per invocation: two calls on one machine (a seed's main call and its re-run) must
# not find each other's results when this script collects what it ran.
work=/tmp/gpufrac-bench-$name-$start
mkdir -p "$OUT" "$work"
log=$OUT/$name.log
exec > >(tee -a "$log") 2>&1

say() { echo "[bench-device $(date -u +%H:%M:%S) +$(( $(date +%s) - start ))s] $*"; }
left() { echo $(( budget - ($(date +%s) - start) )); }

finish() {
  rc=$?
  say "finishing (exit $rc): collecting results"
  for p in "${recorders[@]}"; do kill "$p" 2>/dev/null; done
  # The runner stops its MPS daemons; stop any it could not, so the GPU is left as found.
  for d in /run/gpufrac/mps/*/pipe /tmp/gpufrac-mps-*/*/pipe; do
    [ -d "$d" ] || continue
    echo quit | CUDA_MPS_PIPE_DIRECTORY=$d timeout 10 nvidia-cuda-mps-control >/dev/null 2>&1 &&
      say "stopped a leftover MPS daemon at $d"
  done
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv >>"$OUT/env.txt" 2>&1
  # $work is this call's own directory: the one directory in it is the results directory.
  res=$(ls -d "$work"/*/ 2>/dev/null | head -1)
  res=${res%/}
  if [ -n "$res" ]; then
    if [ "$command" = calibrate ]; then
      cp "$res/calibration.md" "$res"/profiles-*.json "$OUT/" 2>/dev/null
    else
      cp "$res/summary.md" "$res/summary.json" "$OUT/" 2>/dev/null
    fi
    # The whole tree minus working state (ledger files, simulated GPUs); excludes go first.
    timeout 60 tar czf "$OUT/$name.tgz" --exclude='*/sim' --exclude='*/state' \
      -C "$(dirname "$res")" "$(basename "$res")" 2>&1 | tail -3
    say "results: $res -> $OUT/$name.tgz"
  else
    say "no results directory was written"
  fi
  say "done in $(( $(date +%s) - start ))s"
}
trap finish EXIT

# Two recorders of the host's CPU for the whole call, to tell a slow run from a slow machine:
# vmstat's steal column (time the hypervisor gave our vCPUs to someone else) and a canary that
# times a fixed single-threaded loop every second (about 30 ms of one core of 16 at full speed).
recorders=()
if command -v vmstat >/dev/null; then
  vmstat -n -t 1 >"$OUT/vmstat.txt" 2>&1 &
  recorders+=($!)
fi
python3 -c '
import time
while True:
    t = time.perf_counter()
    s = 0
    for i in range(300000):
        s += i
    print(f"{time.time():.2f} {1e3 * (time.perf_counter() - t):.2f}", flush=True)
    time.sleep(1)
' >"$OUT/cpu-canary.txt" 2>&1 &
recorders+=($!)

say "$command: seed $seed, $workload profile, arms $arms, mode $mode, probe window $window, budget ${budget}s"
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host: $(hostname) kernel: $(uname -r)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,compute_mode,mig.mode.current --format=csv
  python3 -c 'import sys, torch, transformers, peft, torchvision; print("python", sys.version.split()[0], "torch", torch.__version__, "transformers", transformers.__version__, "peft", peft.__version__, "torchvision", torchvision.__version__)'
  echo "command: bench-device.sh $*"
} >"$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

if ! "$bin" queue --seed "$seed" >/dev/null; then
  say "FAILED: $bin does not run here (build it with CGO_ENABLED=1 and carry it)"
  exit 3
fi
if ! command -v nvidia-cuda-mps-control >/dev/null; then
  say "warning: nvidia-cuda-mps-control is not on PATH: mps arms will fail"
fi

say "prepare (cache $cache)"
if [ "$workloads" = python ] && ! timeout 150 python3 examples/workloads/prepare.py --cache "$cache" 2>&1 | grep -v 'Writing model shards'; then
  say "FAILED: prepare.py (see above)"
  exit 4
fi
# Seed 1's first exclusive run was 5.6% slower than its second: the checkpoints prepare had just
# written were still being flushed, and the first CUDA start of a fresh machine is slower. Settle
# both before the first arm so they are not charged to it.
sync
if [ "$workloads" = python ]; then
  timeout 60 python3 -c 'import torch; torch.zeros(1, device="cuda"); torch.cuda.synchronize()' ||
    say "warning: CUDA warm-up failed"
fi

# Leave 40 s for collecting; the deadline stops new arms well before the hard timeout, and the
# hard timeout interrupts (SIGINT) so the runner stops its jobs and the bench writes what ran.
run_s=$(( $(left) - 40 ))
deadline_s=$(( run_s - 60 ))
if [ "$deadline_s" -le 0 ]; then
  say "FAILED: no time left for the benchmark after prepare"
  exit 5
fi
# Arms after the first start by the deadline or not at all: one that leaves them under a minute
# would spend the call on the first arm alone (three H100 calls of 2026-12-06 did, at 150-170 s).
if [ "$deadline_s" -lt 60 ] && [ "${arms#*,}" != "$arms" ]; then
  say "FAILED: BENCH_BUDGET_S=$budget leaves ${deadline_s}s after prepare for arms to start: those after the first in $arms would be skipped; raise it (about 120 s an arm of the start-up profile, more for a cold one)"
  exit 5
fi
say "benchmark: ${run_s}s at most, no arm starts after ${deadline_s}s"
flags=(--workloads "$workloads" --workloads-dir examples/workloads --cache "$cache" --backend "$backend"
  --profile "$workload" --probe-window "$window" --deadline "${deadline_s}s" --out "$work" --suffix "${BENCH_SUFFIX:-}")
if [ "$command" = calibrate ]; then
  flags+=(--mode "$mode")
else
  flags+=(--seed "$seed" --arms "$arms" --mode "$mode")
  [ -n "$profiles" ] && flags+=(--profiles "$profiles")
  [ -n "${BENCH_REF:-}" ] && flags+=(--ref "$BENCH_REF")
fi
# shellcheck disable=SC2086  # BENCH_EXTRA is a list of flags
timeout --signal=INT --kill-after=25 "$run_s" "$bin" "$command" "${flags[@]}" ${BENCH_EXTRA:-}
rc=$?
case $rc in
  0) say "benchmark finished" ;;
  124|130) say "benchmark stopped at its time limit: partial results kept" ;;
  *) say "benchmark exited $rc: partial results kept" ;;
esac
exit $rc
