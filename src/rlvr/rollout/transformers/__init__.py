"""The transformers engine: plain transformers models decoded by rlvr's own loop.

- `engine.py`: `TransformersEngine`, batched KV-cached sampling (the dynamic path) and
  `sample_tokens`, the sampling rule every engine's logprobs follow;
- `static_decode.py`: the fixed-shape path with its decode step as a CUDA graph (the GPU's).

Runs wherever torch does, so `auto` falls back to it. Importing this package registers it.
"""

from rlvr.rollout.base import register_engine
from rlvr.rollout.transformers.engine import create_transformers_engine

register_engine("transformers",
                auto_preference=100,  # always available: the fallback of `auto`
                )(create_transformers_engine)
