# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""Patch 1: stream the Marlin NVFP4 MoE per-expert repack into one preallocated tensor.

``prepare_nvfp4_moe_layer_for_marlin`` repacked every expert into a list and then ``torch.cat``-ed the
list, so the head held every expert twice at the peak: about 36 GiB more on MiMo-V2.5-Pro, enough to
OOM a Spark head that also hosts the Ray GCS, the engine core and the API server. Each repacked expert is
now copied into its slot of a tensor allocated once, and freed at once. Upstream made the same change
in vllm#47851 (``_repack_marlin_experts``), first released in 0.26.0.

Structural rule: in ``prepare_nvfp4_moe_layer_for_marlin``, on the branches that run on GB10, find the weight
repackers: the functions it calls (nested ones, or module-level helpers of the same file, one call deep)
that loop over the experts calling ``gptq_marlin_repack``. A repacker that appends each result to a list
and concatenates the list (``torch.cat``/``torch.stack``) is the bug and the anchor; when every repacker
writes each expert into a subscripted slot of a preallocated tensor, it is fixed upstream.
"""

from __future__ import annotations

import ast

from . import cuda_path
from .engine import ABSENT, NEEDED, UPSTREAM, Patch, indent_of, segment

FUNC = "prepare_nvfp4_moe_layer_for_marlin"
REPACK = "gptq_marlin_repack"


def _own_nodes(fn):
    """The nodes of a function, not descending into functions defined inside it."""
    todo = list(ast.iter_child_nodes(fn))
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            todo.extend(ast.iter_child_nodes(node))


def _repack_loop(fn):
    """The loop of ``fn`` that calls gptq_marlin_repack, else None."""
    for node in _own_nodes(fn):
        if isinstance(node, (ast.For, ast.While)) and any(
                isinstance(c, ast.Call) and cuda_path.callee(c) == REPACK for c in ast.walk(node)):
            return node
    return None


def repackers(tree):
    """[(function, loop)] of the weight repackers prepare_nvfp4_moe_layer_for_marlin reaches on GB10, or None
    when the function is not in the file."""
    prep = cuda_path.functions(tree).get(FUNC)
    if prep is None:
        return None
    nested = cuda_path.functions(prep)
    helpers = cuda_path.functions(tree)
    facts = cuda_path.Facts(tree)
    found, seen = [], set()
    todo = [n for n in cuda_path.live_nodes(prep.body, facts) if isinstance(n, ast.Call)]
    depth = {id(n): 0 for n in todo}
    while todo:
        call = todo.pop(0)
        name = cuda_path.callee(call) if isinstance(call.func, ast.Name) else None
        fn = nested.get(name) or helpers.get(name)
        if fn is None or fn.name in seen or fn is prep:
            continue
        seen.add(fn.name)
        loop = _repack_loop(fn)
        if loop is not None:
            found.append((fn, loop))
        elif depth[id(call)] < 1:
            for inner in cuda_path.live_nodes(fn.body, facts):
                if isinstance(inner, ast.Call):
                    depth[id(inner)] = depth[id(call)] + 1
                    todo.append(inner)
    return found


def accumulation(fn, loop):
    """(list init, append statement, concatenating statement) when ``fn`` collects the repacked experts in a
    list and concatenates it; else None."""
    inits = {}
    for st in _own_nodes(fn):
        if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name) and \
                isinstance(st.value, ast.List) and not st.value.elts:
            inits[st.targets[0].id] = st
    for st in ast.walk(loop):
        if isinstance(st, ast.Expr) and isinstance(st.value, ast.Call) and \
                isinstance(st.value.func, ast.Attribute) and st.value.func.attr == "append" and \
                isinstance(st.value.func.value, ast.Name) and st.value.func.value.id in inits:
            name = st.value.func.value.id
            for cat in _own_nodes(fn):
                if isinstance(cat, ast.Return) and cat.value is not None and any(
                        isinstance(c, ast.Call) and cuda_path.callee(c) in ("cat", "stack") and any(
                            isinstance(n, ast.Name) and n.id == name for n in ast.walk(c))
                        for c in ast.walk(cat.value)):
                    return inits[name], st, cat
    return None


def preallocates(loop):
    """Does the loop write each repacked expert into a slot of one tensor (``out[i] = ...``/``.copy_``)?"""
    for node in ast.walk(loop):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Subscript) for t in node.targets):
            return True
        if isinstance(node, ast.Call) and cuda_path.callee(node) == "copy_" and \
                isinstance(node.func.value, ast.Subscript):
            return True
    return False


class MarlinChunkedRepack(Patch):
    id = "marlin_chunked_repack"
    title = "Marlin NVFP4 MoE repack into a preallocated tensor"
    targets = ("model_executor/layers/quantization/utils/marlin_utils_fp4.py",)
    looked_for = ("a function that prepare_nvfp4_moe_layer_for_marlin calls, looping over the experts with "
                  "gptq_marlin_repack and collecting the results (a list + torch.cat, or a preallocated tensor)")

    def judge(self, src, tree):
        found = repackers(tree)
        if found is None:
            return ABSENT, "no function %s in this file" % FUNC
        if not found:
            return ABSENT, "%s calls no function that loops over the experts calling %s" % (FUNC, REPACK)
        for fn, loop in found:
            acc = accumulation(fn, loop)
            if acc is not None:
                if not (isinstance(loop, ast.For) and isinstance(loop.target, ast.Name) and
                        isinstance(loop.iter, ast.Call) and cuda_path.callee(loop.iter) == "range" and
                        len(loop.iter.args) == 1 and isinstance(acc[1].value.args[0], ast.Name)):
                    return ABSENT, ("%s accumulates the repacked experts in a list, but not in a `for i in "
                                    "range(E)` loop appending one name" % fn.name)
                return NEEDED, (fn.name, loop, acc), (
                    "%s collected every repacked expert in a list and concatenated it; each expert is now "
                    "copied into one preallocated tensor" % fn.name)
        if all(preallocates(loop) for _unused, loop in found):
            return UPSTREAM, ("the weight repack (%s) writes each expert into a preallocated tensor "
                              "(vllm#47851)" % ", ".join(fn.name for fn, _unused in found))
        return ABSENT, ("the weight repack (%s) neither concatenates a list nor writes into a preallocated "
                        "tensor" % ", ".join(fn.name for fn, _unused in found))

    def transform(self, src, anchor):
        _unused, loop, (init, append, ret) = anchor
        index = loop.target.id
        count = ast.get_source_segment(src, loop.iter.args[0])
        item = append.value.args[0].id
        edits = []
        start, end = segment(src, ret)
        edits.append((start, end, "%sreturn out\n" % indent_of(src, start)))
        start, end = segment(src, append)
        ind = indent_of(src, start)
        edits.append((start, end, (
            f"{ind}if out is None:\n"
            f"{ind}    out = torch.empty(({count},) + tuple({item}.shape), dtype={item}.dtype,\n"
            f"{ind}                      device={item}.device)\n"
            f"{ind}out[{index}].copy_({item})\n"
            f"{ind}del {item}\n")))
        start, end = segment(src, init)
        edits.append((start, end, "%sout = None  %s (one preallocated tensor, no concatenation)\n" % (
            indent_of(src, start), self.marker)))
        for start, end, text in sorted(edits, reverse=True):
            src = src[:start] + text + src[end:]
        return src

    def postcondition(self, src):
        tree = ast.parse(src)
        found = repackers(tree)
        if not found:
            return ["%s or its weight repack vanished" % FUNC]
        problems = []
        for fn, loop in found:
            if accumulation(fn, loop) is not None:
                problems.append("%s still accumulates a list and concatenates it" % fn.name)
            elif not preallocates(loop):
                problems.append("%s has no per-expert copy into a preallocated tensor" % fn.name)
        return problems
