#!/usr/bin/env bash
# The ladder's GPU suite (leakers.hcl): seven ways to break a cap and a runaway beside four busy
# neighbours, through `gpufrac run` with borrowing on (wait) and off, on a GPU machine. Prints one
# line per job (attempts, each attempt's room, outcome, reason) and whether each neighbour's result
# matches its solo run, measured first in the same call.
#
#   make build   # here: bin/gpufrac and bin/libgpufrac-fence.so; carry them
#   OUT=/tmp/l bash acctest/gpu/testdata/leakers.sh   # there: python3 with torch, an idle GPU
#   (LEAKERS_BORROW="wait" runs one borrowing rule only; LEAKERS_MODE=mps runs them under MPS,
#   whose daemon gpufrac run starts and stops)
set -uo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
out=${OUT:?set OUT to a directory for the logs}
bin=$root/bin/gpufrac
mkdir -p "$out"
cd "$root/acctest/gpu/testdata"
for s in 1 2; do
	timeout 90 python3 workload.py matmul --size 8192 --iters 600 --hold-mb 2048 --seed $s --out "$out/solo-$s.json" >/dev/null 2>>"$out/solo.err"
done
mode=${LEAKERS_MODE:-isolated}
for b in ${LEAKERS_BORROW:-wait off}; do
	dir=/tmp/leakers-$mode-$b
	rm -rf "$dir"
	start=$(date +%s)
	timeout 300 "$bin" run --gpu-backend nvml --mode "$mode" --borrow $b --state-dir "$dir/state" --out "$dir/out" leakers.hcl >"$out/run-$mode-$b.log" 2>&1
	echo "== mode $mode, borrow $b: exit $? after $(($(date +%s) - start)) s"
	python3 - "$dir/out" "$out" <<'PY'
import json, sys, os
res, out = sys.argv[1], sys.argv[2]
solo = {s: json.load(open(os.path.join(out, "solo-%d.json" % s)))["sha256"] for s in (1, 2)}
r = json.load(open(os.path.join(res, "results.json")))
for j in r["jobs"]:
    line = "%-20s %-10s attempts %s of %s  ladder %s" % (j["name"], j["outcome"], j.get("attempts"), j.get("max_attempts"), j.get("ladder", ""))
    if j.get("reason"):
        line += "  reason: " + j["reason"]
    if j["name"].startswith("neighbour"):
        try:
            got = json.load(open(j["result"]))
            line += "  result %s solo" % ("==" if got["sha256"] == solo[got["seed"]] else "!=")
        except Exception as e:
            line += "  result unreadable: %s" % e
    print(line)
PY
	tar czf "$out/leakers-$mode-$b.tgz" -C "$dir" out 2>/dev/null
done
