"""A tokenizer for `vllm serve --tokenizer DIR`, built locally (nothing downloaded).

The benchmark sends token ids and reads token ids back, so any tokenizer over the model's
vocabulary serves: a `tokenizers` WordLevel model whose word i is "t<i>" (ids 0..vocab-1),
split on whitespace, saved as tokenizer.json plus a tokenizer_config.json naming
PreTrainedTokenizerFast. The model's bos/eos ids (its config.json) become the special
tokens.

    python3 tokenizer.py DIR --vocab 128256 [--bos 128000 --eos 128001]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Optional


def build_tokenizer(out: Path, vocab: int, bos: Optional[int] = None,
                    eos: Optional[int] = None) -> Path:
    """Write tokenizer.json and tokenizer_config.json into `out`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers  # noqa: PLC0415

    out = Path(out)
    if vocab < 4:
        raise ValueError(f"vocab must be >= 4, got {vocab}")
    for name, tid in (("bos", bos), ("eos", eos)):
        if tid is not None and not 0 <= tid < vocab:
            raise ValueError(f"{name} id {tid} outside the vocabulary (0..{vocab - 1})")
    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.WordLevel(vocab={f"t{i}": i for i in range(vocab)}, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with spaces
    tok.save(str(out / "tokenizer.json"))
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "t0",
           "model_max_length": 1 << 20, "clean_up_tokenization_spaces": False}
    if bos is not None:
        cfg["bos_token"] = f"t{bos}"
    if eos is not None:
        cfg["eos_token"] = f"t{eos}"
    (out / "tokenizer_config.json").write_text(json.dumps(cfg, indent=1))
    return out


def for_model(model_dir: Path, out: Path) -> Path:
    """The tokenizer of a model directory's config.json (vocab_size, bos/eos ids)."""
    cfg = json.loads((Path(model_dir) / "config.json").read_text())

    def one(key: str) -> Optional[int]:
        v = cfg.get(key)
        return v[0] if isinstance(v, list) else v

    return build_tokenizer(out, int(cfg["vocab_size"]), one("bos_token_id"), one("eos_token_id"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--vocab", type=int, required=True)
    ap.add_argument("--bos", type=int)
    ap.add_argument("--eos", type=int)
    args = ap.parse_args()
    print(build_tokenizer(Path(args.out), args.vocab, args.bos, args.eos))


if __name__ == "__main__":
    main()
