"""PyTorch and CUDA programs for the allocation fence's GPU acceptance tests.

Modes (each prints one JSON line and writes it to --out; "<out>.ready" once CUDA is up):
  fill      allocate --chunk-mb chunks until an out-of-memory error or --target-mb, with the
            allocator PYTORCH_CUDA_ALLOC_CONF chose, or raw cudaMalloc through ctypes (--raw);
            then free everything and allocate a small tensor: the process must live on.
  pair      allocate --mb, then a spawned child process of the same task tries --mb too.
With --strict, fill and pair exit 1 when they did not get all they asked for (a job that needs
its memory, as the ladder's GPU suite wants: acctest/gpu/testdata/leakers.hcl).
  escape    a child started with LD_PRELOAD or the reservation removed from its environment
            allocates --mb and holds it: only the watchdog can see it.
  grow      an honest job: grow by --step-mb every --interval s to --to-mb, hold --seconds.
  runaway   honest for --after s, then take --chunk-mb chunks as fast as it can until refused.
  cost      time --n cudaMalloc/cudaFree pairs of --kb through ctypes, and --n torch.empty/del
            pairs with the caching allocator off (PYTORCH_NO_CUDA_MEMORY_CACHING=1 set by caller).
"""
import argparse, ctypes, ctypes.util, multiprocessing as mp, os, subprocess, sys, time

from workload import ready, result  # the same ready file and result line as workload.py

MiB = 2**20


def cudart():
    import torch  # noqa: F401  (loads the runtime the wheels ship)
    for name in ("libcudart.so.13", "libcudart.so.12", "libcudart.so"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            pass
    path = ctypes.util.find_library("cudart")
    if not path:
        raise SystemExit("no libcudart")
    return ctypes.CDLL(path)


def fill(a):
    import torch
    torch.cuda.init()
    free, total = torch.cuda.mem_get_info()
    ready(a.out)
    held, got, err = [], 0, ""
    rt = cudart() if a.raw else None
    try:
        while a.target_mb == 0 or got < a.target_mb:
            if rt:
                p = ctypes.c_void_p()
                rc = rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(a.chunk_mb * MiB))
                if rc != 0:
                    err = "cudaMalloc returned %d" % rc
                    rt.cudaGetLastError()  # a failed call leaves its error for the next one to see
                    break
                held.append(p)
            else:
                t = torch.empty(a.chunk_mb * MiB, dtype=torch.uint8, device="cuda")
                t.fill_(1)
                held.append(t)
            got += a.chunk_mb
    except torch.cuda.OutOfMemoryError as e:
        err = "OutOfMemoryError: " + str(e).splitlines()[0][:160]
    for p in held:
        if rt:
            rt.cudaFree(p)
    held.clear()
    torch.cuda.empty_cache()
    after = torch.ones(16 * MiB, device="cuda").sum().item()  # lives on after the refusal
    result(a.out, mode="fill", allocated_mb=got, error=err, info_free=free, info_total=total, alive=after == 16 * MiB)
    if a.strict and err:
        sys.exit(1)


def pair_child(mb, q):
    import torch
    try:
        t = torch.empty(mb * MiB, dtype=torch.uint8, device="cuda")
        t.fill_(1)
        q.put("ok")
    except torch.cuda.OutOfMemoryError:
        q.put("oom")


def pair(a):
    import torch
    t = torch.empty(a.mb * MiB, dtype=torch.uint8, device="cuda")
    t.fill_(1)
    ready(a.out)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    c = ctx.Process(target=pair_child, args=(a.mb, q))
    c.start()
    c.join()
    child = q.get() if not q.empty() else "none"
    result(a.out, mode="pair", child=child, child_exit=c.exitcode)
    if a.strict and child != "ok":
        sys.exit(1)


def escape(a):
    env = dict(os.environ)
    if a.drop == "preload":
        env.pop("LD_PRELOAD", None)
    else:
        for k in [k for k in env if k.startswith("GPUFRAC_RESERVATION")]:
            env.pop(k)
    ready(a.out)
    code = subprocess.call([sys.executable, "-c",
        "import torch,time; t=torch.empty(%d*2**20,dtype=torch.uint8,device='cuda'); t.fill_(1); torch.cuda.synchronize(); time.sleep(%f)" % (a.mb, a.seconds)], env=env)
    result(a.out, mode="escape", drop=a.drop, child_exit=code)
    sys.exit(0 if code == 0 else 1)


def grow(a):
    import torch
    held, got = [], 0
    ready(a.out)
    try:
        while got < a.to_mb:
            held.append(torch.empty(a.step_mb * MiB, dtype=torch.uint8, device="cuda"))
            held[-1].fill_(1)
            got += a.step_mb
            time.sleep(a.interval)
        time.sleep(a.seconds)
    except torch.cuda.OutOfMemoryError as e:
        result(a.out, mode="grow", outcome="oom", allocated_mb=got, error=str(e).splitlines()[0][:160])
        sys.exit(1)
    result(a.out, mode="grow", outcome="ok", allocated_mb=got)


def runaway(a):
    import torch
    x = torch.ones(256 * MiB, dtype=torch.uint8, device="cuda")
    ready(a.out)
    time.sleep(a.after)
    held, got, t0 = [x], 256, time.time()
    try:
        while True:
            held.append(torch.empty(a.chunk_mb * MiB, dtype=torch.uint8, device="cuda"))
            got += a.chunk_mb
    except torch.cuda.OutOfMemoryError as e:
        result(a.out, mode="runaway", outcome="oom", allocated_mb=got, ms=round(1000 * (time.time() - t0), 1),
               error=str(e).splitlines()[0][:160])
        sys.exit(1)


def cost(a):
    import torch
    rt = cudart()
    torch.cuda.init()
    torch.empty(1, device="cuda")
    p = ctypes.c_void_p()
    for _ in range(200):  # warm up
        rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(a.kb * 1024))
        rt.cudaFree(p)
    t0 = time.perf_counter()
    for _ in range(a.n):
        rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(a.kb * 1024))
        rt.cudaFree(p)
    raw = (time.perf_counter() - t0) / a.n
    t0 = time.perf_counter()
    for _ in range(a.n):
        t = torch.empty(a.kb * 1024, dtype=torch.uint8, device="cuda")
        del t
    tor = (time.perf_counter() - t0) / a.n
    result(a.out, mode="cost", n=a.n, kb=a.kb, cuda_pair_us=round(raw * 1e6, 3), torch_pair_us=round(tor * 1e6, 3))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["fill", "pair", "escape", "grow", "runaway", "cost"])
    p.add_argument("--chunk-mb", type=int, default=256)
    p.add_argument("--target-mb", type=int, default=0)
    p.add_argument("--raw", action="store_true")
    p.add_argument("--strict", action="store_true")
    p.add_argument("--mb", type=int, default=1024)
    p.add_argument("--drop", choices=["preload", "token"], default="preload")
    p.add_argument("--seconds", type=float, default=5)
    p.add_argument("--to-mb", type=int, default=1024)
    p.add_argument("--step-mb", type=int, default=512)
    p.add_argument("--interval", type=float, default=0.2)
    p.add_argument("--after", type=float, default=4)
    p.add_argument("--n", type=int, default=20000)
    p.add_argument("--kb", type=int, default=64)
    p.add_argument("--out", default="")
    a = p.parse_args()
    {"fill": fill, "pair": pair, "escape": escape, "grow": grow, "runaway": runaway, "cost": cost}[a.mode](a)


if __name__ == "__main__":
    main()
