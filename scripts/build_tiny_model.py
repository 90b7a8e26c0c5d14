#!/usr/bin/env python3
"""Build evalkit's tiny local Llama for the real-engine suite: nothing is downloaded.

Run with the vLLM venv's python (it has torch, transformers and tokenizers):

    python scripts/build_tiny_model.py --cache-root DIR      # prints the model directory

The model is a *random* LlamaConfig (hidden 128, intermediate 256, 2 layers, 2 heads, so
head_dim 64: vLLM's CPU attention rejects head_dim 16), bf16, from a fixed seed, with a
byte-level BPE tokenizer of 2048 tokens trained on the GSM8K train text that evalkit ships, and
a small chat template. Its greedy output falls into loops by itself, which is what the
repetition detector is tested on; its GSM8K accuracy is noise, which is fine: the suite checks
that evalkit's marks equal the `lm_eval` CLI's, not that the model is good.

The directory is `DIR/tiny-llama-<hash>/`, where the hash covers this file's bytes and the
settings, so editing the builder or a setting builds a new model and an unchanged one is reused.
A `.complete` marker is written last: a half-built directory is never reused.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRAIN = ROOT / "evalkit" / "data" / "gsm8k" / "train.jsonl"

SETTINGS = {
    "vocab_size": 2048,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "max_position_embeddings": 2048,
    "dtype": "bfloat16",
    "seed": 20261203,
}
SPECIAL = {"bos": "<|begin_of_text|>", "eos": "<|end_of_text|>", "pad": "<|pad|>"}
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def content_hash() -> str:
    h = hashlib.sha256()
    h.update(Path(__file__).read_bytes())
    h.update(json.dumps(SETTINGS, sort_keys=True).encode())
    h.update(hashlib.sha256(TRAIN.read_bytes()).digest())
    return h.hexdigest()[:16]


def training_text() -> list[str]:
    rows = []
    with TRAIN.open(encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            rows.append(f"Question: {row['question']}\nAnswer: {row['answer']}\n\n")
    return rows


def build(out: Path) -> None:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=SETTINGS["vocab_size"],
        special_tokens=[SPECIAL["bos"], SPECIAL["eos"], SPECIAL["pad"]],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(training_text(), trainer=trainer)
    assert tok.get_vocab_size() == SETTINGS["vocab_size"], tok.get_vocab_size()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=SPECIAL["bos"], eos_token=SPECIAL["eos"], pad_token=SPECIAL["pad"]
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.model_max_length = SETTINGS["max_position_embeddings"]

    torch.manual_seed(SETTINGS["seed"])
    config = LlamaConfig(
        vocab_size=SETTINGS["vocab_size"],
        hidden_size=SETTINGS["hidden_size"],
        intermediate_size=SETTINGS["intermediate_size"],
        num_hidden_layers=SETTINGS["num_hidden_layers"],
        num_attention_heads=SETTINGS["num_attention_heads"],
        num_key_value_heads=SETTINGS["num_key_value_heads"],
        head_dim=SETTINGS["head_dim"],
        max_position_embeddings=SETTINGS["max_position_embeddings"],
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config).to(getattr(torch, SETTINGS["dtype"]))
    model.save_pretrained(out, safe_serialization=True)
    fast.save_pretrained(out)
    (out / "evalkit-build.json").write_text(
        json.dumps({"hash": out.name.rsplit("-", 1)[-1], "settings": SETTINGS, "special_tokens": SPECIAL,
                    "train_data": str(TRAIN.relative_to(ROOT)), "builder": "scripts/build_tiny_model.py"},
                   indent=2) + "\n",
        encoding="utf-8",
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache-root", type=Path, required=True, help="Folder that holds built models.")
    parser.add_argument("--print-hash", action="store_true", help="Print the content hash and exit.")
    args = parser.parse_args()
    digest = content_hash()
    if args.print_hash:
        print(digest)
        return 0
    final = args.cache_root / f"tiny-llama-{digest}"
    if (final / ".complete").is_file():
        print(final)
        return 0
    args.cache_root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".tiny-llama-{digest}.", dir=args.cache_root))
    try:
        target = work / final.name
        build(target)
        (target / ".complete").write_text(digest + "\n", encoding="utf-8")
        if final.exists():
            shutil.rmtree(final)
        target.rename(final)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(final)
    return 0


if __name__ == "__main__":
    sys.exit(main())
