"""The producer of training batches: everything between the prompt mixer and the learner.

One step's batch is made in this order, a module each:
- `prompt_selection`: which prompts a step draws (one draw, or active sampling), and retiring
  prompts the policy already solves;
- `groups`: a group of completions per prompt from the engine, scored by the verifiers, with
  reward shaping (format reward, non-stop and overlong penalties);
- `source`: `EpisodeSource.produce(step)`, the two above with the step's seed; it may run in a
  thread ahead of training or in a Ray actor (`rlvr.distributed.data_prep`);
- `ahead`: the thread that generates up to `async_steps` batches ahead of the learner;
- `staleness`: how many policy versions behind a group is, and dropping stale groups;
- `training_batch`: advantages, zero-std filtering, truncation masking and packing into the
  `PackedBatch` the learner trains on;
- `evaluation`: the eval sets, n samples per prompt, pass@k and maj@n (training and `rlvr eval`).

Not here: the engines (`rlvr.rollout`), the verifiers (`rlvr.rewards`), the learner.
"""
