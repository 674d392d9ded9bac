"""Write every workload's model once to a local safetensors checkpoint, with random weights built
from configurations (nothing is downloaded). Jobs load from here, so their start-up includes real
checkpoint loading. Idempotent: a checkpoint with a COMPLETE marker of the same version is kept.

usage: python3 prepare.py [--cache DIR] [--force]
"""

import common  # noqa: F401  (first: start time, cuBLAS workspace config)

import argparse
import json
import os
import shutil
import sys
import time

# Bump when a checkpoint's content or layout changes, so stale caches are rebuilt.
VERSION = "1"
PREPARE_SEED = 20261129


def done(path):
    try:
        with open(os.path.join(path, "COMPLETE")) as f:
            return f.read().strip() == VERSION
    except OSError:
        return False


def mark_done(path):
    with open(os.path.join(path, "COMPLETE"), "w") as f:
        f.write(VERSION + "\n")


def fresh(path):
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)


def build_qwen(name, path):
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM
    common.seed_all(PREPARE_SEED)
    cfg = Qwen3Config(vocab_size=common.VOCAB, tie_word_embeddings=True,
                      max_position_embeddings=4096, **common.QWEN_SHAPES[name])
    # Built on the GPU: random init of 1.7B parameters on the CPU takes far longer.
    with torch.device("cuda"):
        model = Qwen3ForCausalLM(cfg)
    model = model.to(torch.bfloat16)
    model.save_pretrained(path)
    n = sum(p.numel() for p in model.parameters())
    del model
    torch.cuda.empty_cache()
    return n


def build_resnet(path):
    import torch
    import torchvision
    from safetensors.torch import save_file
    common.seed_all(PREPARE_SEED)
    model = torchvision.models.resnet50(weights=None, num_classes=1000)
    sd = {k: v.contiguous() for k, v in model.state_dict().items()}
    save_file(sd, os.path.join(path, "model.safetensors"))
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump({"arch": "resnet50", "num_classes": 1000}, f)
    return sum(p.numel() for p in model.parameters())


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--cache", default=common.default_cache())
    p.add_argument("--force", action="store_true", help="rebuild even if present")
    args = p.parse_args()
    os.makedirs(args.cache, exist_ok=True)
    builders = [("qwen3-0.6b", lambda d: build_qwen("qwen3-0.6b", d)),
                ("qwen3-1.7b", lambda d: build_qwen("qwen3-1.7b", d)),
                ("resnet50", build_resnet)]
    for name, build in builders:
        path = os.path.join(args.cache, name)
        if done(path) and not args.force:
            print(f"[prepare] {name}: cached at {path}", flush=True)
            continue
        t = time.perf_counter()
        fresh(path)
        n = build(path)
        mark_done(path)
        print(f"[prepare] {name}: {n} parameters written to {path} in "
              f"{time.perf_counter() - t:.1f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
