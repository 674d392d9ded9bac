"""Calibrate the workloads on one GPU: run each template alone, one after another, and record its
wall time (process start to exit, as the benchmark sees it), its own timing lines, torch's peak
allocation and the peak NVML memory of its process (sampled at 50 Hz); then run some templates a
second time and compare the two result files (exact kinds must be identical; losses are reported
as the largest relative difference per step and on the mean of the last 5 steps).

usage: python3 calibrate.py --out DIR [--cache DIR] [--repeat a,b] [--deadline SECONDS]
Writes DIR/calibration.json and DIR/<template>-<run>.{json,log}; prints a summary table.
"""

import argparse
import json
import os
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATES = {
    "lora-0.6b": "lora_06b.py", "lora-1.7b": "lora_17b.py", "fullft-0.6b": "fullft_06b.py",
    "eval-1.7b": "eval_17b.py", "embed-0.6b": "embed_06b.py", "generate-1.7b": "generate_17b.py",
    "resnet50": "resnet50.py", "leaker": "leaker.py",
}


class NVMLSampler:
    """Peak NVML memory of one PID and of the whole GPU, sampled in a thread."""

    def __init__(self, pid, period=0.02):
        import pynvml
        self.nv = pynvml
        self.h = pynvml.nvmlDeviceGetHandleByIndex(0)
        self.pid, self.period = pid, period
        self.proc_peak = 0
        self.dev_peak = 0
        self.base = pynvml.nvmlDeviceGetMemoryInfo(self.h).used
        self.stop = threading.Event()
        self.t = threading.Thread(target=self.loop, daemon=True)
        self.t.start()

    def loop(self):
        while not self.stop.is_set():
            try:
                for p in self.nv.nvmlDeviceGetComputeRunningProcesses(self.h):
                    if p.pid == self.pid and p.usedGpuMemory:
                        self.proc_peak = max(self.proc_peak, p.usedGpuMemory)
                used = self.nv.nvmlDeviceGetMemoryInfo(self.h).used
                self.dev_peak = max(self.dev_peak, used - self.base)
            except self.nv.NVMLError:
                pass
            time.sleep(self.period)

    def close(self):
        self.stop.set()
        self.t.join()


def run_one(name, out, cache, tag, env_extra=None, timeout=45):
    result = os.path.join(out, f"{name}-{tag}.json")
    log = os.path.join(out, f"{name}-{tag}.log")
    env = dict(os.environ, GPUFRAC_CACHE=cache, PYTHONUNBUFFERED="1", **(env_extra or {}))
    t0 = time.perf_counter()
    with open(log, "w") as lf:
        p = subprocess.Popen([sys.executable, os.path.join(HERE, TEMPLATES[name]), result],
                             stdout=lf, stderr=subprocess.STDOUT, env=env)
        s = NVMLSampler(p.pid)
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            rc = p.wait()
        s.close()
    wall = time.perf_counter() - t0
    rec = {"template": name, "run": tag, "rc": rc, "wall_s": round(wall, 3),
           "nvml_proc_peak_bytes": s.proc_peak, "nvml_device_peak_delta_bytes": s.dev_peak}
    try:
        with open(result) as f:
            doc = json.load(f)
        rec["meta"] = doc.get("meta", {})
        rec["kind"] = doc.get("kind")
        rec["values"] = doc.get("values")
    except (OSError, ValueError) as e:
        rec["result_error"] = str(e)
    with open(log) as f:
        rec["log_tail"] = f.read()[-1500:]
    return rec


def compare(a, b):
    if "values" not in a or "values" not in b:
        return {"comparable": False}
    if a["kind"] == "exact":
        return {"identical": a["values"] == b["values"]}
    va, vb = a["values"], b["values"]
    step = max(abs(x - y) / max(abs(x), 1e-12) for x, y in zip(va, vb))
    ma, mb = sum(va[-5:]) / 5, sum(vb[-5:]) / 5
    return {"identical": va == vb, "max_step_rel": step, "last5_mean_rel": abs(ma - mb) / abs(ma)}


def mps_leaker_check(out, cache, limit="8G"):
    """Leaker under an MPS pinned-memory limit: it should fail inside its own process."""
    pipe, logd = "/tmp/gpufrac-cal-mps/pipe", "/tmp/gpufrac-cal-mps/log"
    os.makedirs(pipe, exist_ok=True)
    os.makedirs(logd, exist_ok=True)
    env = dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=pipe, CUDA_MPS_LOG_DIRECTORY=logd)
    subprocess.run(["timeout", "10", "nvidia-cuda-mps-control", "-d"], env=env, check=False)
    try:
        rec = run_one("leaker", out, cache, "mps8G", timeout=60, env_extra={
            "CUDA_MPS_PIPE_DIRECTORY": pipe, "CUDA_MPS_LOG_DIRECTORY": logd,
            "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": f"0={limit}"})
    finally:
        subprocess.run(["timeout", "10", "nvidia-cuda-mps-control"], input=b"quit\n", env=env,
                       check=False)
    return rec


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", required=True)
    ap.add_argument("--cache", default=os.environ.get("GPUFRAC_CACHE", "/tmp/gpufrac-cache"))
    ap.add_argument("--only", default=",".join(TEMPLATES))
    ap.add_argument("--repeat", default="lora-0.6b,eval-1.7b,embed-0.6b,generate-1.7b,resnet50")
    ap.add_argument("--deadline", type=float, default=240, help="launch nothing after this")
    ap.add_argument("--mps-leaker", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    t0 = time.perf_counter()
    import pynvml
    pynvml.nvmlInit()
    summary = {"driver": pynvml.nvmlSystemGetDriverVersion(),
               "gpu": pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0)),
               "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "runs": [],
               "compare": {}}

    def save():
        with open(os.path.join(a.out, "calibration.json"), "w") as f:
            json.dump(summary, f, indent=1)

    pt = time.perf_counter()
    r = subprocess.run([sys.executable, os.path.join(HERE, "prepare.py"), "--cache", a.cache],
                       capture_output=True, text=True)
    summary["prepare"] = {"rc": r.returncode, "wall_s": round(time.perf_counter() - pt, 2),
                          "out": (r.stdout + r.stderr)[-3000:]}
    print(summary["prepare"]["out"], flush=True)
    save()
    first = {}
    plan = [(n, "1") for n in a.only.split(",") if n] + \
           [(n, "2") for n in a.repeat.split(",") if n]
    for name, tag in plan:
        if time.perf_counter() - t0 > a.deadline:
            print(f"deadline: skipping {name}-{tag}", flush=True)
            continue
        rec = run_one(name, a.out, a.cache, tag)
        summary["runs"].append({k: v for k, v in rec.items() if k != "values"})
        m = rec.get("meta", {})
        print(f"[cal] {name:14s} run={tag} rc={rec['rc']} wall={rec['wall_s']:6.2f}s "
              f"timings={m.get('timings_s')} torch_peak={m.get('torch_max_allocated_bytes', 0)/2**30:.2f}GiB "
              f"nvml_peak={rec['nvml_proc_peak_bytes']/2**30:.2f}GiB", flush=True)
        if rec["rc"] != 0:
            print(rec["log_tail"], flush=True)
        if tag == "1":
            first[name] = rec
        elif name in first:
            c = compare(first[name], rec)
            summary["compare"][name] = c
            print(f"[cal] compare {name}: {c}", flush=True)
        save()
    if a.mps_leaker and time.perf_counter() - t0 < a.deadline:
        rec = mps_leaker_check(a.out, a.cache)
        summary["mps_leaker"] = {k: v for k, v in rec.items() if k != "values"}
        print(f"[cal] leaker under MPS 8G: rc={rec['rc']} wall={rec['wall_s']}s "
              f"nvml_peak={rec['nvml_proc_peak_bytes']/2**30:.2f}GiB\n{rec['log_tail'][-600:]}",
              flush=True)
        save()
    print(f"[cal] total {time.perf_counter() - t0:.1f}s", flush=True)


if __name__ == "__main__":
    main()
