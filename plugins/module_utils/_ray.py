# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""The one way this collection asks Ray about its cluster: Ray's own API, as JSON, inside the Ray container.

``ray list nodes`` needs the dashboard's state API, which we keep off (ShadowRay); ``ray.nodes()`` reads
the same table from the GCS directly.
"""

from __future__ import annotations

from ansible_collections.sparkfleet.vllm.plugins.module_utils import _docker

NODES_SNIPPET = (
    "import json, ray\n"
    "ray.init(address='auto', logging_level='ERROR', log_to_driver=False)\n"
    "keep = ('NodeID', 'Alive', 'NodeManagerAddress', 'Resources')\n"
    "print(json.dumps([{k: n.get(k) for k in keep} for n in ray.nodes()]))\n"
)


def start_argv(role, node_ip, port, head_ip=None, num_gpus=None, num_cpus=None, object_store_memory=None):
    """Pure: the `ray start` command line of a head or a worker."""
    argv = ["ray", "start", "--node-ip-address", node_ip, "--disable-usage-stats", "--block"]
    if role == "head":
        argv += ["--head", "--port", str(port), "--include-dashboard=false"]
    else:
        argv += ["--address", "%s:%s" % (head_ip, port)]
    if num_gpus is not None:
        argv += ["--num-gpus", str(num_gpus)]
    if num_cpus is not None:
        argv += ["--num-cpus", str(num_cpus)]
    if object_store_memory:
        argv += ["--object-store-memory", str(object_store_memory)]
    return argv


def nodes(container):
    """The cluster's node table as seen from this container."""
    return _docker.exec_json(container, ["python3", "-c", NODES_SNIPPET])


def node_alive(table, ip):
    return any(n.get("Alive") and n.get("NodeManagerAddress") == ip for n in table)
