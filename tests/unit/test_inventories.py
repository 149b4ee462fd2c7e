"""The simulated inventory is the 16-node one with other addresses, sizes, base image and checkpoint: nothing
that a real Spark needs may be switched off in it to make the simulation pass."""

from pathlib import Path

import yaml

INV = Path(__file__).resolve().parents[2] / "inventory"

# What inventory/local may set differently from inventory/spark16, and why.
ALLOWED = {
    "sparkfleet_base_image": "the base image",
    "sparkfleet_vllm_version": "the base image (the release inside it)",
    "sparkfleet_model_repo_id": "the checkpoint",
    "sparkfleet_model_revision": "the checkpoint",
    "sparkfleet_ray_object_store_memory": "sizes (a 24 GiB test host)",
    "sparkfleet_ray_shm_size": "sizes",
    "sparkfleet_kv_cache_gib": "sizes",
    "sparkfleet_memory_margin_gib": "sizes",
    "sparkfleet_balancer_node": "a host name (the head's, in both)",
    "sparkfleet_balancer_base_image": "the balancer's base image (no registry: the simulated nodes' Debian)",
}
# Per-host keys: addresses.
HOST_KEYS = {"ansible_host", "sparkfleet_node_ip"}


def group_vars(name):
    out = {}
    for path in sorted((INV / name / "group_vars").rglob("*.yml")):
        out.update({(path.parent.name, k): v for k, v in (yaml.safe_load(path.read_text()) or {}).items()})
    return out


def test_local_differs_from_spark16_only_in_allowed_settings():
    local, spark = group_vars("local"), group_vars("spark16")
    differing = {k for k in set(local) | set(spark) if local.get(k) != spark.get(k)}
    # local's connection settings (key file, ssh args for generated host keys) are addresses of a kind
    differing -= {k for k in differing if k[0] == "spark_cluster" and k[1].startswith("ansible_")}
    assert {k[1] for k in differing} <= set(ALLOWED), sorted(k[1] for k in differing if k[1] not in ALLOWED)


def test_no_gpu_faking_anywhere():
    for name in ("local", "spark8", "spark16"):
        for (_unused, key) in group_vars(name):
            assert "num_gpus" not in key and "gpu_required" not in key, (name, key)


def hosts(name):
    data = yaml.safe_load((INV / name / "hosts.yml").read_text())["all"]
    groups = data["children"]["spark_cluster"]["children"]
    return data.get("hosts", {}), {g: groups[g]["hosts"] for g in groups}


def test_same_shape_of_hosts():
    local_top, local = hosts("local")
    spark_top, spark = hosts("spark16")
    assert local_top == spark_top  # the controller entry
    assert set(local) == set(spark) == {"ray_head", "ray_workers"}
    for group in local:
        for host in local[group].values():
            assert set(host) == HOST_KEYS
        for host in spark[group].values():
            assert set(host) == HOST_KEYS
