# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""Patch 2: dispatch MXFP8 layers of a ModelOpt MIXED_PRECISION checkpoint to the MXFP8 linear method.

``ModelOptMixedPrecisionConfig.get_quant_method`` knew FP8 and NVFP4 only, so festr2's MXFP8 attention
layers (``quant_algo: MXFP8``) fell through to ``UnquantizedLinearMethod`` and the model answered
"あるい...". The mixed config has no MXFP8 sub-config in these releases, so the patch adds one, built
lazily from the mixed config's own exclusions and KV-cache setting. Later releases route every linear
algorithm through a table (``LINEAR_ALGOS``) that includes MXFP8.
"""

from __future__ import annotations

import ast
import re

from .engine import Patch, find_def, has_def, indent_of, segment

METHOD = "ModelOptMixedPrecisionConfig.get_quant_method"
NVFP4_LINEAR = re.compile(r'if quant_algo == "NVFP4":\n\s+return ModelOptNvFp4LinearMethod\(self\.nvfp4_config\)\n')

HELPER = '''\
    def _sparkfleet_mxfp8_config(self):  {marker}
        cfg = getattr(self, "_sparkfleet_mxfp8", None)
        if cfg is None:
            cfg = ModelOptMxFp8Config(
                is_checkpoint_mxfp8_serialized=True,
                kv_cache_quant_algo=self.kv_cache_quant_method,
                exclude_modules=self.exclude_modules,
            )
            self._sparkfleet_mxfp8 = cfg
        return cfg

'''


def _table_has_mxfp8(tree):
    for node in tree.body:
        targets = [node.target] if isinstance(node, ast.AnnAssign) else getattr(node, "targets", [])
        if any(isinstance(t, ast.Name) and t.id == "LINEAR_ALGOS" for t in targets):
            value = node.value
            if isinstance(value, ast.Dict):
                return any(isinstance(k, ast.Constant) and k.value == "MXFP8" for k in value.keys)
    return False


class ModeloptMxfp8Dispatch(Patch):
    id = "modelopt_mxfp8_dispatch"
    title = "MXFP8 branch in ModelOptMixedPrecisionConfig.get_quant_method"
    target = "model_executor/layers/quantization/modelopt.py"
    looked_for = "%s with an NVFP4 LinearBase branch, and class ModelOptMxFp8LinearMethod" % METHOD

    def fixed_upstream(self, src, tree):
        if _table_has_mxfp8(tree):
            return "linear algorithms are table-driven (LINEAR_ALGOS) and the table has MXFP8"
        node = find_def(tree, METHOD)
        if node is not None and '"MXFP8"' in src[slice(*segment(src, node))]:
            return "get_quant_method already handles MXFP8"
        return None

    def locate(self, src, tree):
        node = find_def(tree, METHOD)
        needed = ("ModelOptMxFp8LinearMethod", "ModelOptMxFp8Config")
        if node is None or not all(has_def(tree, name) for name in needed):
            return None
        start, end = segment(src, node)
        m = NVFP4_LINEAR.search(src, start, end)
        return (start, m.end()) if m else None

    def transform(self, src, anchor):
        method_start, insert_at = anchor
        ind = indent_of(src, src.rfind("if quant_algo", method_start, insert_at))
        branch = (f'{ind}if quant_algo == "MXFP8":  {self.marker}\n'
                  f"{ind}    return ModelOptMxFp8LinearMethod(self._sparkfleet_mxfp8_config())\n")
        src = src[:insert_at] + branch + src[insert_at:]
        return src[:method_start] + HELPER.format(marker=self.marker) + src[method_start:]

    def postcondition(self, src):
        tree = ast.parse(src)
        node = find_def(tree, METHOD)
        problems = []
        wanted = "ModelOptMxFp8LinearMethod(self._sparkfleet_mxfp8_config())"
        if node is None or wanted not in src[slice(*segment(src, node))]:
            problems.append("get_quant_method has no MXFP8 branch")
        if find_def(tree, "ModelOptMixedPrecisionConfig._sparkfleet_mxfp8_config") is None:
            problems.append("the MXFP8 sub-config helper is missing")
        return problems
