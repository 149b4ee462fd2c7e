# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""Patch 5 (opt-in): make compressed-tensors WNA16 MoE honour ``--moe-backend triton``.

vLLM 0.17-0.24 choose ``CompressedTensorsWNA16MarlinMoEMethod`` whenever Marlin supports the layer, and
ignore the requested backend: Kimi-K2.5 on GB10 then answers "foss foss foss" (seed 000). The patch adds
the request to the condition that selects ``CompressedTensorsWNA16MoEMethod`` (the Triton path).
Releases from 0.25 read ``kernel_config.moe_backend`` in this file themselves (0.25-0.26 refuse triton
with a ValueError; 0.27 on honour it), so the patch reports them as fixed upstream.
"""

from __future__ import annotations

import ast
import re

from .engine import Patch

COND = re.compile(
    r"(?P<ind>[ \t]+)not check_moe_marlin_supports_layer\(layer, group_size\)\n"
    r"(?P<ind2>[ \t]+)or current_platform\.is_rocm\(\)\n")

HELPER = '''

def _sparkfleet_requested_moe_backend():  {marker}
    """The --moe-backend of the running engine, lower-cased ("" when unknown)."""
    try:
        from vllm.config import get_current_vllm_config

        return str(get_current_vllm_config().kernel_config.moe_backend or "").lower()
    except Exception:
        return ""
'''


class Wna16MoeBackend(Patch):
    id = "wna16_moe_backend"
    title = "compressed-tensors WNA16 MoE honours --moe-backend triton"
    target = ("model_executor/layers/quantization/compressed_tensors/compressed_tensors_moe/"
              "compressed_tensors_moe.py")
    opt_in = True
    looked_for = ("the WNA16 Marlin condition `not check_moe_marlin_supports_layer(layer, group_size) or "
                  "current_platform.is_rocm()`")

    def fixed_upstream(self, src, tree):
        if "kernel_config.moe_backend" in src:
            return "this release reads kernel_config.moe_backend when choosing the MoE method"
        return None

    def locate(self, src, tree):
        return COND.search(src)

    def transform(self, src, m):
        added = '%sor _sparkfleet_requested_moe_backend() == "triton"  %s\n' % (m.group("ind2"), self.marker)
        src = src[: m.end()] + added + src[m.end():]
        # After the last top-level import: the helper must exist before the method choice runs.
        tree = ast.parse(src)
        last_import = max(n.end_lineno for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom)))
        cut = sum(len(x) for x in src.splitlines(keepends=True)[:last_import]) - 1
        return src[:cut] + HELPER.format(marker=self.marker) + src[cut:]

    def postcondition(self, src):
        problems = []
        if "def _sparkfleet_requested_moe_backend(" not in src:
            problems.append("the backend reader is missing")
        if '_sparkfleet_requested_moe_backend() == "triton"' not in src:
            problems.append("the Triton request is not part of the method choice")
        return problems
