# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""Patch 5 (opt-in): make compressed-tensors WNA16 MoE honour ``--moe-backend triton`` on CUDA.

``CompressedTensorsMoEMethod.get_moe_method`` binds ``CompressedTensorsWNA16MarlinMoEMethod`` whenever
Marlin supports the layer and the platform is not ROCm, whatever ``--moe-backend`` says. Kimi-K2.5 on GB10
then answers "foss foss foss" (seed 000). In 0.17-0.24 the request is silently ignored (0.24 reads
``kernel_config.moe_backend``, but only inside ``if current_platform.is_rocm():``). In 0.25-0.26 the Marlin
method's constructor asks the WNA16 oracle (``fused_moe/oracle/int_wna16.py::map_wna16_backend``), which
knows no "triton" and raises ``ValueError: moe_backend='triton' is not supported for WNA16 MoE``. The
patch adds the request to the condition that selects ``CompressedTensorsWNA16MoEMethod`` (the Triton path,
which does not consult the oracle in those releases), so the Marlin constructor never runs: 0.25-0.26 honour
triton once patched. From 0.27 the CUDA path always builds ``CompressedTensorsWNA16MoEMethod``, whose oracle
maps "triton": fixed upstream.

Structural rule: inside the WNA16 branch of ``get_moe_method`` (the ``if`` on
``quant_config._is_wNa16_group_channel(...)``), walk the if/elif/else tree under the GB10 facts with Marlin
supporting the layer and ``--moe-backend triton`` requested. A ``return`` of a ``*Marlin*MoEMethod`` that is
still reached is the bug; the anchor is the last decided ``if`` on its path whose other branch returns the
non-Marlin WNA16 method. No Marlin return reached, and a WNA16 method returned: fixed upstream.
"""

from __future__ import annotations

import ast

from . import cuda_path
from .engine import ABSENT, NEEDED, UPSTREAM, Patch, indent_of

OLD_TARGET = "model_executor/layers/quantization/compressed_tensors/compressed_tensors_moe.py"  # <= 0.19
NEW_TARGET = ("model_executor/layers/quantization/compressed_tensors/compressed_tensors_moe/"
              "compressed_tensors_moe.py")  # >= 0.20 (a package)
REQUEST = "_sparkfleet_requested_moe_backend"

HELPER = '''

def _sparkfleet_requested_moe_backend():  {marker}
    """The --moe-backend of the running engine, lower-cased ("" when unknown)."""
    try:
        from vllm.config import get_current_vllm_config

        return str(get_current_vllm_config().kernel_config.moe_backend or "").lower()
    except Exception:
        return ""
'''


def _gb10(tree, requested):
    return cuda_path.Facts(tree, calls={"check_moe_marlin_supports_layer": True, REQUEST: requested})


def wna16_branch(tree):
    """(get_moe_method, the If on ``_is_wNa16_group_channel``) or (None, None)."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "get_moe_method":
            for inner in ast.walk(node):
                if isinstance(inner, ast.If) and isinstance(inner.test, ast.Call) and \
                        cuda_path.callee(inner.test) == "_is_wNa16_group_channel":
                    return node, inner
    return None, None


def cuda_methods(tree, requested):
    """The exits of the WNA16 branch on GB10 that return a MoE method: [(class name, Exit)]."""
    _unused, branch = wna16_branch(tree)
    if branch is None:
        return None
    exits, _unused = cuda_path.walk(branch.body, _gb10(tree, requested))
    return [(cuda_path.returned_call(e), e) for e in exits
            if e.kind == "return" and (cuda_path.returned_call(e) or "").endswith("MoEMethod")]


def _is_marlin(name):
    return "Marlin" in (name or "")


class Wna16MoeBackend(Patch):
    id = "wna16_moe_backend"
    title = "compressed-tensors WNA16 MoE honours --moe-backend triton"
    targets = (NEW_TARGET, OLD_TARGET)
    looked_for = ("get_moe_method's WNA16 branch, where a decided `if` (e.g. `not check_moe_marlin_supports_layer(...) "
                  "or current_platform.is_rocm()`) chooses between the Marlin and the Triton WNA16 method on CUDA")
    opt_in = True

    def judge(self, src, tree):
        methods = cuda_methods(tree, "triton")
        if methods is None:
            return ABSENT, ("no get_moe_method with a WNA16 branch (`if quant_config._is_wNa16_group_channel(...)`) "
                            "in this file")
        marlin = [(n, e) for n, e in methods if _is_marlin(n)]
        others = sorted({n for n, _unused in methods if not _is_marlin(n)})
        if not marlin:
            if others:
                return UPSTREAM, ("on CUDA the WNA16 branch of get_moe_method returns %s only, never a Marlin-only "
                                  "method, so --moe-backend reaches the WNA16 oracle" % ", ".join(others))
            return ABSENT, "the WNA16 branch of get_moe_method returns no MoE method on CUDA"
        name, exit_ = marlin[0]
        for if_node, branch, decided in reversed(exit_.path):
            if not decided or branch != "orelse":
                continue
            facts = _gb10(tree, "triton")
            taken, _unused = cuda_path.walk(if_node.body, facts)
            if any(e.kind == "return" and (cuda_path.returned_call(e) or "").endswith("WNA16MoEMethod")
                   and not _is_marlin(cuda_path.returned_call(e)) for e in taken):
                return NEEDED, if_node, ("on CUDA the WNA16 branch bound %s whatever --moe-backend said; "
                                         "--moe-backend triton now selects the Triton WNA16 method" % name)
        return ABSENT, ("on CUDA the WNA16 branch returns %s whatever --moe-backend says, but no decided `if` on "
                        "that path has a branch returning the Triton WNA16 method to route the request to" % name)

    def transform(self, src, anchor):
        test = anchor.test
        lines = src.splitlines(keepends=True)
        offsets = [0]
        for line in lines:
            offsets.append(offsets[-1] + len(line))
        start = offsets[test.lineno - 1] + len(lines[test.lineno - 1].encode()[:test.col_offset].decode())
        end = offsets[test.end_lineno - 1] + len(lines[test.end_lineno - 1].encode()[:test.end_col_offset].decode())
        clause = '_sparkfleet_requested_moe_backend() == "triton"'
        before = src[:start].rstrip(" \t\n")
        after = src[end:].lstrip(" \t\n")
        if before.endswith("(") and after.startswith(")") and isinstance(test, ast.BoolOp) and \
                isinstance(test.op, ast.Or) and test.lineno != anchor.lineno:
            ind = indent_of(src, offsets[test.end_lineno - 1] + 1)
            src = src[:end] + "\n%sor %s  %s" % (ind, clause, self.marker) + src[end:]
        else:
            ind = indent_of(src, offsets[anchor.lineno - 1] + 1)
            src = src[:start] + "(\n%s    (%s)\n%s    or %s  %s\n%s)" % (
                ind, src[start:end], ind, clause, self.marker, ind) + src[end:]
        # After the last top-level import: the helper must exist before the method choice runs.
        tree = ast.parse(src)
        last_import = max((n.end_lineno for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))), default=0)
        cut = max(sum(len(x) for x in src.splitlines(keepends=True)[:last_import]) - 1, 0)
        return src[:cut] + HELPER.format(marker=self.marker) + src[cut:]

    def postcondition(self, src):
        tree = ast.parse(src)
        problems = []
        if "_sparkfleet_requested_moe_backend" not in cuda_path.functions(tree):
            problems.append("the backend reader is missing")
        methods = cuda_methods(tree, "triton")
        if methods is None:
            return problems + ["the WNA16 branch of get_moe_method vanished"]
        if any(_is_marlin(n) for n, _unused in methods) or not methods:
            problems.append("with --moe-backend triton the CUDA path still binds a Marlin-only method")
        if not any(_is_marlin(n) for n, _unused in cuda_methods(tree, "marlin") or ()):
            problems.append("without a triton request the CUDA path no longer binds Marlin (upstream's default)")
        return problems
