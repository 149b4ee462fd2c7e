# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""Patch 3: make festr2's ``weight_scale_inv`` tensors land in vLLM's ``weight_scale`` parameters.

The seed renamed the parameter inside ``ModelOptMxFp8LinearMethod.process_weights_after_loading``. That
only helps when the tensor was loaded at all, and MiMo's loader silently drops a name it does not know,
leaving the scale zero-filled ("ייך" output). The class is also gone from 0.30 on. The mapping is
therefore applied where the checkpoint's names meet the parameters: at the top of MiMo's weight-loading
loop, through ``_sparkfleet_scale_name`` (a pure function, tested in tests/unit). The bytes are forward
E8M0 scales; they are not flipped.

Structural rule: find the MiMo model whose load_weights loop takes the fused (Pro format) qkv_proj
(mimo_loader.pro_loader; none before vLLM 0.21: anchor not found). If a statement of that loop on the GB10
path rebinds the loop's name from an expression about ``weight_scale_inv`` (directly, or through a function of
the same file), the release maps the name itself: fixed upstream. Otherwise the loop is the anchor. No
release up to 0.34 does.
"""

from __future__ import annotations

import ast

from . import cuda_path, mimo_loader, qkv
from .engine import ABSENT, NEEDED, UPSTREAM, Patch, indent_of, insert_function, segment

MAPPER = "_sparkfleet_scale_name"


def _mentions_inv(node):
    return any(isinstance(n, ast.Constant) and isinstance(n.value, str) and "weight_scale_inv" in n.value
               for n in ast.walk(node))


def maps_scale_name(tree, loader):
    """The statement of the loop that rebinds the checkpoint name from a weight_scale_inv rule, else None."""
    name = loader.loop.target.elts[0].id
    helpers = cuda_path.functions(tree)
    for st in cuda_path.live_statements(loader.loop.body, cuda_path.Facts(tree)):
        if st is loader.fused:
            break
        if isinstance(st, (ast.Assign, ast.AnnAssign)):
            targets = st.targets if isinstance(st, ast.Assign) else [st.target]
            if not any(isinstance(t, ast.Name) and t.id == name for t in targets) or st.value is None:
                continue
            if _mentions_inv(st.value):
                return st
            for call in (n for n in ast.walk(st.value) if isinstance(n, ast.Call)):
                fn = helpers.get(cuda_path.callee(call)) if isinstance(call.func, ast.Name) else None
                if fn is not None and _mentions_inv(fn):
                    return st
    return None


class Mxfp8ScaleName(Patch):
    id = "mxfp8_scale_name"
    title = "map checkpoint weight_scale_inv to parameter weight_scale in MiMo's loader"
    targets = mimo_loader.TARGETS
    looked_for = ("the MiMo model whose load_weights loop takes a fused qkv_proj, and its `params_dict`")

    def judge(self, src, tree):
        loader = mimo_loader.pro_loader(tree)
        if loader is None:
            return ABSENT, mimo_loader.no_loader_detail(tree)
        st = maps_scale_name(tree, loader)
        if st is not None:
            return UPSTREAM, "%s.load_weights maps checkpoint names itself: %s" % (
                loader.cls.name, ast.unparse(st).splitlines()[0])
        if not mimo_loader.assigned_in(loader.fn, "params_dict"):
            return ABSENT, "%s.load_weights has no params_dict to map names against" % loader.cls.name
        return NEEDED, loader, ("%s.load_weights matched checkpoint names to parameters as they came, so "
                                "weight_scale_inv never reached weight_scale; names are now mapped first"
                                % loader.cls.name)

    def transform(self, src, anchor):
        name = anchor.loop.target.elts[0].id
        at = segment(src, anchor.loop.body[0])[0]
        line = "%s%s = %s(%s, params_dict)  %s\n" % (indent_of(src, at), name, MAPPER, name, self.marker)
        src = src[:at] + line + src[at:]
        return insert_function(src, qkv._sparkfleet_scale_name)

    def postcondition(self, src):
        tree = ast.parse(src)
        problems = []
        if MAPPER not in cuda_path.functions(tree):
            problems.append("the mapping function is missing")
        loader = mimo_loader.pro_loader(tree)
        if loader is None:
            return problems + ["the MiMo loader's fused qkv_proj path vanished"]
        first = loader.loop.body[0]
        if not (isinstance(first, ast.Assign) and isinstance(first.value, ast.Call) and
                cuda_path.callee(first.value) == MAPPER):
            problems.append("load_weights does not map names before anything else in its loop")
        return problems
