# Copyright: sparkfleet maintainers. MIT License (see LICENSE).

from __future__ import annotations


class ModuleDocFragment:
    """What every module that drives a node's Docker engine needs and how it finds the engine."""

    DOCUMENTATION = r"""
options: {}
requirements:
  - Docker SDK for Python on the node (Debian C(python3-docker))
notes:
  - Talks to the node's own Docker engine through the Docker SDK (C(DOCKER_HOST) or the default socket).
    Containers the collection declares carry their spec's digest in a label; one is recreated only when
    its declaration changes.
"""
