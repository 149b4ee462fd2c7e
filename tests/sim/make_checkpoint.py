"""Synthetic checkpoints in the real on-disk format, for the simulated cluster.

The files are small but real: ``config.json`` with the quantization_config of the model family and the
``auto_map`` of its remote code, ``model.safetensors.index.json``, several safetensors shards, and what a
Hub snapshot carries besides (tokenizer, its config with the chat template, generation config, the remote
code modules), all in the Hugging Face cache layout
(``models--ORG--NAME/snapshots/<rev>/<file>`` symlinks into ``blobs/``; LFS files are named by sha256,
small files by their git blob sha1, as the Hub does).

Flavours:
  kimi  compressed-tensors pack-quantized INT4 (group_size 32): int32 packed expert weights (8 nibbles
        each) with bf16 scales of shape [rows, cols / 32], as in moonshotai/Kimi-K2.5.
  mimo  ModelOpt mixed precision: the same packed MoE experts, plus MXFP8 attention whose fused
        [Q|K|V] ``qkv_proj`` weight carries E8M0 scales under ``weight_scale_inv`` (festr2's layout).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
from safetensors import TensorSpec, serialize_file

FLAVOURS = {
    "kimi": {
        "repo_id": "sparkfleet-sim/Kimi-K2.5-tiny",
        "architectures": ["KimiK25ForConditionalGeneration"],
        "remote_code": {"AutoConfig": "configuration_kimi_k25.KimiK25Config",
                        "AutoModelForCausalLM": "modeling_kimi_k25.KimiK25ForConditionalGeneration"},
        "prefix": "language_model.model.layers",
        "quantization_config": {
            "quant_method": "compressed-tensors",
            "format": "pack-quantized",
            "config_groups": {
                "group_0": {
                    "targets": ["Linear"],
                    "weights": {"num_bits": 4, "type": "int", "group_size": 32, "strategy": "group",
                                "symmetric": True},
                }
            },
            "ignore": ["lm_head"],
        },
    },
    "mimo": {
        "repo_id": "sparkfleet-sim/MiMo-V2.5-Pro-tiny",
        "architectures": ["MiMoV2ForCausalLM"],
        "remote_code": {"AutoConfig": "configuration_mimo_v2.MiMoV2Config",
                        "AutoModelForCausalLM": "modeling_mimo_v2.MiMoV2ForCausalLM"},
        "prefix": "model.layers",
        "quantization_config": {
            "quant_method": "modelopt",
            "quant_algo": "MIXED_PRECISION",
            "kv_cache_quant_algo": "FP8",
            "quantized_layers": {
                "model.layers.*.self_attn.qkv_proj": {"quant_algo": "MXFP8"},
                "model.layers.*.mlp.experts.*": {"quant_algo": "NVFP4", "group_size": 16},
            },
        },
    },
}

# Small enough for a 2-core test host, shaped like the real thing.
DEFAULT_SHAPE = {"layers": 4, "experts": 4, "hidden": 512, "intermediate": 256, "shards": 4,
                 "q_heads": 16, "kv_heads": 8, "head_dim": 32}


def bf16(values: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits by keeping the high half (numpy has no bfloat16 dtype)."""
    as_u32 = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    return (as_u32 >> 16).astype("<u2")


def raw(dtype: str, array: np.ndarray) -> dict:
    """A tensor for safetensors' serializer: its safetensors dtype name and little-endian storage."""
    return {"dtype": dtype, "array": np.ascontiguousarray(array)}


def specs(tensors: dict) -> dict:
    return {name: TensorSpec(dtype=t["dtype"], shape=list(t["array"].shape), data_ptr=t["array"].ctypes.data,
                             data_len=t["array"].nbytes) for name, t in tensors.items()}


def expert_tensors(rng: np.random.Generator, name: str, rows: int, cols: int) -> dict:
    packed = rng.integers(np.iinfo(np.int32).min, np.iinfo(np.int32).max, size=(rows, cols // 8),
                          dtype=np.int32, endpoint=True)
    scales = rng.normal(0.0058, 0.0012, size=(rows, cols // 32)).clip(0.0024, 0.0145)
    return {
        f"{name}.weight_packed": raw("int32", packed.astype("<i4")),
        f"{name}.weight_scale": raw("bfloat16", bf16(scales)),
        f"{name}.weight_shape": raw("int32", np.array([rows, cols], dtype="<i4")),
    }


def layer_tensors(flavour: str, layer: int, shape: dict, rng: np.random.Generator) -> dict:
    spec = FLAVOURS[flavour]
    base = f"{spec['prefix']}.{layer}"
    h, inter = shape["hidden"], shape["intermediate"]
    out: dict = {}
    for e in range(shape["experts"]):
        out.update(expert_tensors(rng, f"{base}.mlp.experts.{e}.gate_proj", inter, h))
        out.update(expert_tensors(rng, f"{base}.mlp.experts.{e}.up_proj", inter, h))
        out.update(expert_tensors(rng, f"{base}.mlp.experts.{e}.down_proj", h, inter))
    q = shape["q_heads"] * shape["head_dim"]
    kv = shape["kv_heads"] * shape["head_dim"]
    if flavour == "mimo":
        rows = q + 2 * kv  # fused [Q|K|V], the layout the MiMo qkv split must respect
        weight = rng.integers(0, 256, size=(rows, h), dtype=np.uint8)
        # E8M0 scale bytes around 2^-13, with Q/K/V sections slightly apart (as observed on festr2).
        centres = np.concatenate([np.full(q, 114), np.full(kv, 116), np.full(kv, 113)])
        scale = (centres[:, None] + rng.integers(-2, 3, size=(rows, h // 32))).astype(np.uint8)
        out[f"{base}.self_attn.qkv_proj.weight"] = raw("float8_e4m3fn", weight)
        out[f"{base}.self_attn.qkv_proj.weight_scale_inv"] = raw("uint8", scale)
    else:
        for proj, rows in (("q_proj", q), ("k_proj", kv), ("v_proj", kv)):
            out[f"{base}.self_attn.{proj}.weight"] = raw("bfloat16", bf16(rng.normal(0, 0.02, (rows, h))))
    out[f"{base}.self_attn.o_proj.weight"] = raw("bfloat16", bf16(rng.normal(0, 0.02, (h, q))))
    return out


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()  # noqa: S324 (git's object name)


def side_files(flavour: str, spec: dict) -> dict[str, bytes]:
    """What a Hub snapshot carries besides the weights: the tokenizer, its config with the chat template,
    the generation config and the remote code that ``auto_map`` names (loaded with --trust-remote-code)."""
    vocab = {tok: i for i, tok in enumerate(["<unk>", "<s>", "</s>", "Paris", "hello", " ", "84"])}
    tokenizer = {"version": "1.0", "added_tokens": [], "normalizer": None, "pre_tokenizer": {"type": "Whitespace"},
                 "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"}}
    template = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
                "{% if add_generation_prompt %}<|assistant|>{% endif %}")
    out = {
        "tokenizer.json": json.dumps(tokenizer, indent=2) + "\n",
        "tokenizer_config.json": json.dumps({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>",
                                             "eos_token": "</s>", "chat_template": template}, indent=2) + "\n",
        "generation_config.json": json.dumps({"bos_token_id": 1, "eos_token_id": 2, "temperature": 0.6}) + "\n",
    }
    for entry in spec["remote_code"].values():
        module, cls = entry.split(".")
        out[module + ".py"] = (f'"""Remote code of the {flavour} stand-in checkpoint ({cls})."""\n\n\n'
                               f"class {cls}:\n    pass\n")
    return {name: text.encode() for name, text in out.items()}


def write_checkpoint(dest: Path, flavour: str, shape: dict | None = None, seed: int = 1234) -> dict:
    """Write one checkpoint in HF cache layout under ``dest`` (a ``hub`` directory)."""
    shape = {**DEFAULT_SHAPE, **(shape or {})}
    spec = FLAVOURS[flavour]
    rng = np.random.default_rng(seed)
    staging = dest / ".staging"
    staging.mkdir(parents=True, exist_ok=True)
    n_shards = shape["shards"]
    weight_map: dict[str, str] = {}
    files: dict[str, bytes | Path] = {}
    total = 0
    per_shard = [list(range(shape["layers"]))[i::n_shards] for i in range(n_shards)]
    for i, layers in enumerate(per_shard):
        fname = f"model-{i + 1:05d}-of-{n_shards:05d}.safetensors"
        tensors: dict = {}
        for layer in layers:
            tensors.update(layer_tensors(flavour, layer, shape, rng))
        if i == 0:
            vocab = 1024
            tensors["model.embed_tokens.weight"] = raw("bfloat16", bf16(rng.normal(0, 0.02, (vocab, shape["hidden"]))))
        path = staging / fname
        serialize_file(specs(tensors), str(path), metadata={"format": "pt"})
        total += sum(t["array"].nbytes for t in tensors.values())
        weight_map.update({name: fname for name in tensors})
        files[fname] = path
    config = {
        "architectures": spec["architectures"],
        "model_type": flavour,
        "hidden_size": shape["hidden"],
        "num_hidden_layers": shape["layers"],
        "num_attention_heads": shape["q_heads"],
        "num_key_value_heads": shape["kv_heads"],
        "head_dim": shape["head_dim"],
        "n_routed_experts": shape["experts"],
        "quantization_config": spec["quantization_config"],
        "auto_map": spec["remote_code"],
    }
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    files["config.json"] = (json.dumps(config, indent=2) + "\n").encode()
    files["model.safetensors.index.json"] = (json.dumps(index, indent=2) + "\n").encode()
    files.update(side_files(flavour, spec))

    # The revision is a deterministic stand-in for the Hub's commit hash.
    manifest = hashlib.sha1()  # noqa: S324 (a 40-hex name, not a security hash)
    blobs: dict[str, str] = {}
    for fname in sorted(files):
        content = files[fname]
        data = content.read_bytes() if isinstance(content, Path) else content
        blob = hashlib.sha256(data).hexdigest() if fname.endswith(".safetensors") else git_blob_sha1(data)
        blobs[fname] = blob
        manifest.update(f"{fname}:{blob}\n".encode())
    revision = manifest.hexdigest()
    org, name = spec["repo_id"].split("/")
    repo_dir = dest / f"models--{org}--{name}"
    (repo_dir / "blobs").mkdir(parents=True, exist_ok=True)
    snap = repo_dir / "snapshots" / revision
    snap.mkdir(parents=True, exist_ok=True)
    for fname, blob in blobs.items():
        content = files[fname]
        target = repo_dir / "blobs" / blob
        if isinstance(content, Path):
            os.replace(content, target)
        else:
            target.write_bytes(content)
        link = snap / fname
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(f"../../blobs/{blob}")
    (repo_dir / "refs").mkdir(exist_ok=True)
    (repo_dir / "refs" / "main").write_text(revision)
    shutil.rmtree(staging, ignore_errors=True)
    return {
        "repo_id": spec["repo_id"],
        "revision": revision,
        "flavour": flavour,
        "snapshot": f"models--{org}--{name}/snapshots/{revision}",
        "files": blobs,
        "total_size": total,
    }


def ensure_cached(root: Path, flavour: str, shape: dict | None = None) -> dict:
    """Generate once per (flavour, shape); later calls return the cached copy."""
    shape = {**DEFAULT_SHAPE, **(shape or {})}
    key = hashlib.sha256(json.dumps([flavour, shape, 3], sort_keys=True).encode()).hexdigest()[:12]
    where = root / f"{flavour}-{key}"
    done = where / "checkpoint.json"
    if done.exists():
        return json.loads(done.read_text())
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{flavour}-", dir=root))
    info = write_checkpoint(tmp / "hub", flavour, shape)
    shutil.rmtree(where, ignore_errors=True)
    os.replace(tmp, where)
    info["hub_dir"] = str(where / "hub")
    done.write_text(json.dumps(info, indent=2) + "\n")  # written last: its presence means complete
    return info


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    p.add_argument("dest", type=Path, help="a Hugging Face hub directory to write into")
    p.add_argument("--flavour", choices=sorted(FLAVOURS), default="mimo")
    p.add_argument("--layers", type=int, default=DEFAULT_SHAPE["layers"])
    p.add_argument("--shards", type=int, default=DEFAULT_SHAPE["shards"])
    a = p.parse_args()
    print(json.dumps(write_checkpoint(a.dest, a.flavour, {"layers": a.layers, "shards": a.shards}), indent=2))


if __name__ == "__main__":
    main()
