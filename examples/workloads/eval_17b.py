"""eval-1.7b: log-likelihood of fixed seeded sequences under a Qwen3-1.7B-shaped model (bf16).
Result (kind "exact"): each sequence's summed token log-likelihood, computed in fp32, summed in
fp64 and rounded to 4 decimals.

usage: python3 eval_17b.py RESULT.json [--cache DIR] [--seed N]
sizes: GPUFRAC_SEQS (sequences), GPUFRAC_BATCH, GPUFRAC_SEQ (tokens per sequence).
"""

import common

SEQS, BATCH, SEQ = 128, 16, 512


def main():
    job = common.Job("eval-1.7b", "exact", __doc__)
    n = common.env_int("GPUFRAC_SEQS", SEQS)
    batch = common.env_int("GPUFRAC_BATCH", BATCH)
    seq = common.env_int("GPUFRAC_SEQ", SEQ)
    torch = job.import_torch()
    model, data = job.load_inference("qwen3-1.7b", job.args.seed + 1, n, seq)

    sums = []
    with torch.inference_mode():
        for i in range(0, n, batch):
            ids = data[i:i + batch]
            logits = model(input_ids=ids).logits[:, :-1]
            logp = torch.log_softmax(logits.float(), dim=-1)
            tok = logp.gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
            sums.append(tok.double().sum(dim=-1))
            del logits, logp, tok
    values = [round(v, 4) for v in torch.cat(sums).tolist()]
    job.mark("work")
    print(f"[result] template=eval-1.7b seqs={n} first={values[0]} last={values[-1]}", flush=True)
    job.finish(values, {"seqs": n, "batch": batch, "seq": seq})


if __name__ == "__main__":
    main()
