"""lora-0.6b: LoRA (peft, r=16 on q_proj/v_proj) fine-tune of a Qwen3-0.6B-shaped model in bf16
on seeded synthetic token ids. Result: the training loss of every step (kind "losses").

usage: python3 lora_06b.py RESULT.json [--cache DIR] [--seed N]
sizes: GPUFRAC_STEPS, GPUFRAC_BATCH, GPUFRAC_SEQ override the calibrated defaults below.
"""

import common

# Calibrated on the H200 (docs/benchmarks.md, "Workload calibration"): start-up (imports, CUDA
# context, loading) takes 12-15 s of these jobs, so the steps are kept to a few seconds of work.
DEFAULTS = {"lora-0.6b": dict(ckpt="qwen3-0.6b", steps=12, batch=8, seq=512),
            "lora-1.7b": dict(ckpt="qwen3-1.7b", steps=12, batch=8, seq=512)}


def main(template):
    d = DEFAULTS[template]
    job = common.Job(template, "losses", __doc__)
    steps = common.env_int("GPUFRAC_STEPS", d["steps"])
    batch = common.env_int("GPUFRAC_BATCH", d["batch"])
    seq = common.env_int("GPUFRAC_SEQ", d["seq"])
    torch = job.setup_torch()
    import peft  # noqa: F401  (imported here so the import is timed with the rest)
    import transformers  # noqa: F401
    job.mark("imports")

    model = job.load_qwen(d["ckpt"])
    common.seed_all(job.args.seed)  # LoRA's A matrices are drawn from this
    cfg = peft.LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0,
                          target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    model = peft.get_peft_model(model, cfg)
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    data = common.chain_tokens(job.args.seed, steps * batch, seq).view(steps, batch, seq)
    data = data.to("cuda")
    job.mark("load")

    losses = []
    for i in range(steps):
        ids = data[i]
        out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(out.loss.detach().float())
    values = torch.stack(losses).tolist()
    job.mark("work")
    print(f"[result] template={template} steps={steps} first_loss={values[0]:.6f} "
          f"last_loss={values[-1]:.6f}", flush=True)
    job.finish(values, {"steps": steps, "batch": batch, "seq": seq})


if __name__ == "__main__":
    main("lora-0.6b")
