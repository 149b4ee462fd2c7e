# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""Patch 1: stream the Marlin NVFP4 MoE per-expert repack into one preallocated tensor.

``prepare_nvfp4_moe_layer_for_marlin`` repacked every expert into a list and then ``torch.cat``-ed the
list, so the head held every expert twice at the peak: about 36 GiB more on MiMo-V2.5-Pro, enough to
OOM a Spark head that also hosts the Ray GCS, the engine core and the API server. Each repacked expert is
now copied into its slot of a tensor allocated once, and freed at once. Upstream made the same change
in vllm#47851 (``_repack_marlin_experts``).
"""

from __future__ import annotations

import ast

from .engine import Patch, find_def, has_def, indent_of, segment

FUNC = "prepare_nvfp4_moe_layer_for_marlin.repack_weight"
LIST_INIT = "tensor_list = []"
APPEND = "tensor_list.append(marlin_qweight)"
CAT = "return torch.cat([x.unsqueeze(0) for x in tensor_list], 0)"


class MarlinChunkedRepack(Patch):
    id = "marlin_chunked_repack"
    title = "Marlin NVFP4 MoE repack into a preallocated tensor"
    target = "model_executor/layers/quantization/utils/marlin_utils_fp4.py"
    looked_for = "%s with %r, %r and %r" % (FUNC, LIST_INIT, APPEND, CAT)

    def fixed_upstream(self, src, tree):
        node = find_def(tree, FUNC)
        body = src[slice(*segment(src, node))] if node else ""
        if has_def(tree, "_repack_marlin_experts") and APPEND not in body:
            return "the repack already streams per expert (_repack_marlin_experts, vllm#47851)"
        return None

    def locate(self, src, tree):
        node = find_def(tree, FUNC)
        if node is None:
            return None
        start, end = segment(src, node)
        body = src[start:end]
        if all(s in body for s in (LIST_INIT, APPEND, CAT)):
            return start, end
        return None

    def transform(self, src, anchor):
        start, end = anchor
        body = src[start:end]
        ind = indent_of(body, body.index(APPEND))
        body = body.replace(LIST_INIT, "out = None  %s (one preallocated tensor, no concatenation)" % self.marker, 1)
        body = body.replace(APPEND, (
            "if out is None:\n"
            f"{ind}    out = torch.empty((E,) + tuple(marlin_qweight.shape), dtype=marlin_qweight.dtype,\n"
            f"{ind}                      device=marlin_qweight.device)\n"
            f"{ind}out[i].copy_(marlin_qweight)\n"
            f"{ind}del marlin_qweight"), 1)
        body = body.replace(CAT, "return out", 1)
        return src[:start] + body + src[end:]

    def postcondition(self, src):
        node = find_def(ast.parse(src), FUNC)
        if node is None:
            return ["%s vanished" % FUNC]
        body = src[slice(*segment(src, node))]
        problems = []
        if "torch.cat" in body or "tensor_list" in body:
            problems.append("repack_weight still accumulates a list and concatenates it")
        if "out[i].copy_(marlin_qweight)" not in body:
            problems.append("the per-expert copy into the preallocated tensor is missing")
        return problems
