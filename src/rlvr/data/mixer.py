"""A weighted mixture of prompt sources with exactly resumable state.

Each draw picks a source with probability proportional to its weight, then that source's next
prompt in a shuffled order that is reshuffled every epoch of the source. The order of an epoch
is a function of (seed, source, epoch), so the state is just positions, epochs and the picking
RNG: a restored mixer yields the identical stream.

Retired prompts (solved often enough) are skipped; a source whose every prompt is retired is
left out of the picking, and the others train on (open-instruct's `HFDataLoader.exclude_index`
excludes prompts, not sources). Only when every prompt of every source is retired is there
nothing left to learn from (`NoLearningSignal`).
"""

from __future__ import annotations

import random

from rlvr.run.errors import NoLearningSignal
from rlvr.types import Prompt


class PromptMixer:
    def __init__(self, sources: list[tuple[str, list[Prompt], float]], seed: int,
                 shuffle: bool = True):
        self.sources = [(name, prompts, weight) for name, prompts, weight in sources if prompts]
        if not self.sources:
            raise ValueError("no prompts left in any training source")
        self.seed, self.shuffle = seed, shuffle
        self._rng = random.Random(seed)
        self._positions = [0] * len(self.sources)
        self._epochs = [0] * len(self.sources)
        self._orders = [self._order(i) for i in range(len(self.sources))]
        self.retired: set[str] = set()  # prompt ids solved often enough to stop drawing them
        self._live = [True] * len(self.sources)  # per source: has a prompt not retired

    def _order(self, i: int) -> list[int]:
        name, prompts, _ = self.sources[i]
        order = list(range(len(prompts)))
        if self.shuffle:
            random.Random(f"{self.seed}/{name}/{self._epochs[i]}").shuffle(order)
        return order

    def _next_from(self, i: int) -> Prompt:
        prompts = self.sources[i][1]
        for _ in range(2 * len(prompts) + 1):  # at most two epochs' worth of retired prompts
            if self._positions[i] == len(self._orders[i]):
                self._epochs[i] += 1
                self._positions[i] = 0
                self._orders[i] = self._order(i)
            prompt = prompts[self._orders[i][self._positions[i]]]
            self._positions[i] += 1
            if prompt.id not in self.retired:
                return prompt
        # Solved, all of them: the run has nothing left to learn from (exit 6, state saved).
        raise NoLearningSignal(f"every prompt of source '{self.sources[i][0]}' is retired, "
                               "solved at algorithm.no_resampling_pass_rate: nothing left to "
                               "train on")

    def retire(self, prompt_ids: list[str]) -> None:
        self.retired.update(prompt_ids)
        self._update_live()

    def _update_live(self) -> None:
        self._live = [live and any(p.id not in self.retired for p in prompts)
                      for live, (_, prompts, _) in zip(self._live, self.sources)]

    def next_batch(self, n: int) -> list[Prompt]:
        # A solved source weighs 0: its share of the draws goes to the sources still unsolved.
        weights = [w if live else 0.0 for (_, _, w), live in zip(self.sources, self._live)]
        if not any(weights):
            raise NoLearningSignal("every prompt of every training source ("
                                   + ", ".join(f"'{name}'" for name, _, _ in self.sources)
                                   + ") is retired, solved at algorithm.no_resampling_pass_rate: "
                                   "nothing left to train on")
        picks = self._rng.choices(range(len(self.sources)), weights=weights, k=n)
        return [self._next_from(i) for i in picks]

    @property
    def epoch(self) -> float:
        """Passes over the sources, weighted by how much of each has been drawn."""
        total = sum(len(p) for _, p, _ in self.sources)
        seen = sum(e * len(p) + pos for (_, p, _), e, pos in
                   zip(self.sources, self._epochs, self._positions))
        return seen / total

    def state_dict(self) -> dict:
        return {"rng": self._rng.getstate(), "positions": list(self._positions),
                "epochs": list(self._epochs), "retired": sorted(self.retired)}

    def load_state_dict(self, state: dict) -> None:
        version, internal, gauss = state["rng"]
        self._rng.setstate((version, tuple(internal), gauss))
        self._positions = list(state["positions"])
        self._epochs = list(state["epochs"])
        self.retired = set(state.get("retired", ()))
        self._live = [True] * len(self.sources)
        self._update_live()
        self._orders = [self._order(i) for i in range(len(self.sources))]


def split_holdout(prompts: list[Prompt], n: int, seed: int) -> tuple[list[Prompt], list[Prompt]]:
    """(train, holdout): `n` prompts chosen with `seed` are held out of training."""
    order = list(range(len(prompts)))
    random.Random(f"holdout/{seed}").shuffle(order)
    held = set(order[:n])
    return ([p for i, p in enumerate(prompts) if i not in held],
            [prompts[i] for i in order[:n]])
