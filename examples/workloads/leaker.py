"""leaker: the misbehaving job. For its first seconds it looks like a small, well-behaved job (a
small MLP trained in paced 100 ms steps, about 1 GiB on the GPU with its CUDA context) until
GPUFRAC_LEAKER_SMALL_S seconds after the process started (default 20, so a probe window shorter
than that sees a small job). Then it allocates a new GPU tensor every interval and keeps all of
them, far past any sane cap, up to a total: 93% of the memory of the GPU it runs on (what
torch.cuda reports as the device's total memory, or GPUFRAC_LEAK_DEVICE_BYTES: inside a gpufrac
task the device reports the task's guarantee, so the benchmark passes the physical GPU's size and
the leaker grows alike in every arm), as the published benchmark's leaker completes
at 76 GB of an 80 GB GPU, so that co-location without caps meets it. (Before 2026-12-01 it
stopped at a fixed 100 GiB, 71% of an H200, and rarely met anyone.)

It has no limit of its own: it ignores GPUFRAC_MEMORY_FRACTION and GPUFRAC_CAP_BYTES, sets no
allocator fraction and catches no out-of-memory error, so only the enforcer can stop it (under
MPS the allocation that crosses the cap raises inside this process and it exits non-zero; in
isolated mode the watchdog has to stop it). Given a whole GPU it reaches its total, holds it for a
moment and exits 0 with an "exact" result (the probe losses' digest and the GiB it held, which
depends on the GPU's size: results compare only between runs on the same kind of GPU), so its
exclusive run is a clean, comparable result like any other job's. Next to other jobs on a GPU
without caps it may itself run out of memory, uncaught, and exit non-zero.

usage: python3 leaker.py RESULT.json [--seed N]
knobs: GPUFRAC_LEAKER_SMALL_S (20), GPUFRAC_LEAKER_STEP_MS (100): the small phase (at least
       MIN_STEPS steps; the result digests the first MIN_STEPS losses, so it does not depend on
       how many steps fit); GPUFRAC_LEAKER_BATCH (256) and GPUFRAC_LEAKER_WIDTH (4096): the
       small phase's batch and MLP width (the busy profile makes them large and the step 0 ms,
       so the leaker computes like its neighbours until it leaks);
       GPUFRAC_LEAK_CHUNK_MIB (512), GPUFRAC_LEAK_INTERVAL_MS (25),
       GPUFRAC_LEAK_FRACTION (0.93 of the device's total memory), GPUFRAC_LEAK_DEVICE_BYTES
       (unset: the device's total as CUDA reports it; when set, the GPU's size the fraction is
       of), GPUFRAC_LEAK_TOTAL_GIB (unset; when set, a fixed total that wins over the fraction:
       100 was the old leaker).
"""

import time

import common

MIN_STEPS = 10


def main():
    job = common.Job("leaker", "exact", __doc__)
    small_s = common.env_float("GPUFRAC_LEAKER_SMALL_S", 20.0)
    step_s = common.env_int("GPUFRAC_LEAKER_STEP_MS", 100) / 1000
    batch = common.env_int("GPUFRAC_LEAKER_BATCH", 256)
    width = common.env_int("GPUFRAC_LEAKER_WIDTH", 4096)
    # 512 MiB every 25 ms (20 GiB/s): the growth is steady, so samples taken every 20 ms see it
    # climb to the cap instead of one jump far past it.
    chunk_mib = common.env_int("GPUFRAC_LEAK_CHUNK_MIB", 512)
    interval_s = common.env_int("GPUFRAC_LEAK_INTERVAL_MS", 25) / 1000
    fraction = common.env_float("GPUFRAC_LEAK_FRACTION", 0.93)
    fixed_gib = common.env_float("GPUFRAC_LEAK_TOTAL_GIB", 0.0)
    given_device = common.env_int("GPUFRAC_LEAK_DEVICE_BYTES", 0)
    if not 0 < fraction <= 1:
        raise SystemExit(f"GPUFRAC_LEAK_FRACTION={fraction}: want a share of the GPU above 0, at most 1")
    if fixed_gib < 0:
        raise SystemExit(f"GPUFRAC_LEAK_TOTAL_GIB={fixed_gib}: must not be negative")
    if given_device < 0:
        raise SystemExit(f"GPUFRAC_LEAK_DEVICE_BYTES={given_device}: must not be negative")
    if batch < 1 or width < 1 or step_s < 0:
        raise SystemExit(f"GPUFRAC_LEAKER_BATCH={batch}, GPUFRAC_LEAKER_WIDTH={width}, "
                         f"GPUFRAC_LEAKER_STEP_MS={step_s * 1000:g}: want a positive batch and "
                         "width and a step of 0 ms or more")
    torch = job.setup_torch()
    job.mark("imports")
    # The device's memory (the H200: 143771 MiB), not what is free now: the leaker does not care
    # who else is on the GPU. Under gpufrac's fence CUDA reports the task's guarantee as the
    # device's total (and mem_get_info the cap), and the leaker must outgrow it: the benchmark
    # says the physical size in GPUFRAC_LEAK_DEVICE_BYTES.
    device_bytes = given_device or torch.cuda.get_device_properties(0).total_memory
    total_bytes = int(fixed_gib * 2**30) if fixed_gib > 0 else int(device_bytes * fraction)
    total_gib = total_bytes / 2**30

    model = torch.nn.Sequential(torch.nn.Linear(1024, width), torch.nn.GELU(),
                                torch.nn.Linear(width, 1024)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(batch, 1024, device="cuda")
    y = torch.randn(batch, 1024, device="cuda")
    job.mark("load")

    # Only the losses the digest needs stay on the GPU: on the H200 every kept loss pinned about
    # 32 MiB (387 steps of the busy profile's batch held 12.4 GiB, and its leak then ran the GPU
    # out of memory with the GPU to itself; measured 2026-12-03, docs/bench/packing-2026-12-03.md).
    first, steps = [], 0
    while steps < MIN_STEPS or time.perf_counter() - common.T0 < small_s:
        t = time.perf_counter()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if steps < MIN_STEPS:
            first.append(loss.detach())
        steps += 1
        torch.cuda.synchronize()
        time.sleep(max(0.0, step_s - (time.perf_counter() - t)))
    job.mark("small-phase")
    print(f"[leaker] small phase done, now allocating {chunk_mib} MiB every "
          f"{interval_s * 1000:.0f} ms up to {total_gib:.1f} GiB "
          f"({total_bytes / device_bytes:.0%} of the GPU's {device_bytes / 2**30:.1f} GiB)", flush=True)

    held = []
    chunk = chunk_mib * 2**20
    while len(held) * chunk < total_bytes:
        t = time.perf_counter()
        held.append(torch.ones(chunk, dtype=torch.uint8, device="cuda"))
        torch.cuda.synchronize()
        gib = len(held) * chunk / 2**30
        if len(held) % 8 == 0:
            print(f"[leaker] holding {gib:.1f} GiB", flush=True)
        time.sleep(max(0.0, interval_s - (time.perf_counter() - t)))
    time.sleep(0.5)
    job.mark("leak")
    digest = common.digest_rows(torch.stack(first).view(1, -1))[0]
    job.finish([digest, round(len(held) * chunk / 2**30, 3)],
               {"small_steps": steps, "batch": batch, "width": width,
                "chunk_mib": chunk_mib, "total_gib": round(total_gib, 3),
                "device_gib": round(device_bytes / 2**30, 3), "fraction": round(total_bytes / device_bytes, 4)})


if __name__ == "__main__":
    main()
