#!/usr/bin/env python3
"""Train evalkit's *answers* model: a small Llama that really solves GSM8K-format arithmetic.

Run with the vLLM venv's python (it has torch, transformers and tokenizers):

    python scripts/build_answers_model.py --cache-root DIR      # prints the model directory

Why: the tiny random model of build_tiny_model.py scores 0 and loops on every prompt, so no
verdict of evalkit's had been reached on answers a real engine computed. This one is trained,
from a fixed seed in about ten minutes on two CPU cores, on scripts/answers_task.py's word
problems (one addition or subtraction of two two-digit numbers, worked column by column) written
in GSM8K's format, so lm-eval's gsm8k task and both filters score it; it ends every answer with
its end-of-text token, so long greedy generations on its own prompts end by themselves.

- Tokenizer: byte-level BPE (512 tokens) trained on the generated train text, with every digit
  its own pre-token (`pre_tokenizers.Digits(individual_digits=True)`): numbers are spelled
  digit by digit, which is what lets a model this small learn carries. A BOS token is prepended
  by the tokenizer's post-processor, so training and vLLM's serving tokenize alike.
- Model: LlamaConfig, hidden 128, 4 layers, 2 heads of 64 (vLLM's CPU attention needs head_dim
  64 or more), float32. Trained zero-shot style (`Question: q\\nAnswer: a<eos>`, loss on the
  answer and the eos only), AdamW with warm-up and cosine decay, 1200 steps of 24 problems. The
  budget is CPU time (tokens times steps): small batches learn the most per second, and the
  task's column-by-column working is what makes the carries learnable in it; docs/real-answers.md
  has the sweep (seeds, batches, steps) behind these numbers and the build's time here.
- Where it trains: `--device` (default cpu) and `--threads` (torch's CPU threads, default 2; on
  a box whose cores other jobs keep busy, 1 thread can step faster than 2 that wait on each
  other). The hash leaves both out, and evalkit-build.json records where the cached copy was
  trained (device, torch, threads): floats differ between CPUs and GPUs, so two builds of one
  recipe are alike, not bit-identical.
- Data: `data/test.jsonl` (the scored questions, never trained on), `data/train.jsonl` (lm-eval's
  few-shot pool; the training stream is drawn from the same generator and also skips every test
  and prompt-set question) and `data/long_prompts.jsonl` (a prompt set for the collapse and
  consistency evals), inside the model directory.

The directory is `DIR/answers-llama-<hash>/`, the hash covering this file, answers_task.py and
the settings: an unchanged recipe is reused, never retrained. `.complete` is written last.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import answers_task  # noqa: E402

SETTINGS = {
    "vocab_size": 512,
    "hidden_size": 128,
    "intermediate_size": 384,
    "num_hidden_layers": 4,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "max_position_embeddings": 1024,
    "seed": 20261205,
    "steps": 1200,
    "batch_size": 24,
    "lr": 2e-3,
    "warmup": 100,
    "weight_decay": 0.01,
    "test_size": 400,
    "train_pool_size": 2000,
}
SPECIAL = {"bos": "<|begin_of_text|>", "eos": "<|end_of_text|>", "pad": "<|pad|>"}
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def content_hash() -> str:
    h = hashlib.sha256()
    for f in (Path(__file__), HERE / "answers_task.py"):
        h.update(f.read_bytes())
    h.update(json.dumps(SETTINGS, sort_keys=True).encode())
    return h.hexdigest()[:16]


def text_of(p: dict[str, str]) -> tuple[str, str]:
    """lm-eval's zero-shot prompt and target: doc_to_text, then target_delimiter ' ' + answer."""
    return f"Question: {p['question']}\nAnswer:", " " + p["answer"]


def build_tokenizer(corpus: list[str]):  # type: ignore[no-untyped-def]
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        pre_tokenizers.Digits(individual_digits=True),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=SETTINGS["vocab_size"],
                                  special_tokens=[SPECIAL["bos"], SPECIAL["eos"], SPECIAL["pad"]],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus, trainer=trainer)
    bos = tok.token_to_id(SPECIAL["bos"])
    tok.post_processor = processors.TemplateProcessing(single=f"{SPECIAL['bos']} $A", pair=f"{SPECIAL['bos']} $A $B",
                                                       special_tokens=[(SPECIAL["bos"], bos)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=SPECIAL["bos"], eos_token=SPECIAL["eos"],
                                   pad_token=SPECIAL["pad"])
    fast.chat_template = CHAT_TEMPLATE
    fast.model_max_length = SETTINGS["max_position_embeddings"]
    return fast


def encode(fast, p: dict[str, str]) -> tuple[list[int], int]:  # type: ignore[no-untyped-def]
    """Token ids of prompt + answer + eos, and where the answer starts (the loss covers only it)."""
    prompt, target = text_of(p)
    ids = fast(prompt + target)["input_ids"] + [fast.eos_token_id]
    start = len(fast(prompt)["input_ids"])
    assert ids[:start] == fast(prompt)["input_ids"], "the prompt tokenizes differently inside the full text"
    return ids, start


def train(out: Path, log, device: str = "cpu", threads: int = 2) -> None:  # type: ignore[no-untyped-def]
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.set_num_threads(threads)
    torch.manual_seed(SETTINGS["seed"])
    held_out = answers_task.write_splits(out / "data", SETTINGS["seed"], SETTINGS["test_size"],
                                         SETTINGS["train_pool_size"])
    stream = answers_task.problems(SETTINGS["seed"] + 4, held_out)
    corpus = ["".join(text_of(next(stream))) for _ in range(5000)]
    fast = build_tokenizer(corpus)
    config = LlamaConfig(
        vocab_size=SETTINGS["vocab_size"], hidden_size=SETTINGS["hidden_size"],
        intermediate_size=SETTINGS["intermediate_size"], num_hidden_layers=SETTINGS["num_hidden_layers"],
        num_attention_heads=SETTINGS["num_attention_heads"], num_key_value_heads=SETTINGS["num_key_value_heads"],
        head_dim=SETTINGS["head_dim"], max_position_embeddings=SETTINGS["max_position_embeddings"],
        bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id,
        tie_word_embeddings=False)
    model = LlamaForCausalLM(config).to(device)
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": SETTINGS["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}], lr=SETTINGS["lr"], betas=(0.9, 0.98))
    steps, warmup = SETTINGS["steps"], SETTINGS["warmup"]
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps)))
    model.train()
    t0 = time.monotonic()
    for step in range(steps):
        batch = [encode(fast, next(stream)) for _ in range(SETTINGS["batch_size"])]
        width = max(len(ids) for ids, _ in batch)
        input_ids = torch.full((len(batch), width), fast.pad_token_id, dtype=torch.long)
        labels = torch.full((len(batch), width), -100, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for i, (ids, start) in enumerate(batch):
            input_ids[i, :len(ids)] = torch.tensor(ids)
            labels[i, start:len(ids)] = torch.tensor(ids[start:])
            mask[i, :len(ids)] = 1
        loss = model(input_ids=input_ids.to(device), attention_mask=mask.to(device), labels=labels.to(device)).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 100 == 0 or step == steps - 1:
            log(f"step {step} loss {loss.item():.4f} lr {sched.get_last_lr()[0]:.2e} {time.monotonic() - t0:.0f} s")
    model.eval()
    exact = greedy_check(model, fast, out / "data" / "test.jsonl", 64, device)
    log(f"trained in {time.monotonic() - t0:.0f} s; greedy exact answers on 64 test questions (transformers): {exact}/64")
    model.to("cpu").save_pretrained(out, safe_serialization=True)
    fast.save_pretrained(out)
    (out / "evalkit-build.json").write_text(json.dumps({
        "hash": out.name.rsplit("-", 1)[-1], "settings": SETTINGS, "special_tokens": SPECIAL,
        "builder": "scripts/build_answers_model.py", "train_s": round(time.monotonic() - t0, 1),
        "trained_on": {"device": device, "torch": torch.__version__, "threads": torch.get_num_threads(),
                       "machine": platform.processor() or platform.machine(),
                       "gpu": torch.cuda.get_device_name(0) if device.startswith("cuda") else None},
        "transformers_greedy_exact_64": exact}, indent=2) + "\n", encoding="utf-8")


def greedy_check(model, fast, test: Path, n: int, device: str = "cpu") -> int:  # type: ignore[no-untyped-def]
    """The trained model's own greedy answers (transformers, not vLLM) on the first n test questions."""
    import torch

    rows = [json.loads(line) for line in test.read_text(encoding="utf-8").splitlines()[:n]]
    right = 0
    with torch.no_grad():
        for row in rows:
            prompt, _ = text_of(row)
            ids = torch.tensor([fast(prompt)["input_ids"]], device=device)
            out = model.generate(ids, max_new_tokens=96, do_sample=False, eos_token_id=fast.eos_token_id,
                                 pad_token_id=fast.pad_token_id)
            text = fast.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
            got = text.rsplit("####", 1)[-1].strip() if "####" in text else None
            right += got == row["answer"].rsplit("####", 1)[-1].strip()
    return right


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache-root", type=Path, required=True, help="Folder that holds built models.")
    parser.add_argument("--print-hash", action="store_true", help="Print the content hash and exit.")
    parser.add_argument("--device", default="cpu",
                        help="torch device to train on (default cpu); recorded in evalkit-build.json, not in the hash.")
    parser.add_argument("--threads", type=int, default=2,
                        help="torch CPU threads (default 2); recorded in evalkit-build.json, not in the hash.")
    args = parser.parse_args()
    digest = content_hash()
    if args.print_hash:
        print(digest)
        return 0
    final = args.cache_root / f"answers-llama-{digest}"
    if (final / ".complete").is_file():
        print(final)
        return 0
    args.cache_root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".answers-llama-{digest}.", dir=args.cache_root))
    try:
        target = work / final.name
        train(target, lambda msg: print(f"[answers-model] {msg}", file=sys.stderr, flush=True), args.device,
              args.threads)
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
