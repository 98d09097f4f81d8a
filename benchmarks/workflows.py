"""The async engine API against the batched call: tokens per second for N concurrent
single-turn episodes (`await client.generate(...)` each, `rlvr.rollout.client`) vs one
`engine.generate` over the same N prompts, same engine, same run, on SmolLM2-135M.

    python benchmarks/workflows.py [--episodes 64] [--tokens 32] [--repeats 3] [--engines transformers vllm]

Each engine runs in its own child process (vLLM rebinds OpenMP threads). The two paths
alternate within each repeat, with the same seed, so both generate the same tokens; the figure
is generated tokens over wall seconds (median of the repeats). The episodes path also runs
the full `single_turn` workflow through `EpisodeRunner` (scoring included, in-process
verifiers) to show what the runner adds on top of the engine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time


def child(engine_name: str, episodes: int, tokens: int, repeats: int,
          model: str = "smollm2-135m-instruct") -> None:
    import torch

    torch.set_num_threads(2)
    from rlvr.models import load_tokenizer, resolve_model_dir
    from rlvr.producer.groups import RewardShaping
    from rlvr.rewards.scorer import RewardScorer
    from rlvr.config.schema import VllmOptions
    from rlvr.rollout import EngineSettings, create_engine
    from rlvr.rollout.client import EngineClient, current_episode
    from rlvr.types import Prompt, SamplingParams
    from rlvr.workflows import EpisodeRunner, WorkflowSettings
    from rlvr.workflows.single_turn import single_turn

    model_dir = resolve_model_dir(model)
    tok = load_tokenizer(model_dir)
    engine = create_engine(engine_name, model_dir,
                           EngineSettings(engine_options={"vllm": VllmOptions(
                               kv_cache_gb=1.0, max_model_len=512, cpu_threads_bind="0-1")}),
                           (tok.eos_token_id,), tok.pad_token_id)
    questions = [f"What is {a} + {b}? Answer with just the number."
                 for a in range(10) for b in range(10)][:episodes]
    prompts = [Prompt(id=f"b/{i}", messages=({"role": "user", "content": q},),
                      token_ids=tuple(tok.apply_chat_template(
                          [{"role": "user", "content": q}], add_generation_prompt=True,
                          tokenize=True, return_dict=False)),
                      ground_truth="0", verifiers=("last_number",), source="b")
               for i, q in enumerate(questions)]
    params = SamplingParams(n=1, temperature=1.0, max_tokens=tokens, seed=7)
    engine.generate([list(prompts[0].token_ids)], params)  # warm-up

    def batched() -> int:
        out = engine.generate([list(p.token_ids) for p in prompts], params)
        return sum(len(g[0].token_ids_T) for g in out)

    def concurrent() -> int:
        client = EngineClient(engine)

        async def main():
            async def one(p):
                episode = client.tracker.start()
                current_episode.set(episode)
                try:
                    return await client.generate(p.token_ids, params)
                finally:
                    client.tracker.finish(episode)
            return await asyncio.gather(*(one(p) for p in prompts))

        out = asyncio.run(main())
        client.close()
        return sum(len(g[0].token_ids_T) for g in out)

    scorer = RewardScorer(num_workers=0)
    runner = EpisodeRunner(single_turn, engine, scorer, tok, WorkflowSettings())

    def workflow() -> int:
        episodes_, _ = runner.run(prompts, params, RewardShaping())
        return sum(len(g[0].completion.token_ids_T) for g in episodes_.groups)

    rates: dict[str, list[float]] = {"batched generate": [], "async API": [],
                                     "single_turn workflow": []}
    counts = {}
    for _ in range(repeats):
        for name, fn in (("batched generate", batched), ("async API", concurrent),
                         ("single_turn workflow", workflow)):
            start = time.perf_counter()
            n = fn()
            rates[name].append(n / (time.perf_counter() - start))
            counts[name] = n
    runner.close()
    scorer.close()
    print(json.dumps({"rates": {k: statistics.median(v) for k, v in rates.items()},
                      "tokens": counts}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--engines", nargs="+", default=["transformers", "vllm"])
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--model", default="smollm2-135m-instruct",
                        help="tiny-llama: the smoke run (tests/benchmarks), no figure")
    args = parser.parse_args()
    if args.child:
        child(args.child, args.episodes, args.tokens, args.repeats, args.model)
        return
    from rlvr.device import describe_host

    print(describe_host())
    print(f"{args.episodes} single-turn episodes x {args.tokens} tokens, {args.model}, "
          f"median of {args.repeats}")
    for name in args.engines:
        result = subprocess.run([sys.executable, __file__, "--child", name,
                                 "--episodes", str(args.episodes), "--tokens", str(args.tokens),
                                 "--repeats", str(args.repeats), "--model", args.model],
                                capture_output=True, text=True, env={
                                    **__import__("os").environ,
                                    "VLLM_ENABLE_V1_MULTIPROCESSING": "0"})
        lines = [ln for ln in result.stdout.splitlines() if ln.startswith("{")]
        if result.returncode or not lines:
            print(f"{name}: failed ({result.stderr.strip().splitlines()[-1:]})")
            continue
        data = json.loads(lines[-1])
        base = data["rates"]["batched generate"]
        for path, rate in data["rates"].items():
            print(f"{name:>12} {path:<22} {rate:8.0f} tok/s  {rate / base:5.2f}x  "
                  f"({data['tokens'][path]} tokens)")


if __name__ == "__main__":
    main()
