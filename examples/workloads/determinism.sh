#!/usr/bin/env bash
# Run some workloads twice, each wave with all of them at once on the GPU (no MPS), and compare
# the two waves' result files: exact kinds must be identical, losses are printed with their
# relative difference. Used for the determinism check in docs/benchmarks.md.
# usage: determinism.sh OUTDIR [template-script ...]   (GPUFRAC_CACHE must hold prepare.py's output)
set -u
out=${1:?usage: determinism.sh OUTDIR [script ...]}; shift
scripts=("$@"); [ ${#scripts[@]} -gt 0 ] || scripts=(eval_17b embed_06b generate_17b lora_06b)
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
for wave in 1 2; do
  pids=()
  for s in "${scripts[@]}"; do
    PYTHONUNBUFFERED=1 timeout 120 python3 "$here/$s.py" "$out/$s-$wave.json" >"$out/$s-$wave.log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || echo "a job of wave $wave exited $?"; done
done
python3 - "$out" "${scripts[@]}" <<'PY'
import json, sys
out, scripts = sys.argv[1], sys.argv[2:]
for s in scripts:
    try:
        a, b = (json.load(open(f"{out}/{s}-{w}.json")) for w in (1, 2))
    except Exception as e:
        print(f"[det] {s}: missing result: {e}"); continue
    if a["kind"] == "exact":
        print(f"[det] {s}: exact identical={a['values'] == b['values']}")
    else:
        va, vb = a["values"], b["values"]
        ma, mb = sum(va[-5:]) / 5, sum(vb[-5:]) / 5
        step = max(abs(x - y) / abs(x) for x, y in zip(va, vb))
        print(f"[det] {s}: losses identical={va == vb} max_step_rel={step:.3g} last5_mean_rel={abs(ma-mb)/abs(ma):.3g}")
    for w, d in ((1, a), (2, b)):
        m = d["meta"]
        print(f"[det]   wave{w} total={m['total_s']}s timings={m['timings_s']} torch_peak={m.get('torch_max_allocated_bytes',0)/2**30:.2f}GiB")
PY
