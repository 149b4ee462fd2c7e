# Copyright: sparkfleet maintainers. MIT License (see LICENSE).

from __future__ import annotations


class ModuleDocFragment:
    """The attributes every sparkfleet.vllm module declares; each module states its own support and details."""

    DOCUMENTATION = r"""
options: {}
attributes:
  check_mode:
    description: Can run in C(check_mode) and return changed status prediction without modifying target.
  diff_mode:
    description:
      - Will return details on what has changed (or possibly needs changing in C(check_mode)), when in diff
        mode.
  idempotent:
    description:
      - When run twice in a row outside check mode, with the same arguments, the second invocation indicates
        no change.
"""

    # With DOCUMENTATION, for a module that only reads (or only plans) and changes nothing anywhere.
    READ_ONLY = r"""
options: {}
attributes:
  check_mode:
    support: full
    details: Reads only; it runs the same in check mode.
  diff_mode:
    support: N/A
    details: Changes nothing, so there is nothing to compare.
  idempotent:
    support: full
    details: Changes nothing.
"""
