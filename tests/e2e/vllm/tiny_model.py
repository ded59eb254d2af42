"""A tiny Llama model made locally: random weights, local config and tokenizer.

Nothing is downloaded: the tokenizer is a word-level tokenizer built with `tokenizers`
over a fixed vocabulary, the weights come from a seeded LlamaForCausalLM(config).

    python tiny_model.py DIR      # writes config.json, model.safetensors, tokenizer files
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import List, Optional

VOCAB_WORDS = 480
# gpt-oss's layout of 8 layers: a sliding window alternating with full attention.
GPT_OSS_LAYERS = ["sliding_attention", "full_attention"] * 4
WORDS = [f"w{i}" for i in range(VOCAB_WORDS)]
SPECIALS = ["<unk>", "<s>", "</s>", "<pad>"]


def make_tiny_model(out: Path, num_layers: int = 2, hidden: int = 128, heads: int = 2,
                    kv_heads: int = 1, max_len: int = 2048, seed: int = 0) -> Path:
    # head_dim 64: vLLM's CPU attention kernels refuse head_dim 16 ("Unsupported CPU
    # attention configuration").
    """Write the model to `out` (idempotent: an existing complete model is kept)."""
    out = Path(out)
    if (out / "config.json").is_file() and (out / "model.safetensors").is_file():
        return out
    out.mkdir(parents=True, exist_ok=True)
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    _save_tokenizer(out)
    config = LlamaConfig(vocab_size=len(SPECIALS) + VOCAB_WORDS, hidden_size=hidden, intermediate_size=hidden * 2,
                         num_hidden_layers=num_layers, num_attention_heads=heads,
                         num_key_value_heads=kv_heads, max_position_embeddings=max_len,
                         bos_token_id=1, eos_token_id=2, pad_token_id=3,
                         tie_word_embeddings=False, torch_dtype="float32")
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.save_pretrained(str(out), safe_serialization=True)
    # Greedy decoding of random weights must not stop early: no generation config EOS.
    (out / "generation_config.json").write_text(json.dumps({"bos_token_id": 1}))
    return out


def make_tiny_gemma3(out: Path, window: int = 64, hidden: int = 128, seed: int = 0,
                     layer_types: Optional[List[str]] = None, max_len: int = 2048) -> Path:
    """A tiny hybrid model: Gemma 3's architecture with 4 layers, 3 sliding-window layers
    (`window` tokens) and 1 full-attention layer, random weights. vLLM's hybrid KV cache
    manager gives it four KV cache groups of one layer each. `layer_types` (Gemma 3's
    "sliding_attention" / "full_attention" per layer) gives another layout: gpt-oss's,
    alternating, makes two groups (GPT_OSS_LAYERS)."""
    out = Path(out)
    if (out / "config.json").is_file() and (out / "model.safetensors").is_file():
        return out
    out.mkdir(parents=True, exist_ok=True)
    import torch
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    _save_tokenizer(out)
    layer_types = layer_types or ["sliding_attention"] * 3 + ["full_attention"]
    config = Gemma3TextConfig(vocab_size=len(SPECIALS) + VOCAB_WORDS, hidden_size=hidden,
                              intermediate_size=hidden * 2, num_hidden_layers=len(layer_types),
                              num_attention_heads=2, num_key_value_heads=1, head_dim=64,
                              max_position_embeddings=max_len, sliding_window=window,
                              layer_types=layer_types, query_pre_attn_scalar=64,
                              bos_token_id=1, eos_token_id=2, pad_token_id=3,
                              torch_dtype="float32")
    torch.manual_seed(seed)
    Gemma3ForCausalLM(config).save_pretrained(str(out), safe_serialization=True)
    (out / "generation_config.json").write_text(json.dumps({"bos_token_id": 1}))
    return out


def _save_tokenizer(out: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIALS + WORDS)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                                   eos_token="</s>", pad_token="<pad>")
    fast.save_pretrained(str(out))


def prompt_text(n_words: int, offset: int = 0) -> str:
    """A prompt of n_words tokens (one token per word)."""
    return " ".join(WORDS[(offset + 7 * i) % VOCAB_WORDS] for i in range(n_words))


if __name__ == "__main__":
    make = make_tiny_gemma3 if sys.argv[2:] == ["--gemma3"] else make_tiny_model
    print(make(Path(sys.argv[1])))
