"""fullft-0.6b: full fine-tune (AdamW, fp32 master weights, bf16 autocast) of a
Qwen3-0.6B-shaped model on seeded synthetic token ids. Result: the loss of every step.

usage: python3 fullft_06b.py RESULT.json [--cache DIR] [--seed N]
sizes: GPUFRAC_STEPS, GPUFRAC_BATCH, GPUFRAC_SEQ.
"""

import common

STEPS, BATCH, SEQ = 12, 8, 512


def main():
    job = common.Job("fullft-0.6b", "losses", __doc__)
    steps = common.env_int("GPUFRAC_STEPS", STEPS)
    batch = common.env_int("GPUFRAC_BATCH", BATCH)
    seq = common.env_int("GPUFRAC_SEQ", SEQ)
    torch = job.import_torch()

    model = job.load_qwen("qwen3-0.6b", dtype=torch.float32)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    data = common.chain_tokens(job.args.seed, steps * batch, seq).view(steps, batch, seq)
    data = data.to("cuda")
    job.mark("load")

    losses = []
    for i in range(steps):
        ids = data[i]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(out.loss.detach().float())
    values = torch.stack(losses).tolist()
    job.mark("work")
    print(f"[result] template=fullft-0.6b steps={steps} first_loss={values[0]:.6f} "
          f"last_loss={values[-1]:.6f}", flush=True)
    job.finish(values, {"steps": steps, "batch": batch, "seq": seq})


if __name__ == "__main__":
    main()
