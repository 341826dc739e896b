"""Check a coherence run's PEFT adapter on the real model (issue 17 item 5): PEFT's
``PeftModel.from_pretrained`` on our HF export of the base vs our own base + merged adapter.

    .venv/bin/python scripts/peft_check.py runs/coherence_cpu --out results/coherence/peft_check.json

Prints (and writes) the max |logit| difference between the two, and how far the adapter moves the
logits from the base (so that a tiny difference means something).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import jax.numpy as jnp
import numpy as np

PROMPT = "Compute $47 + 38$.\n\nGive the result on the last line as: Answer: <number>"


def check(run: Path, source: str = "smollm2") -> dict:
    """Logits of one chat prompt under PEFT (torch) and under ours (JAX), both float32."""
    import peft
    import torch
    from transformers import LlamaForCausalLM

    from jaxdebate.model import export_hf, load, load_tokenizer, logits, lora, peft_export

    params, config = load(source, dtype="float32")
    tok = load_tokenizer(source)
    adapter, spec = peft_export.load(run / "adapter")
    ids = np.array([tok.encode(tok.chat_text([{"role": "user", "content": PROMPT}]))], np.int32)
    with tempfile.TemporaryDirectory() as base_dir:
        export_hf(params, config, base_dir, tokenizer=tok)
        hf = LlamaForCausalLM.from_pretrained(base_dir, torch_dtype=torch.float32).eval()
        model = peft.PeftModel.from_pretrained(hf, str(run / "adapter")).eval()
        with torch.no_grad():
            theirs = model(torch.tensor(ids, dtype=torch.long)).logits.numpy()
    ours = np.asarray(logits(lora.merge(params, adapter, spec.scale), config, jnp.asarray(ids)))
    base = np.asarray(logits(params, config, jnp.asarray(ids)))
    return {"run": str(run), "model": source, "tokens": int(ids.shape[1]),
            "max_abs_logit_diff_peft_vs_ours": float(np.abs(theirs - ours).max()),
            "max_abs_logit_change_adapter_vs_base": float(np.abs(ours - base).max()),
            "rank": spec.rank, "alpha": spec.alpha, "targets": list(spec.targets)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a coherence workdir holding adapter/")
    parser.add_argument("--model", default="smollm2", help="the base model source (default smollm2)")
    parser.add_argument("--out", type=Path, help="also write the figures to this JSON file")
    args = parser.parse_args(argv)
    if not (args.run / "adapter" / "adapter_config.json").is_file():
        print(f"error: {args.run}/adapter holds no PEFT adapter (run the coherence 'train' stage first)",
              file=sys.stderr)
        return 2
    result = check(args.run, args.model)
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
