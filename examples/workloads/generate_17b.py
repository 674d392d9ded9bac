"""generate-1.7b: batch greedy generation with a KV cache from a Qwen3-1.7B-shaped model (bf16).
The loop is written out (prefill once, then one token at a time through past_key_values) so no
end-of-sequence or generation-config default can shorten it. Result (kind "exact"): the
generated token ids of every prompt.

usage: python3 generate_17b.py RESULT.json [--cache DIR] [--seed N]
sizes: GPUFRAC_SEQS (prompts), GPUFRAC_SEQ (prompt tokens), GPUFRAC_NEW (new tokens).
"""

import common

PROMPTS, PROMPT_LEN, NEW = 16, 32, 32


def main():
    job = common.Job("generate-1.7b", "exact", __doc__)
    n = common.env_int("GPUFRAC_SEQS", PROMPTS)
    plen = common.env_int("GPUFRAC_SEQ", PROMPT_LEN)
    new = common.env_int("GPUFRAC_NEW", NEW)
    torch = job.import_torch()
    model, prompts = job.load_inference("qwen3-1.7b", job.args.seed + 3, n, plen)

    out = []
    with torch.inference_mode():
        res = model(input_ids=prompts, use_cache=True)
        past = res.past_key_values
        nxt = res.logits[:, -1].argmax(dim=-1)
        for _ in range(new):
            out.append(nxt)
            res = model(input_ids=nxt.unsqueeze(-1), past_key_values=past, use_cache=True)
            past = res.past_key_values
            nxt = res.logits[:, -1].argmax(dim=-1)
    values = torch.stack(out, dim=1).tolist()
    job.mark("work")
    print(f"[result] template=generate-1.7b prompts={n} new={new} first={values[0][:8]}",
          flush=True)
    job.finish(values, {"prompts": n, "prompt_len": plen, "new_tokens": new})


if __name__ == "__main__":
    main()
