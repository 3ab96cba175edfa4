"""The embedded tiny model: a small Llama with a character-level tokenizer, in Hugging Face format.

It exists so that a complete study runs on a laptop CPU with no download: `AutoModelForCausalLM` and
`AutoTokenizer` load it from its folder exactly like a hub model, chat template included.
"""

from __future__ import annotations

import string

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<|end|>", "<unk>"
ROLES = ("<|system|>", "<|user|>", "<|assistant|>")
SPECIAL_TOKENS = (PAD, BOS, EOS, UNK, *ROLES)
CHARACTERS = tuple(string.printable[:95]) + ("\n",)  # printable ASCII (space included) and newline

CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "<|{{ message['role'] }}|>{{ message['content'] }}<|end|>"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def build_tokenizer() -> PreTrainedTokenizerFast:
    """One token per character; role markers and end-of-turn are special tokens."""
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS + CHARACTERS)}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    core.add_special_tokens(list(SPECIAL_TOKENS))
    tok = PreTrainedTokenizerFast(tokenizer_object=core, bos_token=BOS, eos_token=EOS,
                                  pad_token=PAD, unk_token=UNK)
    tok.chat_template = CHAT_TEMPLATE
    return tok


def build_model(tokenizer: PreTrainedTokenizerFast, hidden_size: int, num_layers: int,
                num_heads: int, intermediate_size: int, max_positions: int, seed: int) -> LlamaForCausalLM:
    """A freshly initialized Llama sized by the study config, deterministic from `seed`."""
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=hidden_size, num_hidden_layers=num_layers,
        num_attention_heads=num_heads, num_key_value_heads=num_heads,
        intermediate_size=intermediate_size, max_position_embeddings=max_positions,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(config)
