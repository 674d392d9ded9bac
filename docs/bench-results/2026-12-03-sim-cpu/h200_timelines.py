"""Timelines of the H200 runs of 2026-12-03 (exit fix), for the simulator's calibration.

For every attempt of every arm: its start and end from the arm's start, the phases the job
printed ([timing] lines in its log), when NVML first saw it hold memory and when it reached 90%
of its peak (the runner's samples in results.json), and how many jobs of the arm were running
when it started. usage: python3 h200_timelines.py DIR... (each a 2026-12-03-seedN-exitfix
directory); prints one CSV row per attempt.
"""

import ast
import csv
import datetime
import json
import os
import re
import sys

TIMING = re.compile(r"\[timing\] template=\S+ phase=(\S+) s=([0-9.]+)")


def ts(s):
    s = s.rstrip("Z")
    head, _, frac = s.partition(".")
    t = datetime.datetime.fromisoformat(head).replace(tzinfo=datetime.timezone.utc)
    return t.timestamp() + float("0." + (frac or "0"))


def phases(path):
    out = {}
    if os.path.exists(path):
        with open(path, errors="replace") as f:
            for line in f:
                m = TIMING.search(line)
                if m:
                    out[m.group(1)] = float(m.group(2))
    return out


def samples(a):
    s = a.get("samples") or []
    if isinstance(s, str):
        s = ast.literal_eval(s)
    return [(float(x["t"]), int(x["bytes"])) for x in s]


def main(dirs):
    w = csv.writer(sys.stdout)
    w.writerow(["seed", "arm", "job", "template", "attempt", "start_s", "end_s", "dur_s", "outcome",
                "running_at_start", "import_torch_s", "cuda_init_s", "imports_s", "load_s",
                "work_s", "small_phase_s", "leak_s", "first_mem_s", "mem90_s", "peak_gib"])
    for d in dirs:
        seed = re.search(r"seed(\d)", d).group(1)
        for arm in sorted(os.listdir(d)):
            rj = os.path.join(d, arm, "runner", "results.json")
            if not os.path.exists(rj):
                continue
            r = json.load(open(rj))
            t0 = ts(r["start"])
            atts = r["attempts"]
            spans = [(ts(a["start"]) - t0, ts(a["end"]) - t0) for a in atts]
            for a, (s, e) in zip(atts, spans):
                running = sum(1 for (s2, e2) in spans if s2 <= s + 0.5 and e2 > s) - 1
                ph = phases(os.path.join(d, arm, "runner", a["log"])) if a.get("log") else {}
                smp = samples(a)
                peak = max((b for _, b in smp), default=0)
                first = next((t for t, b in smp if b > 0), None)
                m90 = next((t for t, b in smp if peak and b >= 0.9 * peak), None)
                f = lambda v: "" if v is None else f"{v:.2f}"
                w.writerow([seed, arm, a["job"], a["template"], a["attempt"], f(s), f(e), f(e - s),
                            a["outcome"], running, f(ph.get("import-torch")), f(ph.get("cuda-init")),
                            f(ph.get("imports")), f(ph.get("load")), f(ph.get("work")),
                            f(ph.get("small-phase")), f(ph.get("leak")), f(first), f(m90),
                            f"{peak / 2**30:.1f}"])


if __name__ == "__main__":
    main(sys.argv[1:])
