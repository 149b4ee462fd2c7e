# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""Patch 3: make festr2's ``weight_scale_inv`` tensors land in vLLM's ``weight_scale`` parameters.

The seed renamed the parameter inside ``ModelOptMxFp8LinearMethod.process_weights_after_loading``. That
only helps when the tensor was loaded at all, and MiMo's loader silently drops a name it does not know,
leaving the scale zero-filled ("ייך" output). The class is also gone from 0.30 on. The mapping is
therefore applied where the checkpoint's names meet the parameters: at the top of MiMo's weight-loading
loop, through ``_sparkfleet_scale_name`` (a pure function, tested in tests/unit). The bytes are forward
E8M0 scales; they are not flipped.
"""

from __future__ import annotations

import ast
import re

from . import qkv
from .engine import Patch, insert_function, segment

LOOP = re.compile(r"\n([ \t]+)for name, loaded_weight in weights:\n")


def model_load_weights(tree):
    """The MiMo model's own load_weights: the one that handles the fused qkv_proj."""
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        for fn in cls.body:
            if isinstance(fn, ast.FunctionDef) and fn.name == "load_weights":
                if any(isinstance(c, ast.Constant) and c.value == "qkv_proj" for c in ast.walk(fn)):
                    return cls, fn
    return None, None


class Mxfp8ScaleName(Patch):
    id = "mxfp8_scale_name"
    title = "map checkpoint weight_scale_inv to parameter weight_scale in MiMo's loader"
    target = "model_executor/models/mimo_v2.py"
    looked_for = ("a MiMo model class whose load_weights handles qkv_proj and loops "
                  "`for name, loaded_weight in weights:`")

    def fixed_upstream(self, src, tree):
        return None  # still needed in 0.34 (FIELD-NOTES §2)

    def locate(self, src, tree):
        _, fn = model_load_weights(tree)
        if fn is None:
            return None
        start, end = segment(src, fn)
        m = LOOP.search(src, start, end)
        return m if m else None

    def transform(self, src, m):
        ind = m.group(1) + "    "
        line = "%sname = _sparkfleet_scale_name(name, params_dict)  %s\n" % (ind, self.marker)
        src = src[: m.end()] + line + src[m.end():]
        return insert_function(src, qkv._sparkfleet_scale_name)

    def postcondition(self, src):
        problems = []
        if "def _sparkfleet_scale_name(" not in src:
            problems.append("the mapping function is missing")
        _, fn = model_load_weights(ast.parse(src))
        if fn is None or "_sparkfleet_scale_name(name, params_dict)" not in src[slice(*segment(src, fn))]:
            problems.append("load_weights does not map names")
        return problems
