"""pass@k and maj@n from n samples per prompt: the figures papers report for a model allowed k
tries (pass@k) or a vote among its n answers (maj@n). Pure functions of counts and answers.

pass@k is the unbiased estimator of Chen et al. 2021 (the Codex paper): of n samples, c are
correct; the chance that k of them drawn without replacement hold at least one correct one is
1 - C(n-c, k) / C(n, k). Averaged over prompts it estimates the model's pass@k with less
variance than drawing exactly k samples per prompt. It is computed as the product
1 - prod_{i=n-c+1..n} (1 - k/i) (the two binomials' ratio, cancelled term by term): c float
multiplications, no factorials, so n in the thousands costs nothing and never overflows.

maj@n (self-consistency): the answer most samples give is the model's answer, and it is scored
as right or wrong. Samples with no answer do not vote. What "the same answer" means (the last
number, a normalised boxed expression, ...) is the verifier's answer extractor's business
(`rlvr.rewards.registry`), not this module's.

Not here: which samples are correct (the verifiers), averaging over prompts and naming metrics
(`rlvr.producer.evaluation`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence


def pass_at_k(num_samples: int, num_correct: int, k: int) -> float:
    """Unbiased pass@k of one prompt with `num_correct` of `num_samples` samples correct.

    ValueError unless 1 <= k <= num_samples and 0 <= num_correct <= num_samples.
    """
    n, c = num_samples, num_correct
    if not 1 <= k <= n:
        raise ValueError(f"pass@k needs 1 <= k <= n, got k={k}, n={n}")
    if not 0 <= c <= n:
        raise ValueError(f"pass@k needs 0 <= correct <= n, got correct={c}, n={n}")
    if n - c < k:  # every draw of k samples holds a correct one
        return 1.0
    all_wrong = 1.0  # C(n-c, k) / C(n, k): the chance that k draws are all wrong
    for i in range(n - c + 1, n + 1):
        all_wrong *= 1.0 - k / i
    return 1.0 - all_wrong


def majority_vote(answers: Sequence[Hashable | None], correct: Sequence[bool]) -> float:
    """maj@n of one prompt: whether the most common answer among its samples is right.

    `answers[i]` is sample i's answer key (None: it gave none, and does not vote), `correct[i]`
    whether the verifier scored it right. An answer's correctness is the fraction of its
    samples scored right (1 or 0 when the verifier agrees with the extractor, as it should).
    Tied answers count equally: the result is the mean correctness of the tied answers, the
    expected score of breaking the tie at random, so it does not depend on sample order.
    0.0 when no sample gave an answer.
    """
    if len(answers) != len(correct):
        raise ValueError(f"{len(answers)} answers but {len(correct)} correctness flags")
    votes = Counter(a for a in answers if a is not None)
    if not votes:
        return 0.0
    top = max(votes.values())
    winners = [a for a, count in votes.items() if count == top]
    right = Counter(a for a, ok in zip(answers, correct) if a is not None and ok)
    return sum(right[a] / votes[a] for a in winners) / len(winners)
