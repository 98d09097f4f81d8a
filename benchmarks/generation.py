"""Generation tokens per second: the vLLM engine vs the transformers engine on SmolLM2-135M.

    python benchmarks/generation.py [--prompts 8 32 64] [--samples 4] [--tokens 128] [--threads 2]

Each engine runs in its own child process (in-process vLLM rebinds the process's OpenMP threads,
which would skew whatever ran after it) with `--threads` compute threads, on the same GSM8K
prompts under the model's chat template, temperature 1.0. Tokens per second counts generated
tokens only; start-up and one warm-up call are excluded and reported separately. Prints a table
and the ratio.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time


def _prompts(tokenizer, n: int) -> list[list[int]]:
    from rlvr.config import DataSourceConfig
    from rlvr.data import load_source

    examples, _ = load_source(DataSourceConfig(name="gsm8k", split="test"), seed=0)
    return [list(tokenizer.apply_chat_template(list(ex.messages), add_generation_prompt=True,
                                               tokenize=True, return_dict=False))
            for ex in examples[:n]]


def child(engine_name: str, counts: list[int], samples: int, tokens: int, threads: int) -> None:
    """Runs in the child: start the engine, time each batch size, print one JSON line."""
    import torch

    torch.set_num_threads(threads)
    from rlvr.models import load_tokenizer, resolve_model_dir
    from rlvr.config.schema import VllmOptions
    from rlvr.rollout import EngineSettings, create_engine
    from rlvr.types import SamplingParams

    model_dir = resolve_model_dir("smollm2-135m-instruct")
    tokenizer = load_tokenizer(model_dir)
    start = time.perf_counter()
    cfg = EngineSettings(engine_options={"vllm": VllmOptions(
        kv_cache_gb=1.0, max_model_len=512,
        cpu_threads_bind=f"0-{threads - 1}" if threads > 1 else "0")})
    engine = create_engine(engine_name, model_dir, cfg, (tokenizer.eos_token_id,),
                           tokenizer.pad_token_id)
    startup = time.perf_counter() - start
    prompts = _prompts(tokenizer, max(counts))
    engine.generate(prompts[:2], SamplingParams(n=2, max_tokens=8, seed=0))  # warm-up
    rows = []
    for n in counts:
        params = SamplingParams(n=samples, temperature=1.0, max_tokens=tokens, seed=1)
        t0 = time.perf_counter()
        groups = engine.generate(prompts[:n], params)
        seconds = time.perf_counter() - t0
        generated = sum(len(c.token_ids_T) for g in groups for c in g)
        rows.append({"prompts": n, "tokens": generated, "seconds": seconds})
        print(f"ROW {json.dumps(rows[-1])}", flush=True)  # partial results survive a long run
    engine.close()
    print("RESULT " + json.dumps({"engine": engine_name, "startup_s": startup, "rows": rows}))


def run_child(engine_name: str, args) -> dict:
    cmd = [sys.executable, __file__, "--child", engine_name, "--samples", str(args.samples),
           "--tokens", str(args.tokens), "--threads", str(args.threads),
           "--prompts", *map(str, args.prompts)]
    # stderr to a file: a full stderr pipe nobody reads would stall the child.
    with tempfile.TemporaryFile("w+") as log, \
            subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True) as proc:
        for line in proc.stdout:
            if line.startswith("ROW "):
                row = json.loads(line[4:])
                print(f"  {engine_name}: {row['prompts']} prompts, {row['tokens']} tokens in "
                      f"{row['seconds']:.1f} s ({row['tokens'] / row['seconds']:.0f} tok/s)",
                      flush=True)
            elif line.startswith("RESULT "):
                result = json.loads(line[len("RESULT "):])
        proc.wait()
        log.seek(0)
        err = log.read()
    if proc.returncode != 0:
        raise SystemExit(f"{engine_name} failed:\n{err[-3000:]}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, nargs="+", default=[8, 32, 64])
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2, help="compute threads per engine")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.prompts, args.samples, args.tokens, args.threads)
        return
    results = {name: run_child(name, args) for name in ("vllm", "transformers")}
    print(f"SmolLM2-135M-Instruct, {args.samples} samples x up to {args.tokens} tokens, T=1.0, "
          f"{args.threads} threads per engine")
    for name, r in results.items():
        print(f"  {name} start-up {r['startup_s']:.1f} s")
    print(f"{'prompts':>8} {'vllm tok/s':>11} {'transformers tok/s':>19} {'ratio':>6}")
    for v, t in zip(results["vllm"]["rows"], results["transformers"]["rows"]):
        v_tps, t_tps = v["tokens"] / v["seconds"], t["tokens"] / t["seconds"]
        print(f"{v['prompts']:>8} {v_tps:>11.0f} {t_tps:>19.0f} {v_tps / t_tps:>5.2f}x")


if __name__ == "__main__":
    main()
