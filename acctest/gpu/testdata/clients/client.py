"""Real clients inside a capped task, for the fence's GPU client matrix (acctest/gpu/clients_test.go).

Each mode says what the client believed the GPU held, then asks for --target-mb in --chunk-mb
chunks and reports what it was granted and how it ended, as one JSON line (also to --out):
  torch     PyTorch with the allocator PYTORCH_CUDA_ALLOC_CONF chose (caching, cudaMallocAsync,
            expandable segments)
  raw       cudaMalloc through ctypes; cuDeviceTotalMem_v2 and cuMemGetInfo_v2 called by name
  jax       JAX (XLA_PYTHON_CLIENT_PREALLOCATE as the caller set it)
  cupy      CuPy's default memory pool
  dropchild a torch parent holds --hold-mb, then a child with every GPUFRAC_RESERVATION* key removed
            from its environment runs the torch mode
  twoproc   a torch parent holds --hold-mb, then a child of the same task runs the torch mode
  neighbour holds --hold-mb of a known pattern and, every 0.25 s, allocates and frees --probe-mb
            inside its guarantee and checks the pattern; writes one line to --events per failure,
            until --stop-file appears
  steps     PyTorch, three training-like steps: each allocates 3/4 of what mem_get_info says the
            GPU holds and frees it, keeping the allocator's memory between steps (no empty_cache:
            a stream-ordered pool keeps it for the next step, which must reuse it, not be charged
            for it twice); "finished" when every step got its memory
  cost      --n cudaMalloc/cudaFree pairs and --n cudaMallocAsync/cudaFreeAsync pairs of 64 KiB
            through ctypes: microseconds a pair
--dry-run checks the arguments and prints the plan without importing a framework (no GPU needed).
Outcomes: "finished" (got --target-mb), "oom-inside" (the client's own out-of-memory error, and it
went on running: it allocated again after freeing), "failed" (anything else).
"""
import argparse, ctypes, json, os, subprocess, sys, time

MiB = 2**20
MODES = ("torch", "steps", "raw", "jax", "cupy", "dropchild", "twoproc", "neighbour", "cost")


def emit(a, **kw):
    kw.setdefault("mode", a.mode)
    kw.setdefault("pid", os.getpid())
    line = json.dumps(kw, sort_keys=True)
    print(line, flush=True)
    if a.out:
        with open(a.out, "w") as f:
            f.write(line + "\n")


def is_oom(e):
    s = (type(e).__name__ + " " + str(e)).lower()
    return "out of memory" in s or "outofmemory" in s or "resource_exhausted" in s or "resource exhausted" in s


def grab(a, alloc, release, after):
    """Takes chunks until the target or the first error; frees; allocates once more (alive?)."""
    held, got, err = [], 0, ""
    try:
        while got < a.target_mb:
            held.append(alloc(a.chunk_mb * MiB))
            got += a.chunk_mb
    except Exception as e:  # each framework raises its own type
        err = (type(e).__name__ + ": " + str(e).splitlines()[0])[:200] if str(e) else type(e).__name__
        if not is_oom(e):
            return got, err, "failed"
    for h in held:
        release(h)
    held.clear()
    try:
        after()
    except Exception as e:
        return got, err + "; then: " + str(e)[:120], "failed"
    return got, err, "finished" if got >= a.target_mb else "oom-inside"


def cudart():
    import torch  # noqa: F401  (loads the runtime the wheels ship)
    for name in ("libcudart.so.13", "libcudart.so.12", "libcudart.so"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            pass
    raise SystemExit("no libcudart")


def torch_mode(a):
    import torch
    torch.cuda.init()
    free, total = torch.cuda.mem_get_info()
    tm = torch.cuda.get_device_properties(0).total_memory

    def alloc(n):
        t = torch.empty(n, dtype=torch.uint8, device="cuda")
        t.fill_(1)
        return t

    got, err, outcome = grab(a, alloc, lambda t: None,
                             lambda: (torch.cuda.empty_cache(), torch.ones(MiB, device="cuda").sum().item()))
    emit(a, info_free=free, info_total=total, total_memory=tm, granted_mb=got, error=err, outcome=outcome,
         alloc_conf=os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""))


def steps_mode(a):
    import torch
    torch.cuda.init()
    free, total = torch.cuda.mem_get_info()
    step = total * 3 // 4 // MiB * MiB
    done, err = 0, ""
    for _ in range(3):
        try:
            t = torch.empty(step, dtype=torch.uint8, device="cuda")
            t.fill_(1)
            torch.cuda.synchronize()
            del t
            done += 1
        except Exception as e:
            err = (type(e).__name__ + ": " + str(e).splitlines()[0])[:200]
            break
    emit(a, info_free=free, info_total=total, total_memory=torch.cuda.get_device_properties(0).total_memory,
         granted_mb=step // MiB if done else 0, steps=done, error=err,
         outcome="finished" if done == 3 else ("oom-inside" if is_oom_text(err) else "failed"),
         alloc_conf=os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""))


def is_oom_text(s):
    s = s.lower()
    return "out of memory" in s or "outofmemory" in s


def raw_mode(a):
    rt = cudart()
    drv = ctypes.CDLL("libcuda.so.1")
    rt.cudaFree(ctypes.c_void_p(0))  # makes the context
    free, total, tm = ctypes.c_size_t(), ctypes.c_size_t(), ctypes.c_size_t()
    drv.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total))
    drv.cuDeviceTotalMem_v2(ctypes.byref(tm), 0)

    def alloc(n):
        p = ctypes.c_void_p()
        rc = rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(n))
        if rc != 0:
            rt.cudaGetLastError()
            raise MemoryError("cudaMalloc returned %d%s" % (rc, " (out of memory)" if rc == 2 else ""))
        return p

    def after():
        p = alloc(MiB)
        rt.cudaFree(p)

    got, err, outcome = grab(a, alloc, rt.cudaFree, after)
    emit(a, info_free=free.value, info_total=total.value, total_memory=tm.value, granted_mb=got, error=err,
         outcome=outcome)


def jax_mode(a):
    import jax, jax.numpy as jnp
    d = jax.devices()[0]
    stats = d.memory_stats() or {}

    def alloc(n):
        x = jnp.ones((n // 4,), dtype=jnp.float32)
        x.block_until_ready()
        return x

    got, err, outcome = grab(a, alloc, lambda x: x.delete(), lambda: alloc(MiB).block_until_ready())
    emit(a, bytes_limit=stats.get("bytes_limit", 0), granted_mb=got, error=err, outcome=outcome,
         preallocate=os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE", "true"),
         xla_fraction=os.environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION", ""))


def cupy_mode(a):
    import cupy
    free, total = cupy.cuda.runtime.memGetInfo()
    tm = cupy.cuda.runtime.getDeviceProperties(0)["totalGlobalMem"]
    pool = cupy.get_default_memory_pool()

    def alloc(n):
        x = cupy.empty(n, dtype=cupy.uint8)
        x.fill(1)
        return x

    got, err, outcome = grab(a, alloc, lambda x: None, lambda: (pool.free_all_blocks(), alloc(MiB)))
    emit(a, info_free=free, info_total=total, total_memory=tm, granted_mb=got, error=err, outcome=outcome)


def child_mode(a, drop):
    import torch
    held = torch.empty(a.hold_mb * MiB, dtype=torch.uint8, device="cuda")
    held.fill_(1)
    env = dict(os.environ)
    if drop:
        for k in [k for k in env if k.startswith("GPUFRAC_RESERVATION")]:
            env.pop(k)
    out = (a.out or "/tmp/client") + ".child.json"
    args = [sys.executable, "-u", os.path.abspath(__file__), "torch", "--target-mb", str(a.target_mb),
            "--chunk-mb", str(a.chunk_mb), "--out", out]
    code = subprocess.call(args, env=env, timeout=a.child_timeout)
    child = {}
    try:
        with open(out) as f:
            child = json.loads(f.read())
    except (OSError, ValueError):
        pass
    emit(a, parent_held_mb=a.hold_mb, child_exit=code, child=child, granted_mb=child.get("granted_mb", 0),
         info_total=child.get("info_total", 0), total_memory=child.get("total_memory", 0),
         outcome=child.get("outcome", "failed"), error=child.get("error", ""))


def neighbour_mode(a):
    import torch
    held = torch.full((a.hold_mb * MiB,), 7, dtype=torch.uint8, device="cuda")
    # A uint8 sum is promoted to int64 (a temporary eight times the tensor): sum it as int64
    # words instead, which wraps the same way every time.
    def checksum():
        return int(held.view(torch.int64).sum().item())

    want = checksum()
    emit(a, outcome="ready", granted_mb=a.hold_mb)

    def event(what):
        with open(a.events, "a") as f:
            f.write(json.dumps({"t": time.time(), "what": what}) + "\n")

    while not os.path.exists(a.stop_file):
        try:
            t = torch.empty(a.probe_mb * MiB, dtype=torch.uint8, device="cuda")
            t.fill_(3)
            del t
            torch.cuda.empty_cache()
            if checksum() != want:
                event("pattern changed")
        except Exception as e:
            event((type(e).__name__ + ": " + str(e))[:200])
        time.sleep(0.25)
    emit(a, outcome="finished", granted_mb=a.hold_mb)


def cost_mode(a):
    rt = cudart()
    rt.cudaFree(ctypes.c_void_p(0))
    p = ctypes.c_void_p()
    n = ctypes.c_size_t(64 * 1024)
    t0 = time.perf_counter()
    for _ in range(a.n):
        rt.cudaMalloc(ctypes.byref(p), n)
        rt.cudaFree(p)
    pair = time.perf_counter() - t0
    # Stream-ordered pairs on the default stream: the fence asks the pool what it reserves at each.
    t0 = time.perf_counter()
    for _ in range(a.n):
        rt.cudaMallocAsync(ctypes.byref(p), n, None)
        rt.cudaFreeAsync(p, None)
    rt.cudaDeviceSynchronize()
    emit(a, pair_us=round(1e6 * pair / a.n, 3), async_pair_us=round(1e6 * (time.perf_counter() - t0) / a.n, 3),
         outcome="finished")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=MODES)
    ap.add_argument("--target-mb", type=int, default=12288)
    ap.add_argument("--chunk-mb", type=int, default=512)
    ap.add_argument("--hold-mb", type=int, default=2048)
    ap.add_argument("--probe-mb", type=int, default=1024)
    ap.add_argument("--events", default="")
    ap.add_argument("--stop-file", default="")
    ap.add_argument("--child-timeout", type=float, default=120)
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--out", default="")
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args()
    if a.mode == "neighbour" and (not a.events or not a.stop_file):
        ap.error("neighbour needs --events and --stop-file")
    if a.chunk_mb <= 0 or a.target_mb < 0:
        ap.error("--chunk-mb must be positive and --target-mb not negative")
    if a.dry_run:
        emit(a, outcome="dry-run", target_mb=a.target_mb, chunk_mb=a.chunk_mb)
        return
    {"torch": torch_mode, "steps": steps_mode, "raw": raw_mode, "jax": jax_mode, "cupy": cupy_mode,
     "dropchild": lambda a: child_mode(a, True), "twoproc": lambda a: child_mode(a, False),
     "neighbour": neighbour_mode, "cost": cost_mode}[a.mode](a)


if __name__ == "__main__":
    main()
