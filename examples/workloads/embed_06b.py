"""embed-0.6b: embeddings of a seeded synthetic corpus with a Qwen3-0.6B-shaped model (bf16):
mean-pooled last hidden states, L2-normalised in fp32. Result (kind "exact"): one digest per
document (SHA-256 prefix of the embedding rounded to 4 decimals; see common.digest_rows).

usage: python3 embed_06b.py RESULT.json [--cache DIR] [--seed N]
sizes: GPUFRAC_SEQS (documents), GPUFRAC_BATCH, GPUFRAC_SEQ (tokens per document).
"""

import common

SEQS, BATCH, SEQ = 1024, 64, 256


def main():
    job = common.Job("embed-0.6b", "exact", __doc__)
    n = common.env_int("GPUFRAC_SEQS", SEQS)
    batch = common.env_int("GPUFRAC_BATCH", BATCH)
    seq = common.env_int("GPUFRAC_SEQ", SEQ)
    torch = job.import_torch()
    model, data = job.load_inference("qwen3-0.6b", job.args.seed + 2, n, seq)

    embs = []
    with torch.inference_mode():
        for i in range(0, n, batch):
            h = model.model(input_ids=data[i:i + batch]).last_hidden_state
            e = h.float().mean(dim=1)
            embs.append(torch.nn.functional.normalize(e, dim=-1))
    emb = torch.cat(embs)
    values = common.digest_rows(emb)
    job.mark("work")
    print(f"[result] template=embed-0.6b docs={n} dim={emb.shape[1]} first={values[0]}",
          flush=True)
    job.finish(values, {"seqs": n, "batch": batch, "seq": seq})


if __name__ == "__main__":
    main()
