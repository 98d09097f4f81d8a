"""One learner rank's process for tests/distributed/test_local_ranks.py: started once per rank
with the environment torchrun gives (RANK, WORLD_SIZE, ...). Rank 0 drives a `LearnerGroup`
of the "ranks" backend over the tiny model and prints one JSON line; the others follow.
RLVR_TEST_FAULT picks what goes wrong: "raise" or "die" (rank 1, in its first update), or
"rank0_dies" (rank 0 exits after the ranks have joined)."""

from __future__ import annotations

import json
import os
import signal
import sys
import time

import torch

from rlvr.algorithm.losses import LossParams, PolicyLoss
from rlvr.algorithm.mini_batches import mini_batch_count, split_mini_batches
from rlvr.algorithm.packing import SequenceToPack, pack_sequences
from rlvr.distributed.learner_group import LearnerGroup, LearnerGroupError
from rlvr.distributed.learner_worker import LearnerSpec, LearnerWorker
from rlvr.distributed.ranks import RankEnv, follow
from rlvr.distributed.trainer_learner import GroupLearner
from rlvr.learner import Learner, LearnerSettings, MiniBatch
from rlvr.models import load_causal_lm, resolve_model_dir

TIMEOUT_S = 30.0


class FaultyWorker(LearnerWorker):
    def update_mini_batches(self, parts, num_epochs, temperature):
        fault = os.environ.get("RLVR_TEST_FAULT", "")
        if self.rank == 1 and fault == "raise":
            raise RuntimeError("injected fault in rank 1's update")
        if self.rank == 1 and fault == "die":
            os.kill(os.getpid(), signal.SIGKILL)
        return super().update_mini_batches(parts, num_epochs, temperature)


def _batch(seed: int):
    gen = torch.Generator().manual_seed(seed)
    seqs = []
    for g in range(4):
        prompt = torch.randint(3, 250, (5 + g % 3,), generator=gen).tolist()
        for k in range(4):
            n = 2 + (g + 3 * k) % 6
            seqs.append(SequenceToPack(prompt, torch.randint(3, 250, (n,), generator=gen).tolist(),
                                       (-torch.rand(n, generator=gen) - 4).tolist(),
                                       advantage=(-1.0) ** k * (k + 1) / 4, index=len(seqs)))
    return pack_sequences(seqs, pack_length=40)


def _mini_batches(batch, k: int) -> list[MiniBatch]:
    out = []
    for part in split_mini_batches(batch, k):
        params = LossParams(clip_lower=0.2, clip_higher=0.28, beta=0.1, kl_estimator=2,
                            denominator=float(mini_batch_count(part, "token")))
        out.append(MiniBatch(part, PolicyLoss("dapo", params), 2))
    return out


def main() -> int:
    torch.set_num_threads(1)
    env = RankEnv.from_environ()
    if env.rank != 0:
        follow("cpu", TIMEOUT_S, env)
        return 0
    model_dir = resolve_model_dir("tiny-llama")
    settings = LearnerSettings(learning_rate=1e-3, lr_scheduler_type="linear", warm_up_steps=1,
                               total_optimizer_steps=10, max_grad_norm=1.0)
    spec = LearnerSpec(model_dir=model_dir, settings=settings, device="cpu", sharding="fsdp",
                       with_reference=True, timeout_s=TIMEOUT_S, num_threads=1)
    group = LearnerGroup(spec, env.world_size, backend="ranks", worker_cls=FaultyWorker)
    if os.environ.get("RLVR_TEST_FAULT") == "rank0_dies":
        print(json.dumps({"joined": True}), flush=True)
        os._exit(9)
    ranks = GroupLearner(group, load_causal_lm(model_dir))
    policy = load_causal_lm(model_dir)
    alone = Learner(policy, Learner.frozen_copy(policy), settings)
    start = time.monotonic()
    try:
        diffs = []
        for step in range(2):  # two mini-batches of two micro-batches each, per update
            batch = _batch(seed=10 + step)
            got = ranks.update_mini_batches(_mini_batches(batch, 2), 1, 1.0)
            want = alone.update_mini_batches(_mini_batches(batch, 2), 1, 1.0)
            diffs.append(abs(got.grad_norm - want.grad_norm) / want.grad_norm)
            diffs += [abs(got.loss_sums[k] - v) / max(abs(v), 1e-6)
                      for k, v in want.loss_sums.items() if not k.endswith(("_max", "_min"))]
        want_weights = dict(alone.named_weights())
        weight_diff = max(float((tensor - want_weights[name]).abs().max())
                          for name, tensor in ranks.named_weights())
        print(json.dumps({"max_rel_diff": max(diffs), "weight_diff": weight_diff,
                          "scheduler_steps": alone.scheduler.last_epoch}), flush=True)
    except LearnerGroupError as e:
        print(json.dumps({"error": str(e), "seconds": time.monotonic() - start}), flush=True)
        return 7
    finally:
        ranks.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
