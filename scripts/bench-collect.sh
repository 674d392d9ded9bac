#!/usr/bin/env bash
# Here, after a device call of bench-seed.sh or bench-arms.sh: unpack the results archive(s) the
# call brought back into docs/bench-results/ and insert the tables into the "Packing benchmark"
# section of docs/bench/results.md, the results journal (run from the repository root). A calibration run
# (bench-calibrate.sh) is unpacked and its calibration.md printed, not inserted: it is no seed's
# result.
# usage: bench-collect.sh [--title TEXT] DIR_OR_TGZ...   (the call's files_at folder, or a .tgz)
set -euo pipefail
title=()
if [ "${1:-}" = --title ]; then title=(--title "$2"); shift 2; fi
[ $# -gt 0 ] || { echo "usage: bench-collect.sh [--title TEXT] DIR_OR_TGZ..." >&2; exit 2; }
dest=docs/bench-results
mkdir -p "$dest"
tgzs=()
for arg in "$@"; do
  if [ -d "$arg" ]; then
    for t in "$arg"/bench-*.tgz; do tgzs+=("$t"); done
  else
    tgzs+=("$arg")
  fi
done
dirs=()
for t in "${tgzs[@]}"; do
  if [ ! -f "$t" ]; then echo "no results archive at $t" >&2; exit 1; fi
  top=$(tar tzf "$t" | awk -F/ 'NR == 1 { print $1 }')
  if [ -e "$dest/$top" ]; then echo "$dest/$top exists: not overwriting it" >&2; exit 1; fi
  # The ledger state directories are working files, not results.
  tar xzf "$t" -C "$dest" --exclude='*/state' --exclude='*/state/*'
  # The runner's own results.json and report.html are most of a run's bytes (0.3-0.9 MB an arm
  # on the busy profile) and no tool reads them back, and the run's runs.json (about 114 KB)
  # only the report reads, which takes it gzipped: kept gzipped, so the tracked tree stays
  # small enough for a device call to copy (64 MiB with the carried binary). zcat reads them.
  find "$dest/$top" -type f \( -path '*/runner/results.json' -o -path '*/runner/report.html' -o -path "$dest/$top/runs.json" \) -exec gzip -9 -n {} +
  from=$(dirname "$t")
  log="$from/$(basename "$t" .tgz).log"
  if [ -f "$log" ]; then cp "$log" "$dest/$top/device.log"; fi
  for f in env.txt vmstat.txt cpu-canary.txt; do
    if [ -f "$from/$f" ]; then cp "$from/$f" "$dest/$top/$f"; fi
  done
  echo "unpacked $t -> $dest/$top"
  case $top in
    *-calibration*) cat "$dest/$top/calibration.md" 2>/dev/null ;;
    *) dirs+=("$dest/$top") ;;
  esac
done
[ ${#dirs[@]} -gt 0 ] || exit 0
bin=${GPUFRAC_BENCH:-bin/gpufrac-bench}
if [ ! -x "$bin" ]; then go build -o "$bin" ./bench/cmd/gpufrac-bench; fi
"$bin" report "${title[@]}" --into docs/bench/results.md "${dirs[@]}"
