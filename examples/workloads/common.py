"""Plumbing shared by the gpufrac benchmark workloads: arguments, seeding, deterministic
settings, synthetic inputs, checkpoint loading, timing lines and the result file.

Every workload is one process that:
  1. imports this module first (it records the start time and sets CUBLAS_WORKSPACE_CONFIG
     before CUDA is initialised, which cuBLAS needs for reproducible results),
  2. loads its model from the checkpoint that prepare.py wrote (so start-up includes real
     loading, as in a real job),
  3. runs seeded work, and
  4. writes {"template", "kind", "values", "meta"} to the result path (argv[1] or
     $GPUFRAC_RESULT), atomically, so a job killed mid-write leaves no half file.
The benchmark compares "kind" and "values" only; "meta" (timings, peak memory) is for people.
"""

import os
import sys
import time

T0 = time.perf_counter()
# cuBLAS picks reduction orders per workspace; a fixed workspace config keeps them reproducible.
# It must be set before the first CUDA call, which is why this module is imported first.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import argparse  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402

QWEN_SHAPES = {
    # Shapes of the public Qwen3 configurations (gpu-facts.md); weights are random.
    "qwen3-0.6b": dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                       num_attention_heads=16, num_key_value_heads=8, head_dim=128),
    "qwen3-1.7b": dict(hidden_size=2048, intermediate_size=6144, num_hidden_layers=28,
                       num_attention_heads=16, num_key_value_heads=8, head_dim=128),
}
VOCAB = 151936
DEFAULT_SEED = 1234


def default_cache():
    return os.environ.get("GPUFRAC_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "gpufrac-workloads")


def env_int(name, default):
    return _env(name, default, int, "an integer")


def env_float(name, default):
    return _env(name, default, float, "a number")


def _env(name, default, parse, what):
    v = os.environ.get(name)
    if v is None or v == "":
        return default
    try:
        return parse(v)
    except ValueError:
        sys.exit(f"{name}={v!r}: not {what}")


class Job:
    """One workload run: its arguments, clock and result file."""

    def __init__(self, template, kind, description):
        p = argparse.ArgumentParser(description=description)
        p.add_argument("result", nargs="?", default=os.environ.get("GPUFRAC_RESULT", ""),
                       help="where to write the result JSON (default $GPUFRAC_RESULT)")
        p.add_argument("--cache", default=default_cache(),
                       help="checkpoint dir written by prepare.py (default $GPUFRAC_CACHE "
                            "or ~/.cache/gpufrac-workloads)")
        p.add_argument("--seed", type=int, default=env_int("GPUFRAC_SEED", DEFAULT_SEED))
        self.args = p.parse_args()
        if not self.args.result:
            p.error("no result path: pass it as the first argument or set GPUFRAC_RESULT")
        self.template = template
        self.kind = kind
        self.timings = {}
        self._last = T0
        self.torch = None

    def mark(self, phase):
        """Print and record the seconds spent since the previous mark."""
        now = time.perf_counter()
        dt = now - self._last
        self._last = now
        self.timings[phase] = round(dt, 3)
        print(f"[timing] template={self.template} phase={phase} s={dt:.3f} "
              f"since_start={now - T0:.3f}", flush=True)

    def setup_torch(self, deterministic=True):
        """Import torch, seed every generator and pick reproducible kernels."""
        import torch
        self.torch = torch
        self.mark("import-torch")
        seed_all(self.args.seed)
        if deterministic:
            torch.backends.cudnn.deterministic = True
            torch.backends.cudnn.benchmark = False
            # Strict, not warn_only: under warn_only the attention backward (cuDNN's, and flash's
            # without cuDNN) keeps its non-deterministic kernel and only warns, so two runs of a
            # busy-profile fine-tune alone disagreed by up to 10% and the benchmark failed packed
            # jobs for it. Strict selects deterministic kernels: on the H200 the same peak
            # memory, work phases within 4% of the earlier runs (docs/bench/results.md,
            # "Deterministic workloads"). An op with no such kernel fails the job and names
            # itself, which is better than a result check that cannot decide.
            torch.use_deterministic_algorithms(True)
            # The deterministic mode fills every torch.empty with NaN; jobs here overwrite all
            # they allocate, so skip the fill (it would only cost time).
            import torch.utils.deterministic
            torch.utils.deterministic.fill_uninitialized_memory = False
        if not torch.cuda.is_available():
            sys.exit("CUDA is not available: these workloads need an NVIDIA GPU")
        torch.zeros(1, device="cuda")  # create the context now so its cost is timed apart
        torch.cuda.synchronize()
        self.mark("cuda-init")
        return torch

    def checkpoint(self, name):
        path = os.path.join(self.args.cache, name)
        if not os.path.exists(os.path.join(path, "COMPLETE")):
            sys.exit(f"checkpoint {path!r} is missing or incomplete: run prepare.py --cache "
                     f"{self.args.cache!r} first")
        return path

    def import_torch(self):
        """setup_torch, then transformers; both imports are timed, the latter as "imports"."""
        torch = self.setup_torch()
        import transformers  # noqa: F401
        self.mark("imports")
        return torch

    def load_inference(self, name, seed, n, seq):
        """The named model in eval mode, and n seeded sequences of seq token ids on the GPU to
        feed it; timed as "load"."""
        model = self.load_qwen(name)
        model.eval()
        data = chain_tokens(seed, n, seq).to("cuda")
        self.mark("load")
        return model, data

    def load_qwen(self, name, dtype=None):
        """Load a Qwen3-shaped causal LM from the prepared checkpoint straight onto the GPU."""
        torch = self.torch
        from transformers import Qwen3ForCausalLM
        self.mark("import-model")
        model = Qwen3ForCausalLM.from_pretrained(
            self.checkpoint(name), dtype=dtype or torch.bfloat16,
            attn_implementation="sdpa", device_map="cuda")
        return model

    def finish(self, values, extra=None):
        """Write the result file atomically and print the closing timing and peak lines."""
        torch = self.torch
        meta = {"timings_s": self.timings, "seed": self.args.seed}
        if torch is not None and torch.cuda.is_available():
            torch.cuda.synchronize()
            meta["torch_max_allocated_bytes"] = torch.cuda.max_memory_allocated()
            meta["torch_max_reserved_bytes"] = torch.cuda.max_memory_reserved()
        if extra:
            meta.update(extra)
        meta["total_s"] = round(time.perf_counter() - T0, 3)
        doc = {"template": self.template, "kind": self.kind, "values": values, "meta": meta}
        path = self.args.result
        d = os.path.dirname(os.path.abspath(path))
        os.makedirs(d, exist_ok=True)
        tmp = f"{path}.tmp.{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump(doc, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        print(f"[peak] template={self.template} torch_max_allocated_bytes="
              f"{meta.get('torch_max_allocated_bytes', 0)} torch_max_reserved_bytes="
              f"{meta.get('torch_max_reserved_bytes', 0)}", flush=True)
        print(f"[timing] template={self.template} phase=total s={meta['total_s']:.3f}", flush=True)


def seed_all(seed):
    random.seed(seed)
    try:
        import numpy
        numpy.random.seed(seed % (2**32))
    except ImportError:
        pass
    import torch
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)


def chain_tokens(seed, n_seqs, seq_len, vocab=VOCAB, alphabet=4096, follow=0.9):
    """Seeded synthetic token ids with structure a model can learn: each sequence walks a fixed
    random successor table over a small alphabet (probability `follow`) or jumps at random.
    Uniform random tokens would leave every training loss flat at log(vocab), which would make
    the loss comparison blind to a corrupted run; this data makes the losses move."""
    import torch
    g = torch.Generator().manual_seed(seed)
    ids = torch.randperm(vocab, generator=g)[:alphabet]
    succ = torch.randint(0, alphabet, (alphabet,), generator=g)
    cur = torch.randint(0, alphabet, (n_seqs,), generator=g)
    out = torch.empty(n_seqs, seq_len, dtype=torch.long)
    for t in range(seq_len):
        out[:, t] = cur
        jump = torch.rand(n_seqs, generator=g) >= follow
        rnd = torch.randint(0, alphabet, (n_seqs,), generator=g)
        cur = torch.where(jump, rnd, succ[cur])
    return ids[out]


def digest_rows(t, decimals=4):
    """Hash each row of a float tensor after rounding to `decimals`: identical tensors give
    identical digests, and rounding first keeps the digest independent of how the values are
    printed. Returns 16-hex-digit prefixes of SHA-256."""
    import torch
    q = torch.round(t.float() * (10 ** decimals)).to(torch.int64).cpu().contiguous()
    return [hashlib.sha256(row.numpy().tobytes()).hexdigest()[:16] for row in q]
