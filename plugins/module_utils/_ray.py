# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""The one way this collection asks Ray about its cluster: Ray's own API, as JSON, inside the Ray container.

``ray list nodes`` needs the dashboard's state API, which we keep off (ShadowRay). The node table comes from
the GCS itself, through the GCS client that Ray's own CLI uses (``ray status``), at the address ``ray start``
wrote for this node. ``ray.init()`` would read the same table, but it first registers a driver (a job and a
core worker) with the cluster: measured on a simulated node, 1.4 s a read against 0.6 s, and every poll of a
joining worker would add a driver to a raylet that is still starting. A Ray without that client falls back
to ``ray.nodes()``.
"""

from __future__ import annotations

from ansible_collections.sparkfleet.vllm.plugins.module_utils import _docker

# The fields of ray.nodes() that this collection reads, under the names ray.nodes() gives them. argv[1]: the
# seconds the GCS has to answer. A Ray whose GCS client lacks this API (another release) reads through
# ray.init(); a GCS that does not answer, or refuses the token, fails the read either way.
NODES_SNIPPET = (
    "import json, os, sys\n"
    "timeout = float(sys.argv[1])\n"
    "table = None\n"
    "try:\n"
    "    from ray._raylet import GcsClient\n"
    "    from ray.core.generated.gcs_pb2 import GcsNodeInfo\n"
    "    alive = GcsNodeInfo.GcsNodeState.Value('ALIVE')\n"
    "except (ImportError, AttributeError, ValueError):\n"
    "    GcsClient = None\n"
    "if GcsClient is not None:\n"
    "    # Where ray start wrote the cluster's address (ray.init('auto') reads the same file).\n"
    "    current = os.path.join(os.environ.get('RAY_TMPDIR') or '/tmp', 'ray', 'ray_current_cluster')\n"
    "    try:\n"
    "        with open(current) as f:\n"
    "            address = f.read().strip()\n"
    "    except FileNotFoundError:\n"
    "        sys.exit('Could not find any running Ray instance on this node')\n"
    "    try:\n"
    "        client = GcsClient(address=address)\n"
    "        info = client.get_all_node_info(timeout=timeout)\n"
    "        table = [{'NodeID': n.node_id.hex(), 'Alive': n.state == alive,\n"
    "                  'NodeManagerAddress': n.node_manager_address, 'Resources': dict(n.resources_total)}\n"
    "                 for n in info.values()]\n"
    "    except (AttributeError, TypeError):\n"
    "        table = None\n"
    "if table is None:\n"
    "    import ray\n"
    "    ray.init(address='auto', logging_level='ERROR', log_to_driver=False)\n"
    "    keep = ('NodeID', 'Alive', 'NodeManagerAddress', 'Resources')\n"
    "    table = [{k: n.get(k) for k in keep} for n in ray.nodes()]\n"
    # On its own line: a message that Ray's client writes to stdout without a newline must not prefix it.
    "sys.stdout.write('\\n' + json.dumps(table) + '\\n')\n"
)

# Seconds the GCS has to answer a read of the node table when the caller names none.
GCS_TIMEOUT = 20


# Ray picks most of its ports at random. Pinned, they can be checked free before a deploy (preflight) and
# opened in a firewall: GCS on the head; on every node the raylet, the object manager, the agents and the
# worker range.
PORTS = {
    "node_manager": 6700,
    "object_manager": 6701,
    "metrics_export": 6702,
    "dashboard_agent_grpc": 6703,
    "runtime_env_agent": 6704,
    "dashboard_agent_listen": 6705,
    "min_worker": 10002,
    "max_worker": 10999,
}
PORT_NAMES = {
    "node_manager": "Ray node manager",
    "object_manager": "Ray object manager",
    "metrics_export": "Ray metrics export",
    "dashboard_agent_grpc": "Ray dashboard agent (gRPC)",
    "runtime_env_agent": "Ray runtime-env agent",
    "dashboard_agent_listen": "Ray dashboard agent (HTTP)",
}


def port_plan(gcs_port, ports=None):
    """Pure: the ports and ranges a Ray node holds, named, for the preflight check."""
    ports = dict(PORTS, **(ports or {}))
    single = [{"port": int(gcs_port), "what": "Ray GCS (head)", "head_only": True}]
    single += [{"port": int(ports[k]), "what": name, "head_only": False} for k, name in sorted(PORT_NAMES.items())]
    ranges = [{"from": int(ports["min_worker"]), "to": int(ports["max_worker"]), "what": "Ray worker ports"}]
    return single, ranges


def start_argv(role, node_ip, port, head_ip=None, num_gpus=None, num_cpus=None, object_store_memory=None,
               ports=None):
    """Pure: the `ray start` command line of a head or a worker."""
    ports = dict(PORTS, **(ports or {}))
    argv = ["ray", "start", "--node-ip-address", node_ip, "--disable-usage-stats", "--block"]
    argv += ["--node-manager-port", str(ports["node_manager"]), "--object-manager-port",
             str(ports["object_manager"]), "--metrics-export-port", str(ports["metrics_export"]),
             "--dashboard-agent-grpc-port", str(ports["dashboard_agent_grpc"]), "--runtime-env-agent-port",
             str(ports["runtime_env_agent"]), "--dashboard-agent-listen-port", str(ports["dashboard_agent_listen"]),
             "--min-worker-port", str(ports["min_worker"]), "--max-worker-port", str(ports["max_worker"])]
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


def nodes(container, timeout=None):
    """The cluster's node table as seen from this container; with ``timeout``, a GCS that does not answer
    within that many seconds fails the read (coreutils' timeout ends the client) instead of hanging it."""
    argv = ["python3", "-c", NODES_SNIPPET, str(int(timeout or GCS_TIMEOUT))]
    return _docker.exec_json(container, ["timeout", str(int(timeout))] + argv if timeout else argv)


def node_alive(table, ip):
    return any(n.get("Alive") and n.get("NodeManagerAddress") == ip for n in table)


def node_gpus(table, ip):
    """GPUs Ray registered for the alive node at ``ip`` (None when it is not alive)."""
    for n in table:
        if n.get("Alive") and n.get("NodeManagerAddress") == ip:
            return int((n.get("Resources") or {}).get("GPU", 0))
    return None
