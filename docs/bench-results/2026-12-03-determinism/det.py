"""One busy workload under a determinism variant (an experiment, not committed).
usage: det.py SCRIPT VARIANT RESULT   variants: base, strict (warn_only=False), nocudnn
(cuDNN SDPA off), strict-nocudnn."""
import os, sys, runpy
script, variant, result = sys.argv[1:4]
import torch
if "nocudnn" in variant:
    torch.backends.cuda.enable_cudnn_sdp(False)
if "strict" in variant:
    orig = torch.use_deterministic_algorithms
    torch.use_deterministic_algorithms = lambda mode, warn_only=False: orig(mode, warn_only=False)
here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "workloads")
sys.path.insert(0, here)
sys.argv = [script, result]
runpy.run_path(os.path.join(here, script), run_name="__main__")
