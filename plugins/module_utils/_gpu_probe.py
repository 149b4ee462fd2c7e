# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""Is the GPU visible in a container that asks for it, and invisible in one that does not?

Both are asked of the node's Docker engine with a throwaway container running ``nvidia-smi -L``, the way the
NVIDIA Container Toolkit is checked by hand. The probe asks for the GPU exactly as every container of the
collection does (``_docker.gpu_request``). Probe containers are always removed.
"""

from __future__ import annotations

from ansible_collections.sparkfleet.vllm.plugins.module_utils import _docker

PROBE_LABELS = {"sparkfleet.role": "probe"}


def probe(cli, image, argv, with_gpu):
    """Run argv in a throwaway container; (exit code, output). The container is always removed."""
    kwargs = {"entrypoint": [], "network_mode": "none", "labels": PROBE_LABELS}
    if with_gpu:
        kwargs["device_requests"] = _docker.gpu_request()
    container = cli.containers.create(image, argv, **kwargs)
    try:
        try:
            container.start()
        except _docker.APIError as exc:
            return 127, str(getattr(exc, "explanation", exc) or exc)
        rc = container.wait(timeout=120).get("StatusCode", 1)
        return rc, _docker.logs(container)
    finally:
        container.remove(force=True)


def gpu_in_containers(cli, images):
    image = next((ref for ref in images if _docker.image_id(cli, ref)), None)
    if image is None:
        return ({"visible": False, "deferred": True, "error": "no image on this node yet"},
                {"visible": False, "deferred": True})
    rc, out = probe(cli, image, ["nvidia-smi", "-L"], True)
    count = len([x for x in out.splitlines() if x.startswith("GPU ")])
    with_req = {"visible": rc == 0 and count > 0, "count": count, "image": image,
                "error": None if rc == 0 else out.strip()[-300:]}
    rc, out = probe(cli, image, ["nvidia-smi", "-L"], False)
    without = {"visible": rc == 0 and "GPU " in out, "image": image}
    return with_req, without
