"""What the busy leaker's small phase holds on the GPU, step by step, and what its leak adds.

Run on the GPU machine: python3 scripts/leaker-memory.py. On the H200 (2026-12-03) it showed
every loss the small phase kept pinning about 32 MiB (387 steps: 12.4 GiB), which is why the
busy leaker ran out of memory with the GPU to itself; leaker.py now keeps only the losses its
digest needs. The sizes are the busy profile's (bench.BusySizes: batch 8192, width 8192).
"""

import time

import torch

GIB = 2**30
BATCH = WIDTH = 8192
SMALL_S = 6
CHUNK = 512 * 2**20


def say(what):
    print(f"[leaker-memory] {what}: allocated {torch.cuda.memory_allocated() / GIB:.2f} GiB, "
          f"reserved {torch.cuda.memory_reserved() / GIB:.2f} GiB", flush=True)


def main():
    # The workloads' own settings (common.Job.setup_torch), which the leak depends on.
    torch.backends.cudnn.deterministic = True
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.zeros(1, device="cuda")
    say("context")
    model = torch.nn.Sequential(torch.nn.Linear(1024, WIDTH), torch.nn.GELU(),
                                torch.nn.Linear(WIDTH, 1024)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(BATCH, 1024, device="cuda")
    y = torch.randn(BATCH, 1024, device="cuda")
    say("load")
    losses = []
    start = time.perf_counter()
    while time.perf_counter() - start < SMALL_S:
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.detach())
        torch.cuda.synchronize()
        if len(losses) in (1, 10, 100, 1000, 3000):
            say(f"step {len(losses)}, every loss kept")
    say(f"small phase end, {len(losses)} steps")
    held = []
    for _ in range(40):
        held.append(torch.ones(CHUNK, dtype=torch.uint8, device="cuda"))
        torch.cuda.synchronize()
        if len(held) % 8 == 0:
            say(f"leak holding {len(held) * CHUNK / GIB:.1f} GiB")


if __name__ == "__main__":
    main()
