#!/usr/bin/env python3
"""Golden fixtures for the dense family (TESTING.md): tiny random models saved by transformers,
fp32 reference logits for fixed prompts and 32-token greedy continuations.

Run on a machine with torch + transformers (the reference is transformers itself):
    python3 tools/make_model_fixtures.py OUTDIR
Writes OUTDIR/<name>/{config.json, generation_config.json?, model.safetensors, reference.json,
reference.safetensors} and OUTDIR/VERSIONS.txt. Copy OUTDIR/* to tests/fixtures/models/.
The reference runs on the CPU in float32 with the SDPA attention backend.
"""
import copy
import json
import os
import sys

import torch
import transformers
from safetensors.torch import save_file

VOCAB = 1000
N_GREEDY = 32


def base(kind):
    return dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=160, num_hidden_layers=3,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2)


SPECS = {
    # Qwen3: per-head q/k norm, head_dim (32) with Hq*D (128) != hidden (64), untied.
    "qwen3-tiny": ("Qwen3", dict(head_dim=32, tie_word_embeddings=False,
                                 rope_parameters={"rope_type": "default", "rope_theta": 1e6})),
    # Qwen3 with YaRN scaling (attention factor != 1), tied embeddings.
    "qwen3-yarn-tied": ("Qwen3", dict(head_dim=16, tie_word_embeddings=True,
                                      rope_parameters={"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0,
                                                       "original_max_position_embeddings": 64})),
    # Llama 3 with llama3 rope scaling; head_dim absent (hidden / heads), MHA-ish GQA 4/1.
    "llama3-tiny": ("Llama", dict(num_key_value_heads=1, tie_word_embeddings=False,
                                  rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                                   "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                   "original_max_position_embeddings": 64})),
    # Qwen2: q/k/v bias (o has none), tied embeddings.
    "qwen2-tiny": ("Qwen2", dict(tie_word_embeddings=True,
                                 rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
}


def make_config(family, extra):
    cls = getattr(transformers, f"{family}Config")
    kw = base(family)
    kw.update(extra)
    try:
        cfg = cls(**kw)
    except TypeError:
        rp = kw.pop("rope_parameters")
        kw["rope_theta"] = rp.pop("rope_theta")
        if rp.get("rope_type", "default") != "default":
            kw["rope_scaling"] = rp
        cfg = cls(**kw)
    cfg._attn_implementation = "sdpa"
    return cfg


def randomize(model, seed):
    # Every weight is drawn, then rounded to the nearest bf16 and stored as f32: real checkpoints
    # are bf16, and it makes a bf16-weight run compute exactly what the f32 reference computes.
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif "embed_tokens" in name:
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            else:
                fan_in = p.shape[-1]
                p.copy_(torch.randn(p.shape, generator=g) * (1.5 / fan_in ** 0.5))
            p.copy_(p.to(torch.bfloat16).float())


def greedy(model, prompt, n, device="cpu"):
    ids = list(prompt)
    margins = []  # top-1 minus top-2 logit at each step
    for _ in range(n):
        with torch.no_grad():
            logits = model(torch.tensor([ids], device=device)).logits[0, -1].double().cpu()
        top = torch.topk(logits, 2)
        margins.append(float(top.values[0] - top.values[1]))
        ids.append(int(top.indices[0]))
    return ids[len(prompt):], margins


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    gp = torch.Generator().manual_seed(1234)
    prompts = [torch.randint(3, VOCAB, (n,), generator=gp).tolist() for n in (7, 19, 33)]
    for i, (name, (family, extra)) in enumerate(SPECS.items()):
        cfg = make_config(family, extra)
        model = getattr(transformers, f"{family}ForCausalLM")(cfg).float().eval()
        randomize(model, 100 + i)
        d = os.path.join(out, name)
        model.save_pretrained(d, safe_serialization=True)
        ref = {"prompts": prompts, "greedy": [], "greedy_margins": [], "model": name,
               "note": "fp32 CPU reference, attn_implementation=sdpa; logits in reference.safetensors"}
        tensors = {}
        for j, p in enumerate(prompts):
            with torch.no_grad():
                logits = model(torch.tensor([p])).logits[0].float().contiguous()
            tensors[f"logits.{j}"] = logits
            g, m = greedy(model, p, N_GREEDY)
            ref["greedy"].append(g)
            ref["greedy_margins"].append(m)
        # bf16 reference (TESTING.md: bf16 paths are judged by identical greedy continuations):
        # the same weights in bf16 on the GPU with SDPA, as a bf16 serving engine runs them.
        if torch.cuda.is_available():
            m16 = copy.deepcopy(model).to(device="cuda", dtype=torch.bfloat16)
            ref["greedy_bf16"], ref["greedy_bf16_margins"] = [], []
            for p in prompts:
                g, m = greedy(m16, p, N_GREEDY, device="cuda")
                ref["greedy_bf16"].append(g)
                ref["greedy_bf16_margins"].append(m)
            del m16
        save_file(tensors, os.path.join(d, "reference.safetensors"))
        with open(os.path.join(d, "reference.json"), "w") as f:
            json.dump(ref, f)
        size = sum(os.path.getsize(os.path.join(d, x)) for x in os.listdir(d))
        print(f"{name}: {size/1e6:.2f} MB, greedy min margins {[min(m) for m in ref['greedy_margins']]}", flush=True)
        if "greedy_bf16" in ref:
            same = [a == b for a, b in zip(ref["greedy"], ref["greedy_bf16"])]
            print(f"  bf16 greedy equals f32 greedy: {same}; bf16 min margins "
                  f"{[min(m) for m in ref['greedy_bf16_margins']]}", flush=True)
        print(open(os.path.join(d, "config.json")).read(), flush=True)
    with open(os.path.join(out, "VERSIONS.txt"), "w") as f:
        f.write(f"torch {torch.__version__}\ntransformers {transformers.__version__}\n"
                f"script tools/make_model_fixtures.py\n")
    print(open(os.path.join(out, "VERSIONS.txt")).read())


if __name__ == "__main__":
    main()
