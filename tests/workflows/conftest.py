"""A scripted engine that answers by turn, with real token ids from the tiny tokenizer."""

import pytest

from rlvr.types import Completion, Prompt


class TurnScriptedEngine:
    """Turn t of every conversation answers `script[t]` (the last entry repeats); turns are
    counted from the assistant headers in the prompt. Records what it was asked."""

    def __init__(self, tokenizer, script, truncate_turns=()):
        self.tok, self.script, self.truncate_turns = tokenizer, script, set(truncate_turns)
        self.end = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.requests = []
        self.version = 0

    def generate(self, prompts, params):
        out = []
        for ids in prompts:
            self.requests.append((list(ids), params))
            turn = self.tok.decode(ids).count("<|im_start|>assistant") - 1
            text = self.script[min(turn, len(self.script) - 1)]
            cut = turn in self.truncate_turns
            ids_T = self.tok.encode(text, add_special_tokens=False) + ([] if cut else [self.end])
            out.append([Completion(ids_T, [-0.25] * len(ids_T), "length" if cut else "stop",
                                   text, model_version=self.version + turn)
                        for _ in range(params.n)])
        return out

    def update_weights(self, named_tensors, version):
        self.version = version

    def close(self):
        pass


class ConversationEngine(TurnScriptedEngine):
    """Answers `reply(conversation, turn, k)`: the decoded prompt (so that a test tells its
    prompts and samples apart by what they said), the turn, and the sample's index within
    the request (always 0 after the first turn, which samples one at a time)."""

    def __init__(self, tokenizer, reply):
        super().__init__(tokenizer, [""])
        self.reply = reply

    def generate(self, prompts, params):
        out = []
        for ids in prompts:
            self.requests.append((list(ids), params))
            conversation = self.tok.decode(ids)
            turn = conversation.count("<|im_start|>assistant") - 1
            out.append([self._completion(self.reply(conversation, turn, k))
                        for k in range(params.n)])
        return out

    def _completion(self, text):
        ids_T = self.tok.encode(text, add_special_tokens=False) + [self.end]
        return Completion(ids_T, [-0.25] * len(ids_T), "stop", text,
                          model_version=self.version)


@pytest.fixture
def chat_prompt(tiny_tokenizer):
    def make(question="What is 6 times 7?", truth="42", verifiers=("last_number",), i=0):
        messages = ({"role": "user", "content": question},)
        ids = tiny_tokenizer.apply_chat_template(list(messages), add_generation_prompt=True,
                                                 tokenize=False)
        return Prompt(id=f"q/{i}", messages=messages,
                      token_ids=tuple(tiny_tokenizer.encode(ids, add_special_tokens=False)),
                      ground_truth=truth, verifiers=verifiers, source="q")
    return make
