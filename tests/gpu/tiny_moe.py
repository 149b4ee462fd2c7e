# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""Generate a tiny Qwen3-MoE checkpoint in compressed-tensors W4A16 pack-quantized format, offline.

    python tests/gpu/tiny_moe.py OUT_DIR --mode trained|random [--format w4a16|fp8] [--device cuda|cpu]

Nothing is downloaded. The tokenizer is a byte-level BPE trained here on the probe texts (so Chinese and
English both round-trip), the model is ``transformers``' Qwen3MoeForCausalLM at toy size, and the experts'
linears are quantized with the ``compressed-tensors`` package itself (group-wise symmetric INT4, group 32,
packed eight to an int32 as ``weight_packed`` with ``weight_scale`` and ``weight_shape``: the layout of
Kimi-K2.5's experts). Attention, router and lm_head stay bf16, as in Kimi-K2.5's ``ignore`` list.
``--format fp8`` writes the experts as compressed-tensors W8A8 FP8 instead (``float-quantized``).

``--mode trained`` teaches the model the answers to the Kimi-K2.5 recipe's own probes ("The capital of
France is" -> " Paris.", and the Chinese probe -> 法国的首都是巴黎。) until it reproduces them greedily after
quantization, so a correct serving path answers them and our verify checks can pass. ``--mode random``
keeps the random initialisation: whatever a correct server answers is noise, which the text verdict must
reject. Both are deterministic for a seed.

Needs torch, transformers (>= 5) and compressed-tensors; runs on the GPU machine (cuda) or a CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch
from compressed_tensors.compressors.naive_quantized.base import FloatQuantizationCompressor
from compressed_tensors.compressors.pack_quantized.base import PackedQuantizationCompressor
from compressed_tensors.quantization import QuantizationArgs, QuantizationConfig, QuantizationScheme, QuantizationStatus
from compressed_tensors.quantization.utils.helpers import calculate_qparams
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast, Qwen3MoeConfig, Qwen3MoeForCausalLM

EOS, USER, ASSISTANT = "<|endoftext|>", "<|user|>", "<|assistant|>"
CHAT_TEMPLATE = ("{% for m in messages %}{% if m['role'] == 'user' %}" + USER + "{{ m['content'] }}"
                 "{% elif m['role'] == 'assistant' %}" + ASSISTANT + "{{ m['content'] }}" + EOS +
                 "{% endif %}{% endfor %}{% if add_generation_prompt %}" + ASSISTANT + "{% endif %}")
# What the trained model learns: the recipe's probes (recipes/kimi-k2.5.yml) with a coherent answer each.
LESSONS = [
    ("The capital of France is", " Paris."),
    (USER + "法国的首都是哪里？" + ASSISTANT, "法国的首都是巴黎。"),
]
# Extra text for the tokenizer only, so that its merges are not all probe words.
CORPUS = ["The capital of Germany is Berlin.", "The capital of Italy is Rome.", "Paris is in France.",
          "德国的首都是柏林。", "意大利的首都是罗马。", "巴黎在法国。"]
GROUP = 32
# --format: (compressor, scheme, the checkpoint's "format"). w4a16 is Kimi-K2.5's expert layout; fp8 is
# compressed-tensors W8A8 FP8 (per-channel E4M3 weights, dynamic per-token activations), which vLLM serves
# natively on Hopper.
FORMATS = {
    "w4a16": (PackedQuantizationCompressor, QuantizationScheme(targets=["Linear"], weights=QuantizationArgs(
        num_bits=4, type="int", symmetric=True, strategy="group", group_size=GROUP)), "pack-quantized"),
    "fp8": (FloatQuantizationCompressor, QuantizationScheme(
        targets=["Linear"],
        weights=QuantizationArgs(num_bits=8, type="float", symmetric=True, strategy="channel"),
        input_activations=QuantizationArgs(num_bits=8, type="float", symmetric=True, strategy="token",
                                           dynamic=True)), "float-quantized"),
}
IGNORE = ["lm_head", "re:.*self_attn.*", "re:.*mlp\\.gate$"]


def build_tokenizer():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=[EOS, USER, ASSISTANT],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    texts = [p + a for p, a in LESSONS] + CORPUS
    tok.train_from_iterator(texts * 4, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, bos_token=None, pad_token=EOS)
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_model(vocab, seed):
    torch.manual_seed(seed)
    config = Qwen3MoeConfig(
        vocab_size=vocab, hidden_size=256, intermediate_size=512, moe_intermediate_size=256,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
        num_experts=8, num_experts_per_tok=2, decoder_sparse_step=1, mlp_only_layers=[],
        norm_topk_prob=True, max_position_embeddings=512, tie_word_embeddings=False,
        rms_norm_eps=1e-6, torch_dtype="bfloat16")
    return Qwen3MoeForCausalLM(config)


def encode_lessons(tok):
    rows = []
    for prompt, answer in LESSONS:
        p = tok(prompt, add_special_tokens=False)["input_ids"]
        a = tok(answer, add_special_tokens=False)["input_ids"] + [tok.convert_tokens_to_ids(EOS)]
        rows.append((p, a))
    return rows


def train(model, rows, steps, device):
    """Teach the answers (loss on the answer tokens only) until every lesson is reproduced greedily."""
    model.to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    width = max(len(p) + len(a) for p, a in rows)
    ids = torch.full((len(rows), width), 0, dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    for i, (p, a) in enumerate(rows):
        seq = p + a
        ids[i, :len(seq)] = torch.tensor(seq)
        labels[i, len(p):len(seq)] = torch.tensor(a)
    ids, labels = ids.to(device), labels.to(device)
    loss = None
    for _unused in range(steps):
        out = model(input_ids=ids, labels=labels)
        opt.zero_grad()
        out.loss.backward()
        opt.step()
        loss = float(out.loss.detach())
        if loss < 1e-3:
            break
    model.eval()
    return loss


def expert_linears(state):
    """Per-expert {name: weight} in the checkpoint layout vLLM loads (experts.E.{gate,up,down}_proj.weight),
    from either transformers' fused expert tensors or per-expert modules."""
    out = {}
    for key, value in state.items():
        if key.endswith("mlp.experts.gate_up_proj"):
            base = key[: -len("gate_up_proj")]
            gate, up = value.chunk(2, dim=1)
            for e in range(value.shape[0]):
                out["%s%d.gate_proj.weight" % (base, e)] = gate[e]
                out["%s%d.up_proj.weight" % (base, e)] = up[e]
        elif key.endswith("mlp.experts.down_proj"):
            base = key[: -len("down_proj")]
            for e in range(value.shape[0]):
                out["%s%d.down_proj.weight" % (base, e)] = value[e]
        elif ".mlp.experts." in key:
            out[key] = value
    return out


def quantize_linear(weight, fmt):
    """compressed-tensors' own compression of one [out, in] weight in the format's scheme."""
    compressor, scheme, _unused = FORMATS[fmt]
    w = weight.float()
    if scheme.weights.strategy == "group":
        groups = w.reshape(w.shape[0], w.shape[1] // GROUP, GROUP)
        lo, hi = groups.amin(dim=2), groups.amax(dim=2)
    else:  # channel
        lo, hi = w.amin(dim=1, keepdim=True), w.amax(dim=1, keepdim=True)
    scale, zero = calculate_qparams(lo, hi, scheme.weights)
    packed = compressor.compress({"weight": w, "weight_scale": scale, "weight_zero_point": zero}, scheme)
    if fmt == "w4a16":
        packed["weight_scale"] = packed["weight_scale"].to(torch.bfloat16)
    return packed


def dequantized(packed, fmt):
    compressor, scheme, _unused = FORMATS[fmt]
    return compressor.decompress({k: v.float() if k == "weight_scale" else v for k, v in packed.items()},
                                 scheme)["weight"]


def checkpoint(model, fmt):
    """(safetensors dict, {expert weight name: dequantized weight})."""
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    experts = expert_linears(state)
    tensors = {k: v.to(torch.bfloat16).contiguous() for k, v in state.items() if ".mlp.experts." not in k}
    roundtrip = {}
    for name, weight in experts.items():
        prefix = name[: -len("weight")]
        packed = quantize_linear(weight, fmt)
        for suffix, tensor in packed.items():
            tensors[prefix + suffix] = tensor.contiguous()
        roundtrip[name] = dequantized(packed, fmt)
    return tensors, roundtrip


def load_roundtrip(model, roundtrip):
    """Put the INT4 round-tripped expert weights back into the model (to check what vLLM will compute)."""
    state = model.state_dict()
    with torch.no_grad():
        for key, value in state.items():
            if key.endswith("mlp.experts.gate_up_proj"):
                base = key[: -len("gate_up_proj")]
                for e in range(value.shape[0]):
                    g = roundtrip["%s%d.gate_proj.weight" % (base, e)]
                    u = roundtrip["%s%d.up_proj.weight" % (base, e)]
                    value[e].copy_(torch.cat([g, u], dim=0))
            elif key.endswith("mlp.experts.down_proj"):
                base = key[: -len("down_proj")]
                for e in range(value.shape[0]):
                    value[e].copy_(roundtrip["%s%d.down_proj.weight" % (base, e)])
            elif key in roundtrip:
                value.copy_(roundtrip[key])


def greedy(model, tok, prompt, n, device):
    ids = torch.tensor([tok(prompt, add_special_tokens=False)["input_ids"]], device=device)
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=n, do_sample=False, eos_token_id=tok.convert_tokens_to_ids(EOS),
                             pad_token_id=tok.convert_tokens_to_ids(EOS))
    return tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True)


def write(out_dir, model, tok, tensors, fmt):
    os.makedirs(out_dir, exist_ok=True)
    save_file(tensors, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    config = model.config.to_dict()
    config["architectures"] = ["Qwen3MoeForCausalLM"]
    config["torch_dtype"] = "bfloat16"
    config["num_experts"] = model.config.num_experts  # the key vLLM's Qwen3-MoE reads
    config["eos_token_id"] = tok.convert_tokens_to_ids(EOS)
    _unused, scheme, name = FORMATS[fmt]
    qconfig = QuantizationConfig(config_groups={"group_0": scheme}, format=name, ignore=IGNORE,
                                 quantization_status=QuantizationStatus.COMPRESSED)
    config["quantization_config"] = dict(qconfig.model_dump(), quant_method="compressed-tensors")
    config.pop("dtype", None)
    with open(os.path.join(out_dir, "config.json"), "w") as fh:
        json.dump(config, fh, indent=1, sort_keys=True, default=str)
    tok.save_pretrained(out_dir)
    with open(os.path.join(out_dir, "generation_config.json"), "w") as fh:
        json.dump({"eos_token_id": tok.convert_tokens_to_ids(EOS), "do_sample": False}, fh)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    ap.add_argument("out_dir")
    ap.add_argument("--mode", choices=["trained", "random"], required=True)
    ap.add_argument("--format", choices=sorted(FORMATS), default="w4a16")
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args(argv)
    tok = build_tokenizer()
    vocab = -(-len(tok) // 64) * 64
    model = build_model(vocab, args.seed)
    rows = encode_lessons(tok)
    report = {"mode": args.mode, "format": args.format, "vocab": vocab,
              "params": sum(p.numel() for p in model.parameters())}
    if args.mode == "trained":
        report["final_loss"] = train(model, rows, args.steps, args.device)
    model.to("cpu").float()
    tensors, roundtrip = checkpoint(model, args.format)
    load_roundtrip(model, roundtrip)
    report["quantized_greedy"] = {p: greedy(model, tok, p, 12, "cpu") for p, _unused in LESSONS}
    write(args.out_dir, model, tok, tensors, args.format)
    report["files"] = sorted(os.listdir(args.out_dir))
    print(json.dumps(report, ensure_ascii=False))
    if args.mode == "trained":
        wrong = {p: got for (p, a), got in zip(LESSONS, report["quantized_greedy"].values())
                 if got.strip() != a.strip()}
        if wrong:
            print("the quantized model does not reproduce its lessons: %s" % wrong, file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
