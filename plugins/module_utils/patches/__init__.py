# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""The catalogue of vLLM source patches. Ids are what recipes and the vllm_image module name."""

from __future__ import annotations

from .engine import ALREADY, APPLIED, FIXED, NOT_FOUND, PatchError, evaluate, run, vllm_version
from .p1_marlin_chunked_repack import MarlinChunkedRepack
from .p2_modelopt_mxfp8_dispatch import ModeloptMxfp8Dispatch
from .p3_mxfp8_scale_name import Mxfp8ScaleName
from .p4_mimo_qkv_split import MimoQkvSplit
from .p5_wna16_moe_backend import Wna16MoeBackend

CATALOGUE = {p.id: p for p in (MarlinChunkedRepack(), ModeloptMxfp8Dispatch(), Mxfp8ScaleName(), MimoQkvSplit(),
                               Wna16MoeBackend())}

__all__ = ["ALREADY", "APPLIED", "CATALOGUE", "FIXED", "NOT_FOUND", "PatchError", "evaluate", "run", "vllm_version"]


def select(ids):
    """Patches by id, in catalogue order; an unknown id raises ValueError naming the known ones."""
    unknown = [i for i in ids if i not in CATALOGUE]
    if unknown:
        raise ValueError("unknown patch id %s; known: %s" % (", ".join(unknown), ", ".join(CATALOGUE)))
    return [p for pid, p in CATALOGUE.items() if pid in ids]
