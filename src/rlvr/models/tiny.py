"""A tiny Llama with a byte-level tokenizer, built from a config: the test model.

It exists so tests and `configs/tiny.yaml` exercise the real code paths (chat template, packing,
generation with every engine, checkpoints) without downloading anything. The weights are random but
seeded, so every machine builds the same model. It is not meant to learn anything useful.
"""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

CHATML_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def build_tiny_tokenizer() -> PreTrainedTokenizerFast:
    """Byte-level BPE with no merges: every byte is one token, plus ChatML specials."""
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for ch in sorted(alphabet):
        vocab[ch] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIAL_TOKENS)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        chat_template=CHATML_TEMPLATE,
    )


def build_tiny_model(vocab_size: int, eos_id: int, pad_id: int, seed: int = 0) -> LlamaForCausalLM:
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        # head_dim 32: the smallest every engine's CPU attention supports (16 fails in one), so
        # every engine runs the same tiny model. Two query heads share one KV head: GQA stays
        # exercised.
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        bos_token_id=None,
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return LlamaForCausalLM(config)


def write_tiny_model(target: Path) -> None:
    """Materialise the tiny model and tokenizer as a Hugging Face directory at `target`."""
    tokenizer = build_tiny_tokenizer()
    model = build_tiny_model(len(tokenizer), tokenizer.eos_token_id, tokenizer.pad_token_id)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(target)
    tokenizer.save_pretrained(target)
