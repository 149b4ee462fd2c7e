# Copyright: sparkfleet maintainers. MIT License (see LICENSE).

from __future__ import annotations


class ModuleDocFragment:
    """A recipe's probes, as vllm_check and deploy_stamp take them (module_utils.endpoint.PROBE_OPTIONS). Each
    module adds whether the option is required, or its default."""

    DOCUMENTATION = r"""
options:
  probes:
    description: Prompts and what their answers must contain.
    type: list
    elements: dict
    suboptions:
      prompt:
        description: The prompt (or the user message for C(kind=chat)).
        type: str
        required: true
      expect_any:
        description: Words of which the answer must contain one (case-insensitive).
        type: list
        elements: str
        default: []
      kind:
        description: Completion or chat completion.
        type: str
        choices: [completion, chat]
        default: completion
      max_tokens:
        description: Tokens to generate.
        type: int
        default: 16
      scripts:
        description:
          - The Unicode scripts this probe's answer is written in, for a probe in another language than the
            others (for example C([han]) for Chinese, C([kana, han]) for Japanese). Defaults to the module's
            C(scripts) option where it has one, else C([latin]).
        type: list
        elements: str
"""
