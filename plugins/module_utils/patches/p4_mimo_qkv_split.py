# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""Patch 4 (the real fix): load MiMo's fused ``qkv_proj`` as a plain [Q|K|V] stack, shard by shard.

vLLM's MiMo loader cut the fused tensor with ``loaded_weight.chunk(tp_size, dim=0)[tp_rank]``. That is
right only for a checkpoint pre-sharded rank by rank. festr2's requantized MXFP8 checkpoint is a plain
[Q|K|V] stack, so with TP=8 seven of the eight ranks received nothing but Q rows in their K and V slots
and computed attention with Q posing as K and V ("*\\0" output). The patch splits the tensor into its Q,
K and V rows (``_sparkfleet_qkv_rows``, a pure function tested in tests/unit) and hands each to
QKVParallelLinear's ``weight_loader`` with shard id "q", "k" or "v", which shards it correctly. Per-row
scales are split the same way.

Releases from 0.24 load the fused tensor through ``_try_load_fp8_qkv_proj``, which assumes Xiaomi's
interleaved layout and raises a ValueError on festr2's scales (vllm#42803). There the patch puts the
plain-layout loader in front of that method.

Which layout applies: ``VLLM_SPARKFLEET_MIMO_QKV_LAYOUT`` (``plain`` or ``interleaved``; the VLLM_
prefix makes vLLM's Ray executor carry it to every worker). Unset, a layer whose ModelOpt algorithm is
MXFP8 (festr2's checkpoint) is read as plain and anything else keeps upstream's behaviour.
"""

from __future__ import annotations

import ast
import re

from . import qkv
from .engine import Patch, find_def, indent_of, insert_function, segment
from .p3_mxfp8_scale_name import model_load_weights

NAIVE = re.compile(
    r"(?P<ind>[ \t]+)if name in params_dict:\n"
    r"[ \t]+param = params_dict\[name\]\n"
    r"[ \t]+loaded_weight = loaded_weight\.chunk\(tp_size, dim=0\)\[tp_rank\]\n"
    r"[ \t]+default_weight_loader\(param, loaded_weight\)\n")
CKPT_TP_SIG = re.compile(r"def _try_load_fp8_qkv_proj\(\n(?:.*\n)*?\s+\) -> bool:\n")

HELPER = '''\
    def _sparkfleet_load_plain_qkv(self, name, tensor, params_dict, loaded_params):  {marker}
        """Load a plain [Q|K|V] fused qkv_proj tensor through the Q, K and V shard loaders."""
        import os

        if ".qkv_proj." not in name or name not in params_dict:
            return False
        prefix = name.rsplit(".", 1)[0]
        layout = os.environ.get("VLLM_SPARKFLEET_MIMO_QKV_LAYOUT", "").lower()
        if not layout:
            resolve = getattr(self.quant_config, "_resolve_quant_algo", None)
            try:
                algo = resolve(prefix) if resolve else None
            except Exception:
                algo = None
            layout = "plain" if algo == "MXFP8" else "upstream"
        if layout != "plain":
            return False
        attn = self.get_submodule(prefix.rsplit(".", 1)[0])
        sizes = _sparkfleet_qkv_rows(tensor.shape[0], attn.total_num_heads, attn.total_num_kv_heads,
                                     attn.head_dim, attn.v_head_dim)
        param = params_dict[name]
        for shard_id, part in zip(("q", "k", "v"), tensor.split(sizes, dim=0)):
            param.weight_loader(param, part, shard_id)
        loaded_params.add(name)
        return True

'''


class MimoQkvSplit(Patch):
    id = "mimo_qkv_split"
    title = "MiMo fused qkv_proj: [Q|K|V] split and per-shard weight_loader calls"
    target = "model_executor/models/mimo_v2.py"
    env = ("VLLM_SPARKFLEET_MIMO_QKV_LAYOUT",)
    looked_for = ("the naive `loaded_weight.chunk(tp_size, dim=0)[tp_rank]` qkv_proj branch (<= 0.23), or "
                  "_try_load_fp8_qkv_proj (>= 0.24), in the MiMo model's load_weights")

    def fixed_upstream(self, src, tree):
        return None  # 0.34 still assumes the interleaved layout (vllm#42803 open)

    def locate(self, src, tree):
        cls, fn = model_load_weights(tree)
        if fn is None:
            return None
        start, end = segment(src, fn)
        m = NAIVE.search(src, start, end)
        if m:
            return ("naive", cls, m)
        method = find_def(tree, "%s._try_load_fp8_qkv_proj" % cls.name)
        if method is not None:
            m = CKPT_TP_SIG.search(src, *segment(src, method))
            if m:
                return ("ckpt_tp", cls, m)
        return None

    def transform(self, src, anchor):
        kind, cls, m = anchor
        if kind == "naive":
            ind = m.group("ind")
            call = (f"{ind}if self._sparkfleet_load_plain_qkv(name, loaded_weight, params_dict, loaded_params):\n"
                    f"{ind}    pass  {self.marker}\n"
                    f"{ind}elif name in params_dict:\n"
                    f"{ind}    param = params_dict[name]\n"
                    f"{ind}    loaded_weight = loaded_weight.chunk(tp_size, dim=0)[tp_rank]\n"
                    f"{ind}    default_weight_loader(param, loaded_weight)\n")
            src = src[: m.start()] + call + src[m.end():]
        else:
            body_ind = indent_of(src, m.end()) or "        "
            call = (f"{body_ind}if self._sparkfleet_load_plain_qkv(name, tensor, params_dict, loaded_params):"
                    f"  {self.marker}\n"
                    f"{body_ind}    return True\n")
            # After the docstring, if any: insert before the method's first statement.
            tree = ast.parse(src)
            method = find_def(tree, "%s._try_load_fp8_qkv_proj" % cls.name)
            first = method.body[0]
            if isinstance(first, ast.Expr) and isinstance(getattr(first, "value", None), ast.Constant):
                first = method.body[1]
            at = segment(src, first)[0]
            src = src[:at] + call + src[at:]
        tree = ast.parse(src)
        cls_node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls.name)
        fn = next(n for n in cls_node.body if isinstance(n, ast.FunctionDef) and n.name == "load_weights")
        at = segment(src, fn)[0]
        src = src[:at] + HELPER.format(marker=self.marker) + src[at:]
        if "def _sparkfleet_qkv_rows(" not in src:
            src = insert_function(src, qkv._sparkfleet_qkv_rows)
        return src

    def postcondition(self, src):
        tree = ast.parse(src)
        cls, fn = model_load_weights(tree)
        problems = []
        if fn is None:
            return ["the MiMo load_weights vanished"]
        if "def _sparkfleet_qkv_rows(" not in src:
            problems.append("the [Q|K|V] row split is missing")
        if find_def(tree, "%s._sparkfleet_load_plain_qkv" % cls.name) is None:
            problems.append("the plain-layout loader is missing")
        body = src[slice(*segment(src, fn))]
        method = find_def(tree, "%s._try_load_fp8_qkv_proj" % cls.name)
        wired = "_sparkfleet_load_plain_qkv(name, loaded_weight" in body or (
            method is not None and "_sparkfleet_load_plain_qkv(name, tensor" in src[slice(*segment(src, method))])
        if not wired:
            problems.append("the fused qkv_proj path does not go through the plain-layout loader")
        return problems
