"""Small PyTorch workloads for gpufrac's GPU acceptance tests.

Modes:
  matmul  a neighbour: fixed-seed fp32 matmul loop with a deep launch queue; writes a sha256 of
          its final tensor so a run next to others can be compared with its solo run.
  leak    a violator: keeps a matmul loop busy and grows its allocation by --step-mb every
          --interval s until it hits --max-mb or a CUDA out-of-memory error (exit 1).
  hold    allocates --mb and holds it for --seconds (context overhead, unmanaged use).
All modes write "<out>.ready" once their CUDA work has started and a JSON result to --out.
"""
import argparse, hashlib, json, multiprocessing as mp, os, signal, sys, time


def ready(out):
    if out:
        with open(out + ".ready", "w") as f:
            f.write(str(os.getpid()))


def result(out, **kw):
    kw.setdefault("pid", os.getpid())
    line = json.dumps(kw, sort_keys=True)
    print(line, flush=True)
    if out:
        with open(out, "w") as f:
            f.write(line + "\n")


def matmul(a):
    import torch
    torch.manual_seed(a.seed)
    torch.backends.cuda.matmul.allow_tf32 = False
    x = torch.randn(a.size, a.size, device="cuda")
    w = torch.randn(a.size, a.size, device="cuda") / a.size ** 0.5
    hold = torch.empty(a.hold_mb * 2**20, dtype=torch.uint8, device="cuda") if a.hold_mb else None
    ready(a.out)
    t0 = time.time()
    for i in range(a.iters):
        x = torch.tanh(x @ w)
    torch.cuda.synchronize()
    digest = hashlib.sha256(x.cpu().numpy().tobytes()).hexdigest()
    result(a.out, mode="matmul", seed=a.seed, sha256=digest, sum=float(x.double().sum()),
           seconds=round(time.time() - t0, 3))


def leak(a):
    import torch
    if a.ignore_sigint:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.backends.cuda.matmul.allow_tf32 = False
    x = torch.randn(a.size, a.size, device="cuda")
    w = torch.randn(a.size, a.size, device="cuda") / a.size ** 0.5
    held, total = [], 0
    ready(a.out)
    t_next = time.time()
    try:
        while True:
            for _ in range(a.busy):
                x = torch.tanh(x @ w)
            if time.time() >= t_next and (a.max_mb == 0 or total < a.max_mb):
                held.append(torch.empty(a.step_mb * 2**20, dtype=torch.uint8, device="cuda"))
                held[-1].fill_(1)
                total += a.step_mb
                t_next = time.time() + a.interval
            if a.busy == 0:
                time.sleep(0.005)
    except torch.cuda.OutOfMemoryError as e:
        result(a.out, mode="leak", outcome="oom", allocated_mb=total,
               error=str(e).splitlines()[0][:200])
        sys.exit(1)


def leak_child(a, i):
    a.out = a.out + ".%d" % i if a.out else ""
    leak(a)


def hold(a):
    import torch
    t = torch.empty(a.mb * 2**20, dtype=torch.uint8, device="cuda")
    t.fill_(1)
    torch.cuda.synchronize()
    ready(a.out)
    time.sleep(a.seconds)
    result(a.out, mode="hold", mb=a.mb, reserved=torch.cuda.memory_reserved())


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["matmul", "leak", "hold"])
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--size", type=int, default=4096)
    p.add_argument("--iters", type=int, default=200)
    p.add_argument("--hold-mb", type=int, default=0)
    p.add_argument("--step-mb", type=int, default=256)
    p.add_argument("--interval", type=float, default=0.05)
    p.add_argument("--max-mb", type=int, default=0)
    p.add_argument("--busy", type=int, default=4, help="matmuls queued per leak step")
    p.add_argument("--ignore-sigint", action="store_true")
    p.add_argument("--procs", type=int, default=1, help="leak: CUDA processes in this task")
    p.add_argument("--mb", type=int, default=1024)
    p.add_argument("--seconds", type=float, default=5)
    p.add_argument("--out", default="")
    a = p.parse_args()
    if a.mode == "leak" and a.procs > 1:
        ctx = mp.get_context("spawn")
        ps = [ctx.Process(target=leak_child, args=(a, i)) for i in range(a.procs)]
        for c in ps:
            c.start()
        ready(a.out)
        codes = []
        for c in ps:
            c.join()
            codes.append(c.exitcode)
        result(a.out, mode="leak", procs=a.procs, exit_codes=codes)
        sys.exit(0 if all(c == 0 for c in codes) else 1)
    {"matmul": matmul, "leak": leak, "hold": hold}[a.mode](a)


if __name__ == "__main__":
    main()
