# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""Patch 4 (the real fix): load MiMo's fused ``qkv_proj`` as a plain [Q|K|V] stack, shard by shard.

vLLM's MiMo loader cut the fused tensor with ``loaded_weight.chunk(tp_size, dim=0)[tp_rank]``. That is
right only for a checkpoint pre-sharded rank by rank. festr2's requantized MXFP8 checkpoint is a plain
[Q|K|V] stack, so with TP=8 seven of the eight ranks received nothing but Q rows in their K and V slots
and computed attention with Q posing as K and V ("*\\0" output). The patch splits the tensor into its Q,
K and V rows (``_sparkfleet_qkv_rows``, a pure function tested in tests/unit) and hands each to
QKVParallelLinear's ``weight_loader`` with shard id "q", "k" or "v", which shards it correctly. Per-row
scales are split the same way.

Releases from 0.24 load an FP8 fused tensor (festr2's MXFP8 weights are float8_e4m3fn) through
``_try_load_fp8_qkv_proj``, whose sharding helper assumes Xiaomi's pre-sharded (interleaved) layout: with
TP=8 it is the same rank chunk, and otherwise it raises on festr2's scales (vllm#42803, still open in 0.34).
There the patch puts the plain-layout loader in front of that method.

Which layout applies: ``VLLM_SPARKFLEET_MIMO_QKV_LAYOUT`` (``plain`` or ``interleaved``; the VLLM_
prefix makes vLLM's Ray executor carry it to every worker). Unset, a layer whose ModelOpt algorithm is
MXFP8 (festr2's checkpoint) is read as plain and anything else keeps upstream's behaviour.

Structural rule: find the fused qkv_proj path of the MiMo model's loader (mimo_loader.pro_loader: an
``if "qkv_proj" in name:`` in the loop, or an ``if self.<method>(...)`` whose method picks qkv_proj names;
none before 0.21: anchor not found). On its GB10 reach (the `if` body, the method, and the same-file helpers
they call), a rank chunk (``x.chunk(n, dim=0)[tp_rank]``) handed to a loader without Q/K/V shard ids is the
bug; the anchor is the `if` body or the method. Q, K and V handed to ``weight_loader`` by shard id and no
rank chunk: fixed upstream.
"""

from __future__ import annotations

import ast

from . import cuda_path, mimo_loader, qkv
from .engine import ABSENT, NEEDED, UPSTREAM, Patch, indent_of, insert_function, segment

LOADER = "_sparkfleet_load_plain_qkv"

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


def rank_chunks(nodes):
    """``x.chunk(n, dim=0)[rank]``: a tensor cut as if pre-sharded rank by rank."""
    return [n for n in nodes if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Call) and
            cuda_path.callee(n.value) == "chunk" and
            any(isinstance(x, ast.Name) and "rank" in x.id for x in ast.walk(n.slice))]


def shard_loads(nodes):
    """Calls that hand a part to a weight_loader by Q/K/V shard id (a literal, or one of ("q", "k", "v"))."""
    nodes = list(nodes)
    qkv_ids = any(isinstance(n, (ast.Tuple, ast.List)) and
                  [getattr(e, "value", None) for e in n.elts] == ["q", "k", "v"] for n in nodes)
    out = []
    for n in nodes:
        if isinstance(n, ast.Call) and cuda_path.callee(n) == "weight_loader":
            args = list(n.args) + [k.value for k in n.keywords]
            if any(isinstance(a, ast.Constant) and a.value in ("q", "k", "v") for a in args) or \
                    (qkv_ids and len(args) >= 3):
                out.append(n)
    return out


def plain_loader_call(loader):
    """The patch's call in front of the fused path: the first statement of the `if` body or the method."""
    first = loader.fused.body[0] if loader.method is None else mimo_loader.first_statement(loader.method)
    if isinstance(first, ast.If) and isinstance(first.test, ast.Call) and cuda_path.callee(first.test) == LOADER:
        return first
    return None


class MimoQkvSplit(Patch):
    id = "mimo_qkv_split"
    title = "MiMo fused qkv_proj: [Q|K|V] split and per-shard weight_loader calls"
    targets = mimo_loader.TARGETS
    env = ("VLLM_SPARKFLEET_MIMO_QKV_LAYOUT",)
    looked_for = ("the fused qkv_proj path of the MiMo model's load_weights: the `if \"qkv_proj\" in name:` "
                  "branch (<= 0.23) or the method it calls, _try_load_fp8_qkv_proj (>= 0.24)")

    def judge(self, src, tree):
        loader = mimo_loader.pro_loader(tree)
        if loader is None:
            return ABSENT, mimo_loader.no_loader_detail(tree)
        reach = mimo_loader.fused_reach(tree, loader)
        chunks, shards = rank_chunks(reach), shard_loads(reach)
        where = ("%s.%s" % (loader.cls.name, loader.method.name)) if loader.method is not None else \
            "the `if %s` branch of %s.load_weights" % (ast.unparse(loader.fused.test), loader.cls.name)
        if shards and not chunks:
            return UPSTREAM, "%s splits the fused qkv_proj into Q, K and V and loads them by shard id" % where
        if not chunks:
            return ABSENT, "%s neither cuts the fused qkv_proj per rank nor loads it by Q/K/V shard" % where
        if loader.method is not None:
            params = [a.arg for a in loader.method.args.args]
            if len(params) < 3 or not {"params_dict", "loaded_params"} <= set(params):
                return ABSENT, "%s takes no (name, tensor, ..., params_dict, loaded_params) arguments" % where
        elif not all(mimo_loader.assigned_in(loader.fn, n) for n in ("params_dict", "loaded_params")):
            return ABSENT, "%s.load_weights has no params_dict and loaded_params" % loader.cls.name
        return NEEDED, loader, ("%s cut the fused qkv_proj as pre-sharded rank by rank; a plain [Q|K|V] tensor "
                                "now goes to the Q, K and V shard loaders first" % where)

    def transform(self, src, anchor):
        if anchor.method is None:
            name, tensor = (e.id for e in anchor.loop.target.elts)
            first, tail = anchor.fused.body[0], "continue"
        else:
            name, tensor = (a.arg for a in anchor.method.args.args[1:3])
            first, tail = mimo_loader.first_statement(anchor.method), "return True"
        at = segment(src, first)[0]
        ind = indent_of(src, at)
        src = src[:at] + (f"{ind}if self.{LOADER}({name}, {tensor}, params_dict, loaded_params):  {self.marker}\n"
                          f"{ind}    {tail}\n") + src[at:]
        tree = ast.parse(src)
        fn = cuda_path.method(tree, anchor.cls.name, "load_weights")
        first = fn.decorator_list[0] if fn.decorator_list else fn
        at = segment(src, first)[0]
        src = src[:at] + HELPER.format(marker=self.marker) + src[at:]
        if "_sparkfleet_qkv_rows" not in cuda_path.functions(ast.parse(src)):
            src = insert_function(src, qkv._sparkfleet_qkv_rows)
        return src

    def postcondition(self, src):
        tree = ast.parse(src)
        loader = mimo_loader.pro_loader(tree)
        if loader is None:
            return ["the MiMo loader's fused qkv_proj path vanished"]
        problems = []
        if "_sparkfleet_qkv_rows" not in cuda_path.functions(tree):
            problems.append("the [Q|K|V] row split is missing")
        helper = cuda_path.method(tree, loader.cls.name, LOADER)
        if helper is None or not shard_loads(ast.walk(helper)):
            problems.append("the plain-layout loader is missing or loads no Q/K/V shard")
        if plain_loader_call(loader) is None:
            problems.append("the fused qkv_proj path does not go through the plain-layout loader first")
        return problems
