# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""Where festr2's MiMo-V2.5-Pro checkpoint meets vLLM's parameters: the MiMo model's weight-loading loop and
its path for a fused (Pro format) ``qkv_proj`` tensor. Shared by patches 3 and 4.

The file is ``models/mimo_v2.py`` from vLLM 0.21; before, ``models/mimo_v2_flash.py`` held only MiMo-V2-Flash,
whose loader has no fused qkv_proj path (MiMoV2ForCausalLM, the Pro architecture, is not registered there),
so the Pro checkpoint cannot load and neither patch has an anchor.
"""

from __future__ import annotations

import ast
from collections import namedtuple

from . import cuda_path

TARGETS = ("model_executor/models/mimo_v2.py", "model_executor/models/mimo_v2_flash.py")

# cls: the model class; fn: its load_weights; loop: `for name, loaded_weight in weights:`; fused: the `if`
# in that loop that takes the fused qkv_proj; method: the class's method the `if` calls (None when the
# `if` tests `"qkv_proj" in name` and loads in its own body).
Loader = namedtuple("Loader", "cls fn loop fused method")


def _str_operands(node):
    """String constants used as operands (call arguments, comparisons), not docstrings."""
    for n in ast.walk(node):
        if isinstance(n, ast.Call):
            args = list(n.args) + [k.value for k in n.keywords]
        elif isinstance(n, ast.Compare):
            args = [n.left, *n.comparators]
        else:
            continue
        for a in args:
            if isinstance(a, ast.Constant) and isinstance(a.value, str):
                yield a.value


def takes_qkv_names(fn):
    """Does a method pick out checkpoint names of the fused qkv_proj (``name.endswith("qkv_proj.weight")``)?"""
    return any("qkv_proj" in s for s in _str_operands(fn))


def weight_loops(tree):
    """[(class, load_weights, loop)] for every class whose load_weights loops over ``weights`` by name."""
    out = []
    for cls in cuda_path.classes(tree).values():
        fn = cuda_path.functions(cls).get("load_weights")
        if fn is None:
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.For) and isinstance(node.target, ast.Tuple) and len(node.target.elts) == 2 \
                    and all(isinstance(e, ast.Name) for e in node.target.elts):
                out.append((cls, fn, node))
                break
    return out


def pro_loader(tree):
    """The Loader of the MiMo model that takes a fused qkv_proj on GB10, else None."""
    facts = cuda_path.Facts(tree)
    for cls, fn, loop in weight_loops(tree):
        methods = cuda_path.functions(cls)
        for st in cuda_path.live_statements(loop.body, facts):
            if not isinstance(st, ast.If):
                continue
            test = st.test
            if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.In) and \
                    isinstance(test.left, ast.Constant) and "qkv_proj" in str(test.left.value):
                return Loader(cls, fn, loop, st, None)
            for call in (n for n in ast.walk(test) if isinstance(n, ast.Call)):
                if isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name) and \
                        call.func.value.id == "self" and call.func.attr in methods and \
                        takes_qkv_names(methods[call.func.attr]):
                    return Loader(cls, fn, loop, st, methods[call.func.attr])
    return None


def no_loader_detail(tree):
    loops = weight_loops(tree)
    if not loops:
        return "no model class here has a load_weights that loops over the checkpoint's tensors"
    return ("%s takes no fused qkv_proj (the MiMo-V2.5-Pro format, which models/mimo_v2.py loads from vLLM 0.21), "
            "so festr2's checkpoint cannot load with this release"
            % ", ".join("%s.load_weights" % cls.name for cls, _unused, _unused in loops))


def fused_reach(tree, loader):
    """Every node on the fused qkv_proj path that runs on GB10: the `if` body, the method it calls and the
    module-level functions of the same file they call (two calls deep)."""
    facts = cuda_path.Facts(tree)
    helpers = cuda_path.functions(tree)
    bodies = [loader.fused.body] + ([loader.method.body] if loader.method is not None else [])
    seen, nodes = set(), []
    for depth in range(3):
        calls = []
        for body in bodies:
            for node in cuda_path.live_nodes(body, facts):
                nodes.append(node)
                if isinstance(node, ast.Call):
                    calls.append(node)
        bodies = []
        if depth == 2:
            break
        for call in calls:
            name = cuda_path.callee(call) if isinstance(call.func, ast.Name) else None
            if name in helpers and name not in seen:
                seen.add(name)
                bodies.append(helpers[name].body)
    return nodes


def first_statement(fn):
    """The first statement of a function after its docstring."""
    body = fn.body
    if len(body) > 1 and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and \
            isinstance(body[0].value.value, str):
        return body[1]
    return body[0]


def assigned_in(fn, name):
    return any(isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and n.id == name for n in ast.walk(fn))
