import pytest

from ansible_collections.sparkfleet.vllm.plugins.filter.chain_next import chain_next
from ansible_collections.sparkfleet.vllm.plugins.filter.pick import pick
from ansible_collections.sparkfleet.vllm.plugins.module_utils import image_build
from ansible_collections.sparkfleet.vllm.plugins.module_utils._ray import start_argv
from ansible_collections.sparkfleet.vllm.plugins.module_utils.serve_plan import requested_moe_backend, serve_argv

KIMI_FLAGS = ["--trust-remote-code", "--max-model-len", "32768", "--gpu-memory-utilization", "0.85",
              "--enforce-eager", "--max-num-batched-tokens", "512", "--disable-custom-all-reduce",
              "--moe-backend", "triton"]


def test_seed_000_launch_shape():
    argv = serve_argv("/root/.cache/huggingface/hub/models--moonshotai--Kimi-K2.5/snapshots/54383e83fa343a1331754112fb9e3410c55efa2f",
                      "kimi-k2.5", 16, 1, 8001, "0.0.0.0", KIMI_FLAGS)
    assert argv[:3] == ["vllm", "serve", "/root/.cache/huggingface/hub/models--moonshotai--Kimi-K2.5/snapshots/"
                                         "54383e83fa343a1331754112fb9e3410c55efa2f"]
    joined = " ".join(argv)
    for piece in ("--served-model-name kimi-k2.5", "--tensor-parallel-size 16", "--distributed-executor-backend ray",
                  "--max-model-len 32768", "--gpu-memory-utilization 0.85", "--enforce-eager",
                  "--max-num-batched-tokens 512", "--disable-custom-all-reduce", "--host 0.0.0.0", "--port 8001",
                  "--moe-backend triton"):
        assert piece in joined
    assert requested_moe_backend(KIMI_FLAGS) == "triton"
    assert requested_moe_backend(["--moe-backend=marlin"]) == "marlin"
    assert requested_moe_backend([]) is None


@pytest.mark.parametrize("bad", [["--api-key", "sk-123"], ["--api-key=sk-123"]])
def test_api_key_never_on_argv(bad):
    with pytest.raises(ValueError) as err:
        serve_argv("/m", "m", 1, 1, 8000, "h", bad)
    assert "VLLM_API_KEY" in str(err.value) and "sk-123" not in str(err.value)


def test_owned_flags_are_refused():
    with pytest.raises(ValueError, match="--tensor-parallel-size"):
        serve_argv("/m", "m", 1, 1, 8000, "h", ["--tensor-parallel-size", "16"])


def test_ray_start_lines():
    head = start_argv("head", "10.0.0.1", 6379, num_gpus=1, num_cpus=2, object_store_memory=1073741824)
    assert head[:2] == ["ray", "start"] and "--head" in head and "--include-dashboard=false" in head
    assert head[head.index("--node-ip-address") + 1] == "10.0.0.1"
    worker = start_argv("worker", "10.0.0.2", 6379, head_ip="10.0.0.1")
    assert worker[worker.index("--address") + 1] == "10.0.0.1:6379" and "--num-gpus" not in worker
    assert "--block" in worker and "--disable-usage-stats" in worker


def test_tag_is_content_addressed():
    df = image_build.render("base:1", "sha256:aa", "2.60.0", [])
    t1 = image_build.tag_for("sparkfleet/vllm", "sha256:aa", "2.60.0", df, {})
    assert t1 == image_build.tag_for("sparkfleet/vllm", "sha256:aa", "2.60.0", df, {})
    assert t1 != image_build.tag_for("sparkfleet/vllm", "sha256:bb", "2.60.0", df, {})
    assert t1 != image_build.tag_for("sparkfleet/vllm", "sha256:aa", "2.59.0", df, {})
    df2 = image_build.render("base:1", "sha256:aa", "2.60.0", ["numpy==2.3.5"])
    assert "pip install --no-cache-dir numpy==2.3.5" in df2
    assert t1 != image_build.tag_for("sparkfleet/vllm", "sha256:aa", "2.60.0", df2, {})


def test_unpinned_pip_packages_are_refused():
    with pytest.raises(ValueError, match="numpy>=2"):
        image_build.render("b", "sha256:a", "2.60.0", ["numpy>=2"])


def test_filters():
    assert chain_next(["a", "b", "c"]) == {"a": "b", "b": "c", "c": ""}
    assert chain_next([]) == {}
    assert pick({"a": 1, "b": 2, "secret": "x"}, ["a", "c"]) == {"a": 1}


def test_bind_mounts():
    from ansible_collections.sparkfleet.vllm.plugins.module_utils import _docker

    got = _docker.binds(["/hf:/hf:ro", "/a:/b"], {"v": {"bind": "/tmp/ray", "mode": "rw"}})
    assert got == {"v": {"bind": "/tmp/ray", "mode": "rw"}, "/hf": {"bind": "/hf", "mode": "ro"},
                   "/a": {"bind": "/b", "mode": "rw"}}
    for bad in ("/only-one", "/a:/b:rx", ":/b"):
        with pytest.raises(_docker.DockerFailure, match="host_path:container_path"):
            _docker.binds([bad])
