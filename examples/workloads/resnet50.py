"""resnet50: ResNet-50 (torchvision, random init from the prepared checkpoint) trained with SGD on
seeded synthetic 224 px images whose class shows in their colour, bf16 autocast, channels-last.
Result: the training loss of every step (kind "losses").

usage: python3 resnet50.py RESULT.json [--cache DIR] [--seed N]
sizes: GPUFRAC_STEPS, GPUFRAC_BATCH.
"""

import os

import common

STEPS, BATCH, POOL, CLASSES = 60, 64, 8, 10


def main():
    job = common.Job("resnet50", "losses", __doc__)
    steps = common.env_int("GPUFRAC_STEPS", STEPS)
    batch = common.env_int("GPUFRAC_BATCH", BATCH)
    torch = job.setup_torch()
    import torchvision
    from safetensors.torch import load_file
    job.mark("imports")

    model = torchvision.models.resnet50(weights=None, num_classes=1000)
    model.load_state_dict(load_file(os.path.join(job.checkpoint("resnet50"), "model.safetensors")))
    model = model.to("cuda", memory_format=torch.channels_last).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
    g = torch.Generator(device="cuda").manual_seed(job.args.seed)
    # A small pool of batches, cycled: each image is noise plus a per-class colour offset.
    palette = torch.randn(CLASSES, 3, 1, 1, device="cuda", generator=g)
    pool = []
    for _ in range(POOL):
        y = torch.randint(0, CLASSES, (batch,), device="cuda", generator=g)
        x = torch.randn(batch, 3, 224, 224, device="cuda", generator=g) + palette[y]
        pool.append((x.contiguous(memory_format=torch.channels_last), y))
    loss_fn = torch.nn.CrossEntropyLoss()
    job.mark("load")

    losses = []
    for i in range(steps):
        x, y = pool[i % POOL]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.detach().float())
    values = torch.stack(losses).tolist()
    job.mark("work")
    print(f"[result] template=resnet50 steps={steps} first_loss={values[0]:.6f} "
          f"last_loss={values[-1]:.6f}", flush=True)
    job.finish(values, {"steps": steps, "batch": batch})


if __name__ == "__main__":
    main()
