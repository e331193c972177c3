#!/usr/bin/env python3
"""Golden fixtures for Qwen3.5 (hybrid Gated DeltaNet + gated full attention), see docs/models/qwen3_5.md.

Tiny random configs saved by transformers, fp32 CPU reference logits for fixed prompts and 32-token greedy
continuations (each greedy step is a full forward without a cache, so every step runs HF's chunked form).

    python3 tools/make_qwen35_fixtures.py OUTDIR
Writes OUTDIR/<name>/{config.json, model.safetensors, reference.json, reference.safetensors} and
OUTDIR/VERSIONS.txt. Copy the model folders to tests/fixtures/models/.
Variants: text-only dense (Qwen3_5ForCausalLM), the VLM wrapper (Qwen3_5ForConditionalGeneration with a
tiny vision tower, tied embeddings) and the MoE text model (Qwen3_5MoeForCausalLM) when present.
"""
import json
import os
import sys
import traceback

import torch
import transformers
from safetensors.torch import save_file

VOCAB = 1000
N_GREEDY = 32
# 90 tokens crosses HF's 64-token chunk boundary inside the prompt itself.
PROMPT_LENS = (7, 33, 90)


def text_kw(moe=False):
    kw = dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=4,
              layer_types=["linear_attention", "linear_attention", "full_attention", "linear_attention"],
              num_attention_heads=4, num_key_value_heads=2, head_dim=32,
              linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
              linear_value_head_dim=16, linear_conv_kernel_dim=4,
              max_position_embeddings=512, rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2,
              rope_parameters={"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25,
                               "mrope_section": [2, 1, 1], "mrope_interleaved": True})
    if moe:
        kw.update(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                  shared_expert_intermediate_size=48)
    else:
        kw.update(intermediate_size=160)
    return kw


def build(name):
    if name == "qwen35-tiny":
        cfg = transformers.Qwen3_5TextConfig(**text_kw(), tie_word_embeddings=False)
        cls = transformers.Qwen3_5ForCausalLM
    elif name == "qwen35-vlm-tied":
        tk = text_kw()
        tk["tie_word_embeddings"] = True
        vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64,
                      num_position_embeddings=16, patch_size=16, temporal_patch_size=2, spatial_merge_size=2)
        cfg = transformers.Qwen3_5Config(text_config=tk, vision_config=vision, tie_word_embeddings=True)
        cls = transformers.Qwen3_5ForConditionalGeneration
    elif name == "qwen35-moe-tiny":
        cfg = transformers.Qwen3_5MoeTextConfig(**text_kw(moe=True), tie_word_embeddings=False)
        cls = transformers.Qwen3_5MoeForCausalLM
    else:
        raise ValueError(name)
    cfg._attn_implementation = "sdpa"
    return cls(cfg).float().eval()


def randomize(model, seed):
    # Every weight is drawn, then rounded to the nearest bf16 and stored as f32.
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("linear_attn.norm.weight"):  # gated norm: plain w
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif name.endswith("norm.weight"):  # (1 + w) norms
                p.copy_(0.2 * torch.randn(p.shape, generator=g))
            elif name.endswith("A_log"):
                p.copy_(torch.log(torch.rand(p.shape, generator=g) * 15 + 1))
            elif name.endswith("dt_bias"):
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif "embed_tokens" in name:
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            else:
                fan_in = p.shape[-1] if p.dim() > 1 else 16
                if "conv1d" in name:
                    fan_in = p.shape[-1]
                p.copy_(torch.randn(p.shape, generator=g) * (1.5 / fan_in ** 0.5))
            p.copy_(p.to(torch.bfloat16).float())


def greedy(model, prompt, n):
    ids = list(prompt)
    margins = []
    for _ in range(n):
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0, -1].double()
        top = torch.topk(logits, 2)
        margins.append(float(top.values[0] - top.values[1]))
        ids.append(int(top.indices[0]))
    return ids[len(prompt):], margins


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    gp = torch.Generator().manual_seed(1234)
    prompts = [torch.randint(3, VOCAB, (n,), generator=gp).tolist() for n in PROMPT_LENS]
    for i, name in enumerate(["qwen35-tiny", "qwen35-vlm-tied", "qwen35-moe-tiny"]):
        try:
            model = build(name)
        except Exception:
            print(f"{name}: not built", flush=True)
            traceback.print_exc()
            continue
        randomize(model, 500 + i)
        d = os.path.join(out, name)
        model.save_pretrained(d, safe_serialization=True)
        ref = {"prompts": prompts, "greedy": [], "greedy_margins": [], "model": name,
               "class": type(model).__name__,
               "note": "fp32 CPU reference (torch fallbacks of the chunked gated delta rule and conv), "
                       "attn_implementation=sdpa, use_cache=False; logits in reference.safetensors"}
        tensors = {}
        for j, p in enumerate(prompts):
            with torch.no_grad():
                logits = model(input_ids=torch.tensor([p]), use_cache=False).logits[0].float().contiguous()
            tensors[f"logits.{j}"] = logits
            gr, m = greedy(model, p, N_GREEDY)
            ref["greedy"].append(gr)
            ref["greedy_margins"].append(m)
        # Prefill then cached decode in HF as well (recurrent form for single-token steps).
        try:
            p = prompts[1]
            with torch.no_grad():
                o = model(input_ids=torch.tensor([p]), use_cache=True)
                pkv = o.past_key_values
                ids = list(p) + ref["greedy"][1][:8]
                steps = []
                for t in range(len(p), len(ids)):
                    o = model(input_ids=torch.tensor([[ids[t]]]), past_key_values=pkv, use_cache=True)
                    pkv = o.past_key_values
                    steps.append(o.logits[0, -1].float())
            tensors["decode_logits.1"] = torch.stack(steps).contiguous()
            ref["decode_note"] = "decode_logits.1: prompt 1 prefilled, then greedy[1][:8] fed one token at a time"
        except Exception:
            traceback.print_exc()
        save_file(tensors, os.path.join(d, "reference.safetensors"))
        with open(os.path.join(d, "reference.json"), "w") as f:
            json.dump(ref, f)
        size = sum(os.path.getsize(os.path.join(d, x)) for x in os.listdir(d))
        print(f"{name}: {size/1e6:.2f} MB, greedy min margins {[min(m) for m in ref['greedy_margins']]}", flush=True)
        print(open(os.path.join(d, "config.json")).read(), flush=True)
    with open(os.path.join(out, "VERSIONS.txt"), "w") as f:
        f.write(f"torch {torch.__version__}\ntransformers {transformers.__version__}\n"
                f"script tools/make_qwen35_fixtures.py\n")
    print(open(os.path.join(out, "VERSIONS.txt")).read())


if __name__ == "__main__":
    main()
