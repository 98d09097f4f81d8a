"""human-eval's example, transcribed as data: its example problem and six example completions.

Source: openai/human-eval, data/example_problem.jsonl and data/example_samples.jsonl (commit
6d43fb980f9fee3c892a914eda09951f772ad10d), Copyright (c) OpenAI, MIT License. Its README gives
the expected result of running them, pass@1 = 0.5: the three completions that return 1 (indented
by four spaces, two spaces, a tab) pass; the one that runs `rm -rf tmp` and returns None, the
one that sleeps 10 s (human-eval's limit is 3 s) and the one that reads stdin fail. No code of
theirs is used.

Each row: (name, completion, expected score). The ground truth is the problem as rlvr's
`humaneval` data source writes it (`data.code_tasks`): its test, its entry point, the prompt as
setup, and human-eval's 3 s limit.
"""

import json

SOURCE = {
    "name": "human-eval",
    "repository": "openai/human-eval",
    "paths": ["data/example_problem.jsonl", "data/example_samples.jsonl", "README.md"],
    "commit": "6d43fb980f9fee3c892a914eda09951f772ad10d",
    "licence": "MIT",
}

PROBLEM = {"task_id": "test/0", "prompt": "def return1():\n", "canonical_solution": "    return 1",
           "test": "def check(candidate):\n    assert candidate() == 1", "entry_point": "return1"}

GROUND_TRUTH = json.dumps({"tests": [f"{PROBLEM['test']}\n\ncheck({PROBLEM['entry_point']})\n"],
                           "entry_point": PROBLEM["entry_point"], "setup": PROBLEM["prompt"],
                           "timeout_s": 3.0})

_S = "example_samples.jsonl::"
CASES = [
    (_S + "1[rm -rf tmp]", "    import subprocess\n    subprocess.check_output('rm -rf tmp')", 0.0),
    (_S + "2[sleep 10]", "    import time\n    time.sleep(10)\n    return 1", 0.0),
    (_S + "3[input]", "    return input('enter a number')", 0.0),
    (_S + "4[four spaces]", "    return 1", 1.0),
    (_S + "5[two spaces]", "  return 1", 1.0),
    (_S + "6[tab]", "\treturn 1", 1.0),
]
