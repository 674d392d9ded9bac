#!/usr/bin/env bash
# usage: det.sh  (on the GPU machine; results and logs in $OUT)
set -u
export GPUFRAC_CACHE=/tmp/gpufrac-cache PYTHONUNBUFFERED=1
timeout 150 python3 examples/workloads/prepare.py --cache $GPUFRAC_CACHE 2>&1 | grep -v 'Writing model shards' | tail -3
mkdir -p $OUT/r
run() { # script variant tag env...
  local s=$1 v=$2 tag=$3; shift 3
  local t0=$(date +%s%N)
  env "$@" timeout 90 python3 exp/det.py $s.py $v $OUT/r/$s-$v-$tag.json > $OUT/r/$s-$v-$tag.log 2>&1; rc=$?
  echo "$s $v $tag rc=$rc wall_ms=$(( ($(date +%s%N) - t0) / 1000000 ))" | tee -a $OUT/det.txt
}
G="GPUFRAC_SEQS=1024 GPUFRAC_SEQ=128 GPUFRAC_NEW=96"
F="GPUFRAC_STEPS=64 GPUFRAC_BATCH=16 GPUFRAC_SEQ=1024"
L="GPUFRAC_STEPS=80 GPUFRAC_BATCH=16 GPUFRAC_SEQ=1024"
for v in strict nocudnn; do for t in a b; do run generate_17b $v $t $G; done; done
for v in strict nocudnn; do for t in a b; do run fullft_06b $v $t $F; done; done
for t in a b; do run lora_06b strict $t $L; done
cd $OUT/r && python3 - <<'PY' | tee -a $OUT/det.txt
import json, glob
for a in sorted(glob.glob('*-a.json')):
    b = a[:-7] + '-b.json'
    try: A, B = json.load(open(a)), json.load(open(b))
    except Exception as e: print(a, 'missing', e); continue
    m = lambda d: d['meta']
    if A['kind'] == 'exact': same = A['values'] == B['values']; d = ''
    else:
        x, y = sum(A['values'][-5:]) / 5, sum(B['values'][-5:]) / 5; same = A['values'] == B['values']; d = f'last5 {x:.6f} {y:.6f}'
    print(a[:-7], 'identical' if same else 'DIFFER', d, 'work_s', m(A)['timings_s'].get('work'), m(B)['timings_s'].get('work'), 'reserved_GiB', round(m(A).get('torch_max_reserved_bytes', 0) / 2**30, 2))
PY
grep -h -i "warn\|error" $OUT/r/*.log | sort | uniq -c | head -20 | tee -a $OUT/det.txt
cd $OUT/r && tar czf $OUT/r.tgz *.log && rm -f *.log
