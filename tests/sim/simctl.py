"""simctl: the simulated DGX Spark cluster that the tests and `make demo` run against.

This is a test bed. Every node is a Docker-in-Docker container with its own Docker engine, its own IP on a
user-defined bridge network and an sshd that Ansible reaches with a generated key, exactly as it reaches a
real Spark. Ray, the safetensors weights and the vLLM source files are real; only GPU inference is stood in
for by ``tests/sim/standin/vllm_standin.py``.

Commands:
  images            build (or reuse) the node image and the stand-in vLLM base image
  up --nodes N      start N nodes (node 0 is the Ray head), ship the base image and the checkpoints to node 0
  down              remove the nodes, their volumes and the network (cached images stay)
  status            print the nodes as JSON

Nothing here is imported by the collection: the collection only ever sees SSH hosts.
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

import docker
from docker.errors import ImageNotFound, NotFound

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
CACHE = Path(os.environ.get("SPARKFLEET_CACHE", Path.home() / ".cache" / "sparkfleet"))
STATE = Path(os.environ.get("SPARKFLEET_SIM_STATE", REPO / ".sim"))

NETWORK = "sparkfleet-sim"
SUBNET = "172.29.0.0/24"
GATEWAY = "172.29.0.1"
NODE_PREFIX = "sparkfleet-sim-node-"
FIRST_NODE_IP = 10  # node i gets 172.29.0.(10 + i)
MAX_NODES = 16
# Each node's memory limit: a "size" of the simulated Spark (a real one has 121 GiB of unified memory). The
# node's free memory, as the collection measures it, is what is left under this limit.
NODE_MEMORY = os.environ.get("SPARKFLEET_SIM_NODE_MEMORY", "6g")

DEBIAN_SUITE = "bookworm"
# inventory/local's sparkfleet_balancer_base_image.
BALANCER_BASE = "sparkfleet-sim/debian:" + DEBIAN_SUITE
DEBIAN_MIRROR = os.environ.get("SPARKFLEET_DEBIAN_MIRROR", "http://deb.debian.org/debian")
RAY_VERSION = os.environ.get("SPARKFLEET_SIM_RAY_VERSION", "2.60.0")
# The vLLM releases whose stand-in base images the head gets: the first is inventory/local's (MiMo needs
# its TRITON_ATTN_DIFFKV attention backend); 0.21.0 is the release of seed 004's patches and of seed 000's
# Marlin-bound WNA16 MoE path.
VLLM_VERSIONS = tuple(os.environ.get("SPARKFLEET_SIM_VLLM_VERSIONS", "0.34.0,0.21.0").split(","))
VLLM_VERSION = VLLM_VERSIONS[0]
BASE_IMAGE_REPO = "sparkfleet-sim/vllm-openai"

# Files of the real vLLM wheel that go into the stand-in base image besides every vllm/**/*.py file and the
# wheel's metadata (the compiled extensions need CUDA and stay out).
VLLM_SOURCE_PREFIXES = (
    "vllm/_version.py",
    "vllm/model_executor/layers/quantization/modelopt.py",
    "vllm/model_executor/layers/quantization/utils/marlin_utils_fp4.py",
    "vllm/model_executor/layers/quantization/compressed_tensors/",
    "vllm/model_executor/models/mimo_v2.py",
    # What the stand-in reads to be as strict as the release (its VllmSource, without importing vllm):
    # `vllm serve`'s parser (subcommand, frontend and engine args, FlexibleArgumentParser), the config
    # dataclasses whose fields and validators become flags and checks, the attention backend registry, the
    # quantization methods, the Literal types some frontend flags take their choices from, the VLLM_*
    # environment (envs.py, the platform's validate_environ) and DeviceConfig's "no platform" error.
    "vllm/engine/arg_utils.py",
    "vllm/utils/argparse_utils.py",
    "vllm/entrypoints/cli/serve.py",
    "vllm/entrypoints/openai/cli_args.py",
    "vllm/entrypoints/common/cli_args.py",
    "vllm/entrypoints/chat_utils.py",
    "vllm/renderers/chat_utils/__init__.py",
    "vllm/renderers/chat_utils/types.py",
    "vllm/tool_parsers/tool_strict_level.py",
    "vllm/config/",
    "vllm/envs.py",
    "vllm/platforms/interface.py",
    "vllm/v1/attention/backends/registry.py",
    "vllm/model_executor/layers/quantization/__init__.py",
    "vllm/model_executor/model_loader/tensorizer.py",
)

# The flags that make nested Docker work on these hosts (--privileged lacks one capability here).
NODE_HOST_CONFIG = {
    "cap_add": ["ALL"],
    "cap_drop": ["SYS_RESOURCE"],
    "security_opt": ["seccomp=unconfined", "apparmor=unconfined"],
    "cgroupns": "host",
}


def log(msg: str) -> None:
    print(f"[simctl] {msg}", file=sys.stderr, flush=True)


def digest(*parts: bytes | str) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode() if isinstance(part, str) else part)
        h.update(b"\0")
    return h.hexdigest()[:16]


def image_exists(client: docker.DockerClient, ref: str) -> bool:
    try:
        client.images.get(ref)
        return True
    except ImageNotFound:
        return False


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    log("$ " + " ".join(cmd))
    return subprocess.run(cmd, check=True, **kw)


# ----------------------------------------------------------------------------------------------- images
def ensure_rootfs_image(client: docker.DockerClient) -> str:
    """Debian root filesystem from debootstrap, imported as an image (no registry can be reached)."""
    tag = f"sparkfleet-sim/debian:{DEBIAN_SUITE}-{digest(DEBIAN_SUITE, DEBIAN_MIRROR, 'minbase-v1')}"
    if image_exists(client, tag):
        return tag
    tarball = CACHE / f"rootfs-{DEBIAN_SUITE}.tar"
    if not tarball.exists():
        with tempfile.TemporaryDirectory(prefix="sim-rootfs-", dir=CACHE) as tmp:
            root = Path(tmp) / "root"
            run(["debootstrap", "--variant=minbase", "--include=ca-certificates,python3",
                 DEBIAN_SUITE, str(root), DEBIAN_MIRROR])
            shutil.rmtree(root / "var/cache/apt/archives", ignore_errors=True)
            (root / "var/cache/apt/archives/partial").mkdir(parents=True, exist_ok=True)
            partial = tarball.with_suffix(".tar.part")
            run(["tar", "-C", str(root), "--numeric-owner", "-cf", str(partial), "."])
            partial.rename(tarball)
    repo, _unused, version = tag.partition(":")
    log(f"importing {tarball} as {tag}")
    client.api.import_image_from_file(str(tarball), repository=repo, tag=version)
    return tag


def build_image(client: docker.DockerClient, context: Path, tag: str, buildargs: dict) -> str:
    if image_exists(client, tag):
        return tag
    log(f"building {tag}")
    try:
        client.images.build(path=str(context), tag=tag, buildargs=buildargs, rm=True, network_mode="host")
    except docker.errors.BuildError as exc:
        for line in exc.build_log:
            if "stream" in line:
                sys.stderr.write(line["stream"])
        raise
    return tag


# The weights role's pinned huggingface_hub, which the node image holds already installed (see node/Dockerfile).
HUB_REQUIREMENTS = HERE.parents[1] / "roles" / "weights" / "files" / "hub-requirements.txt"


def ensure_node_image(client: docker.DockerClient) -> str:
    base = ensure_rootfs_image(client)
    src = HERE / "node"
    inputs = [p.read_bytes() for p in sorted(src.iterdir())] + [HUB_REQUIREMENTS.read_bytes()]
    tag = "sparkfleet-sim/node:" + digest(base, *inputs)
    if image_exists(client, tag):
        return tag
    with tempfile.TemporaryDirectory(prefix="sim-node-") as tmp:
        ctx = Path(tmp)
        for p in src.iterdir():
            shutil.copy(p, ctx / p.name)
        shutil.copy(HUB_REQUIREMENTS, ctx / "hub-requirements.txt")
        # pip inside a container reaches PyPI only with the host's CA bundle.
        shutil.copy("/etc/ssl/certs/ca-certificates.crt", ctx / "host-ca.crt")
        return build_image(client, ctx, tag, {"BASE": base})


def vllm_wheel(version: str) -> Path:
    """The real vLLM wheel from PyPI, downloaded once (no dependencies) into the cache."""
    wheels = CACHE / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    found = sorted(wheels.glob(f"vllm-{version}-*.whl"))
    if not found:
        run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary", ":all:",
             "--dest", str(wheels), f"vllm=={version}"])
        found = sorted(wheels.glob(f"vllm-{version}-*.whl"))
    if not found:
        raise SystemExit(f"vLLM {version}: no wheel arrived in {wheels}")
    return found[-1]


def extract_vllm_sources(wheel: Path, dest: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        for name in zf.namelist():
            # Every Python source file of the release (what a reader of the image's vLLM finds in a real
            # image), none of its compiled extensions (they need CUDA).
            keep = name.startswith(VLLM_SOURCE_PREFIXES) or (name.startswith("vllm/") and name.endswith(".py")) or (
                ".dist-info/" in name and name.rsplit("/", 1)[-1] in ("METADATA", "entry_points.txt")
            )
            if not keep or name.endswith("/"):
                continue
            # The dist-info is stored under a plain name so that importlib.metadata reports the version
            # without the RECORD of files the stand-in does not carry.
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(zf.read(name))


def ensure_vllm_base_image(client: docker.DockerClient, vllm_version: str = VLLM_VERSION) -> str:
    base = ensure_rootfs_image(client)
    wheel = vllm_wheel(vllm_version)
    src = HERE / "vllm_base"
    standin = HERE / "standin"
    inputs = [base, RAY_VERSION, wheel.name, inspect.getsource(extract_vllm_sources), repr(VLLM_SOURCE_PREFIXES)]
    inputs += [p.read_bytes() for p in sorted(src.iterdir()) if p.is_file()]
    inputs += [p.read_bytes() for p in sorted(standin.glob("*.py"))]
    tag = f"{BASE_IMAGE_REPO}:{vllm_version}-{digest(*inputs)}"
    if not image_exists(client, tag):
        with tempfile.TemporaryDirectory(prefix="sim-vllm-base-") as tmp:
            ctx = Path(tmp)
            for p in src.iterdir():
                if p.is_file():
                    shutil.copy(p, ctx / p.name)
            shutil.copytree(standin, ctx / "standin", ignore=shutil.ignore_patterns("__pycache__"))
            extract_vllm_sources(wheel, ctx / "site")
            # pip inside a container reaches PyPI only with the host's CA bundle.
            shutil.copy("/etc/ssl/certs/ca-certificates.crt", ctx / "ca-certificates.crt")
            build_image(client, ctx, tag, {"BASE": base, "RAY_VERSION": RAY_VERSION})
    # The short tag is what inventories name, as a user names vllm/vllm-openai:nightly.
    client.images.get(tag).tag(BASE_IMAGE_REPO, vllm_version)
    return f"{BASE_IMAGE_REPO}:{vllm_version}"


# ------------------------------------------------------------------------------------------------ nodes
def node_name(i: int) -> str:
    return f"{NODE_PREFIX}{i}"


def volume_name(i: int) -> str:
    return f"{node_name(i)}-docker"


def remove_node(client: docker.DockerClient, container) -> None:
    """A node and every volume it was given (its Docker engine's /var/lib/docker: images, layers)."""
    log(f"removing {container.name}")
    names = [m["Name"] for m in container.attrs.get("Mounts", []) if m.get("Type") == "volume"]
    container.remove(force=True, v=True)
    for vol in names:
        try:
            client.volumes.get(vol).remove(force=True)
        except NotFound:
            pass


def node_ip(i: int) -> str:
    return f"172.29.0.{FIRST_NODE_IP + i}"


def ensure_ssh_key() -> tuple[Path, str]:
    key = STATE / "ssh" / "id_ed25519"
    if not key.exists():
        key.parent.mkdir(parents=True, exist_ok=True)
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "sparkfleet-sim", "-f", str(key)])
    return key, key.with_suffix(".pub").read_text().strip()


def ensure_network(client: docker.DockerClient):
    try:
        return client.networks.get(NETWORK)
    except NotFound:
        ipam = docker.types.IPAMConfig(pool_configs=[docker.types.IPAMPool(subnet=SUBNET, gateway=GATEWAY)])
        return client.networks.create(NETWORK, driver="bridge", ipam=ipam)


def node_exec(container, cmd: list[str]) -> tuple[int, str]:
    res = container.exec_run(cmd, demux=False)
    return res.exit_code, (res.output or b"").decode(errors="replace")


def wait_node_ready(container, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        container.reload()
        if container.status != "running":
            raise SystemExit(f"{container.name} stopped: {container.logs(tail=20).decode(errors='replace')}")
        rc, last = node_exec(container, ["docker", "info", "--format", "{{.ServerVersion}}"])
        if rc == 0:
            return
        time.sleep(1)
    raise SystemExit(f"{container.name}: its Docker engine did not answer within {timeout:.0f}s: {last}")


def start_node(client: docker.DockerClient, i: int, image: str, pubkey: str):
    name = node_name(i)
    try:
        container = client.containers.get(name)
        env = container.attrs.get("Config", {}).get("Env") or []
        if container.image.id == client.images.get(image).id and f"SIM_AUTHORIZED_KEY={pubkey}" in env:
            if container.status != "running":
                log(f"starting the stopped node {name}")
                container.start()
            return container
        log(f"{name} runs an older node image or another checkout's key: recreating it (its Docker engine's "
            "volume stays)")
        container.remove(force=True)
    except NotFound:
        pass
    ensure_network(client)
    api = client.api
    host_config = api.create_host_config(
        binds={volume_name(i): {"bind": "/var/lib/docker", "mode": "rw"},
               "/sys/fs/cgroup": {"bind": "/sys/fs/cgroup", "mode": "rw"}},
        network_mode=NETWORK,
        mem_limit=NODE_MEMORY,
        **NODE_HOST_CONFIG,
    )
    # `--security-opt systempaths=unconfined` is a CLI shorthand for empty masked/read-only path lists;
    # the SDK has no keyword for them, so they are set on the HostConfig directly.
    host_config["MaskedPaths"] = []
    host_config["ReadonlyPaths"] = []
    networking = api.create_networking_config({NETWORK: api.create_endpoint_config(ipv4_address=node_ip(i))})
    created = api.create_container(
        image, name=name, hostname=f"spark-{i:02d}", detach=True,
        environment={"SIM_AUTHORIZED_KEY": pubkey},
        labels={"sparkfleet.sim": "node", "sparkfleet.sim.index": str(i)},
        host_config=host_config, networking_config=networking,
    )
    api.start(created["Id"])
    return client.containers.get(created["Id"])


def image_id_in_node(container, ref: str) -> str:
    rc, out = node_exec(container, ["docker", "image", "inspect", "--format", "{{.Id}}", ref])
    return out.strip() if rc == 0 else ""


def ship_image(client: docker.DockerClient, container, ref: str) -> None:
    """docker save on the test host | docker load in the node's engine, as a user ships a base image."""
    want = client.images.get(ref).id
    if image_id_in_node(container, ref) == want:
        return
    log(f"shipping {ref} into {container.name}")
    # A pipe between two CLIs: the SDK's exec API has no streaming stdin.
    save = subprocess.Popen(["docker", "save", ref], stdout=subprocess.PIPE)
    subprocess.run(["docker", "exec", "-i", container.name, "docker", "load", "--quiet"],
                   stdin=save.stdout, check=True, stdout=subprocess.DEVNULL)
    if save.wait() != 0:
        raise SystemExit(f"docker save {ref} failed")
    got = image_id_in_node(container, ref)
    if got != want:
        raise SystemExit(f"{container.name}: {ref} loaded as {got or 'nothing'}, expected {want}")


def ship_checkpoint(container, hub_dir: Path) -> None:
    """Copy a Hugging Face cache tree (symlinks included) into the node's cache."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for child in sorted(hub_dir.iterdir()):
            tar.add(child, arcname=child.name)  # tarfile keeps the snapshot symlinks as links
    node_exec(container, ["mkdir", "-p", "/root/.cache/huggingface/hub"])
    container.put_archive("/root/.cache/huggingface/hub", buf.getvalue())


def write_state(nodes: list[dict], key: Path, base_image: str, checkpoints: dict) -> None:
    STATE.mkdir(parents=True, exist_ok=True)
    state = {"nodes": nodes, "ssh_key": str(key), "base_image": base_image, "checkpoints": checkpoints}
    (STATE / "state.json").write_text(json.dumps(state, indent=2) + "\n")


def cmd_images(args) -> None:
    client = docker.from_env()
    print(json.dumps({"node": ensure_node_image(client),
                      "vllm_base": [ensure_vllm_base_image(client, v) for v in VLLM_VERSIONS]}))


def cmd_up(args) -> None:
    if not 1 <= args.nodes <= MAX_NODES:
        raise SystemExit(f"--nodes must be 1..{MAX_NODES}, got {args.nodes}")
    client = docker.from_env()
    node_image = ensure_node_image(client)
    base_images = [ensure_vllm_base_image(client, v) for v in VLLM_VERSIONS]
    key, pubkey = ensure_ssh_key()
    sys.path.insert(0, str(HERE))
    import make_checkpoint

    ckpts = {f: make_checkpoint.ensure_cached(CACHE / "checkpoints", flavour=f) for f in make_checkpoint.FLAVOURS}
    for extra in client.containers.list(all=True, filters={"label": "sparkfleet.sim=node"}):
        if int(extra.labels.get("sparkfleet.sim.index", "0")) >= args.nodes:
            log(f"{extra.name} is beyond --nodes {args.nodes}")
            remove_node(client, extra)
    containers = [start_node(client, i, node_image, pubkey) for i in range(args.nodes)]
    for c in containers:
        wait_node_ready(c)
    for base_image in base_images:
        ship_image(client, containers[0], base_image)
    # The balancer's base (Debian, as debian:bookworm-slim is on a real node): the rootfs image under the
    # name inventory/local gives it, on the node that inventory names for the balancer.
    rootfs = ensure_rootfs_image(client)
    ship_image(client, containers[0], rootfs)
    node_exec(containers[0], ["docker", "tag", rootfs, BALANCER_BASE])
    for ckpt in ckpts.values():  # the head is the seed node of every checkpoint
        ship_checkpoint(containers[0], Path(ckpt["hub_dir"]))
    nodes = [{"name": c.name, "ip": node_ip(i), "index": i} for i, c in enumerate(containers)]
    write_state(nodes, key, base_images[0], ckpts)
    print(json.dumps({"nodes": nodes, "base_images": base_images,
                      "checkpoints": {f: [c["repo_id"], c["revision"]] for f, c in ckpts.items()}}, indent=2))


def cmd_down(args) -> None:
    client = docker.from_env()
    for c in client.containers.list(all=True, filters={"label": "sparkfleet.sim=node"}):
        remove_node(client, c)
    for i in range(MAX_NODES):  # volumes of nodes whose containers are already gone
        try:
            client.volumes.get(volume_name(i)).remove(force=True)
        except NotFound:
            pass
    try:
        client.networks.get(NETWORK).remove()
    except NotFound:
        pass
    (STATE / "state.json").unlink(missing_ok=True)


def cmd_status(args) -> None:
    client = docker.from_env()
    rows = [
        {"name": c.name, "status": c.status, "index": int(c.labels.get("sparkfleet.sim.index", -1))}
        for c in client.containers.list(all=True, filters={"label": "sparkfleet.sim=node"})
    ]
    print(json.dumps(sorted(rows, key=lambda r: r["index"]), indent=2))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="simctl", description=__doc__.split("\n", maxsplit=1)[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("images").set_defaults(fn=cmd_images)
    up = sub.add_parser("up")
    up.add_argument("--nodes", type=int, default=4)
    up.set_defaults(fn=cmd_up)
    sub.add_parser("down").set_defaults(fn=cmd_down)
    sub.add_parser("status").set_defaults(fn=cmd_status)
    args = parser.parse_args(argv)
    CACHE.mkdir(parents=True, exist_ok=True)
    args.fn(args)


if __name__ == "__main__":
    main()
