# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""The validate_inputs module, run on the controller in-process (plugin_utils.in_process says why)."""

from __future__ import annotations

from ansible_collections.sparkfleet.vllm.plugins.modules.validate_inputs import ARGUMENT_SPEC, compute
from ansible_collections.sparkfleet.vllm.plugins.plugin_utils.in_process import action_for

ActionModule = action_for(ARGUMENT_SPEC, compute)
