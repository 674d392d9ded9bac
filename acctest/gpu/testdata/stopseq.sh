#!/bin/bash
# Measures which stop of a busy client leaves its neighbours unharmed, with and without MPS,
# and how far NVML's per-process reading runs past a held tensor or an MPS pinned limit.
# Usage (on the GPU machine): bash acctest/gpu/testdata/stopseq.sh OUTDIR
set -u
O=$1; mkdir -p $O
D=$(dirname "$0"); W="python3 -u $D/workload.py"
export MPS_ROOT=/tmp/gpufrac-mps
now(){ date +%s.%N; }
ev(){ echo "$(now) $*" >> $O/events.txt; }
waitready(){ for f; do for i in $(seq 400); do [ -f $f.ready ] && break; sleep 0.05; done; done; }
waitpid(){ # pid: polls until gone, logs exit time
  while kill -0 $1 2>/dev/null; do sleep 0.01; done; }
mps_start(){ mkdir -p $MPS_ROOT/pipe $MPS_ROOT/log
  CUDA_MPS_PIPE_DIRECTORY=$MPS_ROOT/pipe CUDA_MPS_LOG_DIRECTORY=$MPS_ROOT/log timeout 10 nvidia-cuda-mps-control -d; ev mps-start rc=$?; }
mps_cmd(){ echo "$1" | CUDA_MPS_PIPE_DIRECTORY=$MPS_ROOT/pipe timeout 10 nvidia-cuda-mps-control; }
mps_stop(){ mps_cmd quit; ev mps-quit rc=$?; sleep 1; }
trap 'mps_cmd quit >/dev/null 2>&1; kill $SAMPLER 2>/dev/null' EXIT
nvidia-smi > $O/nvidia-smi.txt 2>&1
python3 $D/sampler.py $O/samples.txt 0.02 & SAMPLER=$!
neigh(){ $W matmul --seed $2 --size 8192 --iters 150 --hold-mb 2048 --out $O/$1.json > $O/$1.log 2>&1 & }
# run EXP VICTIM_ARGS SIGNALS...: two neighbours + a busy victim; SIGNALS like "INT" "sleep:1" "KILL"
run(){ local x=$1 vargs=$2; shift 2
  ev $x begin
  neigh $x.A 1; local A=$!; neigh $x.B 2; local B=$!
  if [ -n "${VLIMIT:-}" ]; then export CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=$VLIMIT; fi
  $W leak $vargs --out $O/$x.V.json > $O/$x.V.log 2>&1 & local V=$!; unset CUDA_MPS_PINNED_DEVICE_MEM_LIMIT
  ev $x pids A=$A B=$B V=$V
  waitready $O/$x.A.json $O/$x.B.json $O/$x.V.json; sleep 1.5
  for s in "$@"; do case $s in sleep:*) sleep ${s#sleep:};; none) ;; *) ev $x signal $s; kill -$s $V 2>/dev/null;; esac; done
  waitpid $V; ev $x victim-exit; wait $V; ev $x V rc=$?
  wait $A; ev $x A rc=$?; wait $B; ev $x B rc=$?; }
ev solo begin
$W matmul --seed 1 --size 8192 --iters 150 --hold-mb 2048 --out $O/solo.A.json > $O/solo.A.log 2>&1; ev solo A rc=$?
$W matmul --seed 2 --size 8192 --iters 150 --hold-mb 2048 --out $O/solo.B.json > $O/solo.B.log 2>&1; ev solo B rc=$?
# isolated (no MPS): SIGKILL of a busy victim; plus a 3 GiB hold for context overhead
$W hold --mb 3072 --seconds 6 --out $O/iso-hold.json > $O/iso-hold.log 2>&1 &
run iso-kill "--step-mb 256 --max-mb 4096 --busy 8" KILL
mps_start
$W hold --mb 3072 --seconds 6 --out $O/mps-hold.json > $O/mps-hold.log 2>&1 &
run mps-sigint "--step-mb 256 --max-mb 4096 --busy 8" INT
VLIMIT=0=4096M run mps-oom "--step-mb 128 --interval 0.02 --busy 8" none
run mps-int-then-kill "--step-mb 256 --max-mb 4096 --busy 8 --ignore-sigint" INT sleep:1 KILL
mps_cmd get_server_list > $O/mps-server-list.txt 2>&1
mps_stop
kill $SAMPLER; wait $SAMPLER
cp $MPS_ROOT/log/*.log $O/ 2>/dev/null
ev done
