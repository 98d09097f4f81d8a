"""Tied embeddings in a weight stream, for an engine that keeps an output head of its own.

A model with tied embeddings has one tensor for the input embedding and the output head; a
learner's state may list it under both names or only the embedding's. An engine that unties
them on load (its subpackage says so) keeps a head the embedding's update does not reach, so
it must be sent the head explicitly. Used by every path into such an engine (its
workers' receiver, disk updates for servers).
"""

from __future__ import annotations

from typing import Iterable, Iterator

import torch


def with_tied_head(weights: Iterable[tuple[str, torch.Tensor]]
                   ) -> Iterator[tuple[str, torch.Tensor]]:
    """The weights with the embedding sent as `lm_head.weight` too, and any `lm_head.weight`
    in the stream (the same tensor, in a tied model) dropped. Lazy, so the weights still stream
    bucket by bucket."""
    for name, tensor in weights:
        if name == "lm_head.weight":
            continue
        yield name, tensor
        if name == "model.embed_tokens.weight":
            yield "lm_head.weight", tensor
