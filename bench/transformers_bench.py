#!/usr/bin/env python3
"""The same weights through PyTorch/transformers, for the kvlm / transformers ratio in bench/RESULTS.md.

Loads a directory written by bench/export_hf.py (config.json + model.safetensors) in bf16 on the GPU and
measures, like `kvlm bench` (random token ids, no tokenizer, mean and standard deviation over repetitions
after one warm-up):
  ppP: one forward over P tokens (prefill), tokens/s;
  tgN: model.generate(max_new_tokens=N, min_new_tokens=N, greedy) from a 1-token prompt, N / time.
generate's own overhead (greedy argmax, stopping checks) is part of tgN: that is what a transformers user
gets. --static-cache uses cache_implementation="static" as the transformers docs suggest for speed.

Usage: transformers_bench.py HF_DIR [-p 512] [-n 128] [-r 5] [--static-cache] [--json]
Needs torch + transformers (present on the lent GPU machines, not on the development machine).
"""
import argparse
import json
import statistics
import time

import torch
import transformers
from transformers import AutoModelForCausalLM


def timed(fn, device):
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def summary(values):
    return {"mean": statistics.mean(values), "stddev": statistics.stdev(values) if len(values) > 1 else 0.0,
            "n": len(values)}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model_dir")
    parser.add_argument("-p", type=int, default=512)
    parser.add_argument("-n", type=int, default=128)
    parser.add_argument("-r", type=int, default=5)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--static-cache", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    # transformers 4.56 renamed torch_dtype to dtype (5.x warns about the old name).
    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    dtype_arg = "dtype" if (major, minor) >= (4, 56) else "torch_dtype"
    model = AutoModelForCausalLM.from_pretrained(args.model_dir, **{dtype_arg: torch.bfloat16}).to(args.device).eval()
    vocab = model.config.vocab_size
    gen = torch.Generator(device="cpu").manual_seed(42)

    def random_ids(n):
        return torch.randint(0, vocab, (1, n), generator=gen).to(args.device)

    rows = []
    with torch.inference_mode():
        if args.p > 0:
            rates = []
            for rep in range(args.r + 1):
                ids = random_ids(args.p)
                seconds = timed(lambda: model(ids, use_cache=True), args.device)
                if rep > 0:
                    rates.append(args.p / seconds)
            rows.append({"test": f"pp{args.p}", "tokens_per_second": summary(rates)})
        if args.n > 0:
            extra = {"cache_implementation": "static"} if args.static_cache else {}
            rates = []
            for rep in range(args.r + 1):
                ids = random_ids(1)
                seconds = timed(lambda: model.generate(ids, max_new_tokens=args.n, min_new_tokens=args.n,
                                                       do_sample=False, pad_token_id=0, **extra), args.device)
                if rep > 0:
                    rates.append(args.n / seconds)
            rows.append({"test": f"tg{args.n}", "tokens_per_second": summary(rates)})

    device_name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    if args.json:
        print(json.dumps({"backend": f"transformers {__import__('transformers').__version__} / torch "
                                     f"{torch.__version__} ({device_name})",
                          "static_cache": args.static_cache, "results": rows}, indent=2))
    else:
        for row in rows:
            s = row["tokens_per_second"]
            print(f"| transformers ({device_name}{', static cache' if args.static_cache else ''}) | {row['test']} | "
                  f"{s['mean']:.2f} ± {s['stddev']:.2f} |")


if __name__ == "__main__":
    main()
