# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""Patch 2: dispatch MXFP8 layers of a ModelOpt MIXED_PRECISION checkpoint to the MXFP8 linear method.

``ModelOptMixedPrecisionConfig.get_quant_method`` knew FP8 and NVFP4 (and W4A16_NVFP4) only, so festr2's
MXFP8 attention layers (``quant_algo: MXFP8``) fell through to ``UnquantizedLinearMethod`` and the model
answered "あるい...". The mixed config has no MXFP8 sub-config in these releases, so the patch adds one, built
lazily from the mixed config's own exclusions and KV-cache setting. vLLM 0.25 added the branch itself
(``if quant_algo == "MXFP8": return ModelOptMxFp8LinearMethod(self.mxfp8_config)``); 0.30 routes every
linear algorithm through a table (``LINEAR_ALGOS``) that includes MXFP8.

Structural rule: walk ``get_quant_method`` with the layer a ``LinearBase`` (not an Attention, not a MoE
layer), not excluded, and ``_resolve_quant_algo`` giving "MXFP8"; module-level tables such as LINEAR_ALGOS
are read, and a returned call to a same-file helper is followed one level with its arguments bound. When
every ``return`` reached gives ``UnquantizedLinearMethod`` (or None), the bug is on the path and the anchor
is that fall-through return; when every reached return builds a quantized method, it is fixed upstream; a
mix (a branch the facts cannot decide) cannot be judged.
"""

from __future__ import annotations

import ast

from . import cuda_path
from .engine import ABSENT, NEEDED, UPSTREAM, Patch, indent_of, segment

CLASS = "ModelOptMixedPrecisionConfig"
UNQUANTIZED = "UnquantizedLinearMethod"
NEEDS = ("ModelOptMxFp8LinearMethod", "ModelOptMxFp8Config")

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


def mxfp8_linear_exits(tree):
    """The returns get_quant_method reaches for an MXFP8 linear layer on GB10, or None without the method."""
    fn = cuda_path.method(tree, CLASS, "get_quant_method")
    if fn is None:
        return None
    facts = cuda_path.Facts(tree, calls={"_resolve_quant_algo": "MXFP8", "is_layer_excluded": False},
                            isinstance_true={"LinearBase"})
    exits, _unused = cuda_path.walk(fn.body, facts)
    return [e for e in exits if e.kind in ("return", "raise")]


def _quantizes(exit_, tree):
    """Does this exit hand the layer a quantized method? Follows a same-file helper one level."""
    if exit_.kind != "return" or cuda_path.returns_none(exit_) or cuda_path.returned_call(exit_) == UNQUANTIZED:
        return False
    name = cuda_path.returned_call(exit_)
    helper = cuda_path.functions(tree).get(name)
    if helper is None:
        return True
    inner, _unused = cuda_path.walk(helper.body, cuda_path.bind(exit_.node.value, helper, exit_.facts))
    return any(e.kind == "return" and not cuda_path.returns_none(e) and
               cuda_path.returned_call(e) != UNQUANTIZED for e in inner)


def _describe(exit_):
    v = exit_.node.value if exit_.kind == "return" else exit_.node.exc
    return "%s %s" % (exit_.kind, ast.unparse(v) if v is not None else "")


class ModeloptMxfp8Dispatch(Patch):
    id = "modelopt_mxfp8_dispatch"
    title = "MXFP8 branch in ModelOptMixedPrecisionConfig.get_quant_method"
    targets = ("model_executor/layers/quantization/modelopt.py",)
    looked_for = ("ModelOptMixedPrecisionConfig.get_quant_method whose MXFP8 linear path falls through to "
                  "UnquantizedLinearMethod, and the classes ModelOptMxFp8LinearMethod and ModelOptMxFp8Config")

    def judge(self, src, tree):
        exits = mxfp8_linear_exits(tree)
        if exits is None:
            return ABSENT, "no %s.get_quant_method in this file" % CLASS
        good = [e for e in exits if _quantizes(e, tree)]
        bad = [e for e in exits if e not in good]
        if good and not bad:
            return UPSTREAM, "an MXFP8 linear layer gets a quantized method: %s" % "; ".join(
                sorted({_describe(e) for e in good}))
        fallthrough = [e for e in bad if e.kind == "return" and cuda_path.returned_call(e) == UNQUANTIZED]
        if good or not fallthrough:
            return ABSENT, "cannot judge: for an MXFP8 linear layer get_quant_method may %s" % " or ".join(
                sorted({_describe(e) for e in exits})) if exits else "get_quant_method returns nothing for MXFP8"
        classes = cuda_path.classes(tree)
        missing = [n for n in NEEDS if n not in classes]
        if missing:
            return ABSENT, ("MXFP8 linear layers fall through to UnquantizedLinearMethod, but this file has no "
                            "class %s to dispatch them to" % " nor ".join(missing))
        return NEEDED, (cuda_path.method(tree, CLASS, "get_quant_method"), fallthrough[0].node), (
            "MXFP8 linear layers fell through to UnquantizedLinearMethod; they now get ModelOptMxFp8LinearMethod")

    def transform(self, src, anchor):
        method, fallthrough = anchor
        at = segment(src, fallthrough)[0]
        ind = indent_of(src, at)
        while True:  # above the comment lines that introduce the fall-through, if any
            prev = src.rfind("\n", 0, at - 1) + 1
            if at == 0 or not src[prev:at].strip().startswith("#") or indent_of(src, prev) != ind:
                break
            at = prev
        branch = (f'{ind}if quant_algo == "MXFP8":  {self.marker}\n'
                  f"{ind}    return ModelOptMxFp8LinearMethod(self._sparkfleet_mxfp8_config())\n")
        src = src[:at] + branch + src[at:]
        first = method.decorator_list[0] if method.decorator_list else method
        at = segment(src, first)[0]
        return src[:at] + HELPER.format(marker=self.marker) + src[at:]

    def postcondition(self, src):
        tree = ast.parse(src)
        problems = []
        exits = mxfp8_linear_exits(tree) or []
        if not any(cuda_path.returned_call(e) == "ModelOptMxFp8LinearMethod" and
                   "_sparkfleet_mxfp8_config" in ast.unparse(e.node.value) for e in exits if e.kind == "return"):
            problems.append("get_quant_method has no MXFP8 branch")
        if any(e.kind == "return" and cuda_path.returned_call(e) == UNQUANTIZED for e in exits):
            problems.append("an MXFP8 linear layer still falls through to UnquantizedLinearMethod")
        if cuda_path.method(tree, CLASS, "_sparkfleet_mxfp8_config") is None:
            problems.append("the MXFP8 sub-config helper is missing")
        return problems
