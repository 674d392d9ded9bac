#!/usr/bin/env bash
# On the GPU machine (python3 with torch, nvidia-smi); see docs/bench/packing-2026-12.md, "after the exit fix".
# How long after a CUDA process's exit NVML still lists its memory: N GiB allocated, exit(0),
# poll nvidia-smi until the PID is gone.
for gib in 3 60; do
  for i in 1 2; do
    python3 - "$gib" <<'PY' > /tmp/td.out 2>&1 &
import sys, time, os, torch
x = torch.empty(int(sys.argv[1]) << 30, dtype=torch.uint8, device="cuda"); x.fill_(1)
torch.cuda.synchronize()
print(os.getpid(), flush=True)
time.sleep(1.5)
print("exit", repr(time.time()), flush=True)
PY
    py=$!
    wait $py
    t0=$(grep ^exit /tmp/td.out | awk '{print $2}')
    pid=$(head -1 /tmp/td.out)
    n=0
    while nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader | grep -q "^$pid,"; do n=$((n+1)); [ $n -gt 200 ] && break; done
    t1=$(date +%s.%N)
    echo "gib=$gib try=$i pid=$pid listed_after_exit_s=$(python3 -c "print(round($t1-$t0,3))") polls=$n"
  done
done
