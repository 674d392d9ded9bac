"""lora-1.7b: the lora-0.6b job (see lora_06b.py) on a Qwen3-1.7B shape.

usage: python3 lora_17b.py RESULT.json [--cache DIR] [--seed N]
"""

import lora_06b

if __name__ == "__main__":
    lora_06b.main("lora-1.7b")
