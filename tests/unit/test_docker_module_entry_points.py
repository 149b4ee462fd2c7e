"""The Docker-bound modules called through their entry point, as Ansible's own module tests call modules.

The Docker engine is a fake of the Docker SDK's client API (``docker.from_env``: ping, containers.get/run,
images.get, a container's reload/logs/exec_run/attrs), so these tests need no engine; what they check is the
modules' own behaviour: polling, check mode, diffs, secrets and failure messages.
"""

import datetime
import hashlib
import json
import os
import socket
import subprocess
import sys
import time

import docker
import pytest
from docker.errors import ImageNotFound, NotFound
from module_runner import run

from ansible_collections.sparkfleet.vllm.plugins.module_utils import serve_plan
from ansible_collections.sparkfleet.vllm.plugins.modules import ray_gate, ray_node, rollout, vllm_boot, vllm_server


def stamp(t):
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Exec:
    def __init__(self, exit_code, output):
        self.exit_code, self.output = exit_code, output


class Container:
    def __init__(self, name, image="img:1", command=None, environment=None, labels=None, started=None):
        self.name, self.id, self.status = name, "id-%s-%d" % (name, id(self)), "running"
        self.labels = labels or {}
        self.lines, self.tables, self.stopped = [], [], False
        self.attrs = {"State": {"StartedAt": stamp(started or time.time())},
                      "Config": {"Image": image, "Cmd": command,
                                 "Env": ["%s=%s" % kv for kv in (environment or {}).items()] + ["PATH=/usr/bin"]}}

    def reload(self):
        pass

    def logs(self, stdout=True, stderr=True, timestamps=False, since=None, tail=None):
        lines = [(t, text) for t, text in self.lines if since is None or t >= since]
        if tail:
            lines = lines[-tail:]
        return "".join("%s%s\n" % (stamp(t) + " " if timestamps else "", text) for t, text in lines).encode()

    def exec_run(self, argv, demux=False, environment=None):
        if not self.tables:
            return Exec(0, (json.dumps(self.engine.ray_table).encode(), b""))
        table = self.tables.pop(0) if len(self.tables) > 1 else self.tables[0]
        return Exec(0, (json.dumps(table).encode(), b""))

    def stop(self, timeout=10):
        self.stopped, self.status = True, "exited"

    def remove(self, force=False):
        self.engine.containers.items.pop(self.name, None)

    def rename(self, name):
        items = self.engine.containers.items
        if name in items:
            raise docker.errors.APIError("Conflict. The container name %s is already in use" % name)
        items[name] = items.pop(self.name)
        self.name = name

    def start(self):
        self.stopped, self.status = False, "running"

    @property
    def image(self):
        return Image(self.attrs["Config"]["Image"])


class Image:
    def __init__(self, ref):
        self.id, self.attrs = "sha256:" + "ab" * 32, {"Config": {"Env": ["PATH=/usr/bin"]}}


class Containers:
    def __init__(self, engine):
        self.engine, self.items, self.runs = engine, {}, []

    def get(self, name):
        if name not in self.items:
            raise NotFound("No such container: %s" % name)
        return self.items[name]

    def run(self, name, detach, **kwargs):
        self.runs.append(dict(kwargs, name=name))
        return self.add(Container(name, kwargs["image"], kwargs.get("command"), kwargs.get("environment"),
                                  kwargs.get("labels")))

    def add(self, container):
        container.engine = self.engine
        self.items[container.name] = container
        return container


class Images:
    def __init__(self, present):
        self.present = present

    def get(self, ref):
        if ref not in self.present:
            raise ImageNotFound("No such image: %s" % ref)
        return Image(ref)


class Volume:
    def __init__(self, opts):
        self.attrs = {"Options": opts}


class Volumes:
    def __init__(self):
        self.items = {}

    def get(self, name):
        if name not in self.items:
            raise NotFound("No such volume: %s" % name)
        return self.items[name]

    def create(self, name, driver, driver_opts):
        self.items[name] = Volume(driver_opts)


class Engine:
    def __init__(self):
        self.containers, self.images = Containers(self), Images({"img:1", "img:2"})
        self.volumes = Volumes()
        self.ray_table = []  # what every Ray container's `nodes` query returns

    def ping(self):
        return True


@pytest.fixture
def engine(monkeypatch):
    fake = Engine()
    monkeypatch.setattr(docker, "from_env", lambda **kw: fake)
    # The fabric: every address answers (refuses: nothing listens in a unit test) unless a test cuts it off.
    fake.silent = set()

    def connect(address, timeout=None):
        if address[0] in fake.silent:
            raise socket.timeout("timed out")
        raise ConnectionRefusedError(111, "Connection refused")

    monkeypatch.setattr(socket, "create_connection", connect)
    return fake


def node(ip, gpus=1, alive=True):
    return {"Alive": alive, "NodeManagerAddress": ip, "Resources": {"GPU": float(gpus)}}


IPS = ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"]


def test_ray_gate_reports_a_late_node_poll_by_poll_then_passes(engine):
    head = engine.containers.add(Container("sparkfleet-ray"))
    head.tables = [[node(ip) for ip in IPS[:3]], [node(ip) for ip in IPS[:3]], [node(ip) for ip in IPS]]
    args = {"nodes": 4, "gpus": 4, "expected_ips": IPS, "poll_seconds": 1, "interval": 1, "started_at": time.time()}
    rc, first = run(ray_gate, args)
    assert rc == 0 and first["done"] is False
    assert first["progress"].startswith("Ray gate: 3/4 nodes alive, 3/4 GPUs; not joined: 10.0.0.4 (")
    rc, second = run(ray_gate, args)
    assert rc == 0 and second["done"] is True and second["summary"]["alive"] == 4


def test_ray_gate_names_a_node_that_ray_lists_alive_but_gives_no_answer_over_the_fabric(engine):
    head = engine.containers.add(Container("sparkfleet-ray"))
    head.tables = [[node(ip) for ip in IPS]]
    engine.silent = {"10.0.0.3"}
    names = {ip: "spark-%02d" % i for i, ip in enumerate(IPS)}
    rc, res = run(ray_gate, {"nodes": 4, "gpus": 4, "expected_ips": IPS, "node_names": names})
    assert rc == 1, res
    assert res["msg"] == ("Ray lists every node alive, but the head gets no answer over the fabric from spark-02 "
                          "(10.0.0.3): port 6700, no answer in 5 s; Ray drops a silent node only after minutes. "
                          "Check the firewall and fabric link of each, then run the deploy again")
    engine.silent = set()
    rc, res = run(ray_gate, {"nodes": 4, "gpus": 4, "expected_ips": IPS, "node_names": names})
    assert rc == 0 and res["done"] is True


def test_a_worker_cut_off_from_the_head_fails_at_once_and_starts_nothing(engine):
    engine.silent = {"10.0.0.1"}
    rc, res = run(ray_node, {"role": "worker", "image": "img:1", "node_ip": "10.0.0.2", "head_ip": "10.0.0.1"})
    assert rc == 1
    assert res["msg"] == ("this node (10.0.0.2) cannot reach the Ray head 10.0.0.1:6379 over the fabric (no answer "
                          "in 5 s): check this node's firewall and its fabric link, then run the deploy again")
    assert "sparkfleet-ray" not in engine.containers.items


def test_ray_gate_fails_once_its_timeout_has_passed_since_it_began(engine):
    head = engine.containers.add(Container("sparkfleet-ray"))
    head.tables = [[node(ip) for ip in IPS[:3]]]
    rc, res = run(ray_gate, {"nodes": 4, "gpus": 4, "expected_ips": IPS, "poll_seconds": 20, "timeout": 600,
                             "started_at": time.time() - 601})
    assert rc == 1 and "Ray cluster gate: not ready after 600s" in res["msg"]
    assert "not joined: 10.0.0.4" in res["msg"]


def test_vllm_boot_follows_in_polls_and_saves_its_place_only_outside_check_mode(engine, tmp_path):
    t0 = time.time() - 30
    serve = engine.containers.add(Container("sparkfleet-vllm", started=t0))
    serve.lines = [(t0 + 1, "INFO 12-03 18:00:01 [api_server.py:1] vLLM server version 0.34.0, serving model /m"),
                   (t0 + 2, "(EngineCore_DP0 pid=1) INFO 12-03 18:00:02 [ray_utils.py:1] Using the existing placement "
                            "group")]
    args = {"host": "10.0.0.1", "poll_seconds": 0, "min_free_memory_mib": 0, "state_dir": str(tmp_path)}
    rc, res = run(vllm_boot, args, check_mode=True)
    assert rc == 0 and res["done"] is False and res["stage"] == "Ray placement"
    assert not os.listdir(tmp_path)  # check mode keeps no state on the node
    rc, res = run(vllm_boot, args)
    assert rc == 0 and res["progress"].startswith("vllm serve on 10.0.0.1: Ray placement (")
    assert os.listdir(tmp_path) == ["sparkfleet-vllm.boot.json"]
    serve.lines.append((t0 + 25, "(APIServer pid=1) INFO:     Application startup complete."))
    rc, res = run(vllm_boot, args)
    # The boot's length is read from the log: the container's start to the line that says it serves.
    assert rc == 0 and res["done"] is True and res["stage"] == "serving" and res["boot"]["boot_s"] == 25.0
    assert res["boot"]["phases"] == ["ray_placement", "app_started"]


def test_vllm_boot_stops_a_starving_boot_and_names_the_figures(engine, tmp_path, monkeypatch):
    serve = engine.containers.add(Container("sparkfleet-vllm"))
    serve.lines = [(time.time(), "(EngineCore_DP0 pid=1) INFO 12-03 18:00:02 [gpu_model_runner.py:1] Starting to "
                                 "load model /m...")]
    from ansible_collections.sparkfleet.vllm.plugins.module_utils import memory

    monkeypatch.setattr(memory, "read", lambda: {"available_bytes": 512 * 2**20})
    rc, res = run(vllm_boot, {"poll_seconds": 2, "min_free_memory_mib": 2048, "memory_grace": 0,
                              "state_dir": str(tmp_path)})
    assert rc == 1 and "memory watchdog: 0.5 GiB free on the head" in res["msg"] and "weights loading" in res["msg"]
    assert serve.stopped


@pytest.mark.parametrize(("waited", "stopped"), [(290, False), (310, True)])
def test_vllm_boot_stops_a_boot_that_waits_for_its_placement_group_past_the_limit(engine, tmp_path, waited, stopped):
    """Seen on the simulated cluster: a worker rejoined at its old address, the head's Ray could not reach it,
    and vLLM waited for its GPU bundles with every GPU free, for what would have been the whole 2 h boot."""
    t0 = time.time() - waited - 5
    serve = engine.containers.add(Container("sparkfleet-vllm", started=t0))
    serve.lines = [(t0 + 1, "(EngineCore_DP0 pid=1) INFO 12-07 10:21:41 [ray_utils.py:4] Waiting for creating a "
                            "placement group of specs for %d seconds. specs=[{'GPU': 1.0, 'CPU': 0.0}]" % waited)]
    rc, res = run(vllm_boot, {"host": "10.0.0.1", "poll_seconds": 0, "min_free_memory_mib": 0,
                              "state_dir": str(tmp_path)})
    assert serve.stopped is stopped
    if stopped:
        assert rc == 1 and "vLLM has waited 310 s for its Ray placement group (placement_timeout 300 s)" in res["msg"]
        assert "the boot was stopped" in res["msg"]
    else:
        assert rc == 0 and res["stage"] == "Ray placement (waiting 290 s for the GPU bundles)", res


SERVE = {"image": "img:1", "model_path": "/models/m", "served_model_name": "m", "tensor_parallel_size": 4,
         "host": "10.0.0.1", "ray_address": "10.0.0.1:6379", "extra_args": ["--gpu-memory-utilization", "0.85"],
         "api_key_file": "/etc/sparkfleet/api-key", "env": {"SPARKFLEET_API_KEY_SHA256": "ab" * 32}}


def test_vllm_server_predicts_in_check_mode_with_a_diff_that_hides_the_key(engine):
    rc, res = run(vllm_server, SERVE, check_mode=True)
    assert rc == 0 and res["changed"] is True and engine.containers.runs == []
    assert res["diff"]["before"] == {}
    assert res["diff"]["after"]["environment"]["SPARKFLEET_API_KEY_SHA256"] == "(set, not shown)"


def test_vllm_server_mounts_the_key_file_runs_the_wrapper_and_then_changes_nothing(engine):
    rc, res = run(vllm_server, SERVE)
    assert rc == 0 and res["changed"] is True and len(engine.containers.runs) == 1
    started = engine.containers.runs[0]
    assert "VLLM_API_KEY" not in started["environment"]  # not in the declared environment (docker inspect)
    assert started["command"][:4] == ["python3", "-c", serve_plan.API_KEY_WRAPPER, "/etc/sparkfleet/api-key"]
    assert started["command"][4:6] == ["vllm", "serve"] and res["argv"] == started["command"][4:]
    assert started["volumes"]["/etc/sparkfleet/api-key"] == {"bind": "/etc/sparkfleet/api-key", "mode": "ro"}
    rc, res = run(vllm_server, SERVE)
    assert rc == 0 and res["changed"] is False and len(engine.containers.runs) == 1
    # A rotated key (its digest) restarts the server; the diff says so and shows neither key.
    rc, res = run(vllm_server, dict(SERVE, env={"SPARKFLEET_API_KEY_SHA256": "cd" * 32}), check_mode=True)
    assert rc == 0 and res["changed"] is True
    assert res["diff"]["after"]["environment"]["SPARKFLEET_API_KEY_SHA256"] == "(set, changed)"
    # An edited flag: the diff names it, as running and as declared.
    edited = dict(SERVE, extra_args=["--gpu-memory-utilization", "0.80"])
    rc, res = run(vllm_server, edited, check_mode=True)
    assert rc == 0 and res["changed"] is True and len(engine.containers.runs) == 1
    before, after = res["diff"]["before"], res["diff"]["after"]
    assert before["command"][-1] == "0.85" and after["command"][-1] == "0.80"
    assert before["environment"] == after["environment"]  # the image's own PATH is not the container's


def test_vllm_server_writes_the_key_it_is_given_where_the_server_reads_it(engine, tmp_path):
    path = tmp_path / "sparkfleet" / "api-key"
    key = "k" * 40
    given = dict(SERVE, api_key=key, api_key_file=str(path))
    rc, res = run(vllm_server, given, check_mode=True)
    assert rc == 0 and res["changed"] is True and not path.exists()  # check mode writes nothing
    rc, res = run(vllm_server, given)
    assert rc == 0 and res["changed"] is True and path.read_text() == key
    assert path.stat().st_mode & 0o777 == 0o600 and path.parent.stat().st_mode & 0o777 == 0o700
    started = engine.containers.runs[0]
    assert key not in json.dumps(res) and key not in json.dumps(started["command"])
    assert key not in json.dumps(started["environment"])
    rc, res = run(vllm_server, given)
    assert rc == 0 and res["changed"] is False and res["restarts"] is False and len(engine.containers.runs) == 1
    without_the_file = {k: v for k, v in given.items() if k != "api_key_file"}
    rc, res = run(vllm_server, without_the_file)
    assert rc == 1 and "api_key_file" in res["msg"]


def wrapper(tmp_path, key_text, *argv, env=None):
    key = tmp_path / "api-key"
    if key_text is not None:
        key.write_text(key_text)
    env = dict(os.environ, **(env or {"VLLM_CONFIG_ROOT": str(tmp_path / "cfg")}))
    env.pop("VLLM_API_KEY", None)
    return subprocess.run([sys.executable, "-c", serve_plan.API_KEY_WRAPPER, str(key), *argv], env=env,
                          capture_output=True, text=True, check=False)


def test_the_key_wrapper_gives_vllm_the_key_and_keeps_it_off_the_ray_workers(tmp_path):
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "ray_non_carry_over_env_vars.json").write_text('["NCCL_SOCKET_IFNAME"]')
    show = "import os, sys; print(os.environ['VLLM_API_KEY']); print(sys.argv[1:])"
    res = wrapper(tmp_path, "k" * 40 + "\n", sys.executable, "-c", show, "serve", "--port", "1")
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == ["k" * 40, "['serve', '--port', '1']"]
    listed = json.loads((tmp_path / "cfg" / "ray_non_carry_over_env_vars.json").read_text())
    assert listed == ["NCCL_SOCKET_IFNAME", "VLLM_API_KEY"]


def test_the_key_wrapper_writes_the_list_where_vllm_reads_it_under_xdg_config_home(tmp_path, monkeypatch):
    """vLLM's VLLM_CONFIG_ROOT defaults to $XDG_CONFIG_HOME/vllm when that is set (vllm/envs.py)."""
    monkeypatch.delenv("VLLM_CONFIG_ROOT", raising=False)
    res = wrapper(tmp_path, "k" * 40, sys.executable, "-c", "pass", env={"XDG_CONFIG_HOME": str(tmp_path / "xdg")})
    assert res.returncode == 0, res.stderr
    assert json.loads((tmp_path / "xdg" / "vllm" / "ray_non_carry_over_env_vars.json").read_text()) == ["VLLM_API_KEY"]


@pytest.mark.parametrize("key_text", ["", "  \n", None])
def test_the_key_wrapper_refuses_to_start_vllm_without_a_key(tmp_path, key_text):
    res = wrapper(tmp_path, key_text, sys.executable, "-c", "print('STARTED')")
    assert res.returncode != 0 and "STARTED" not in res.stdout
    assert "vllm serve was not started" in res.stderr and str(tmp_path / "api-key") in res.stderr


WORKER = {"role": "worker", "image": "img:1", "node_ip": "10.0.0.2", "head_ip": "10.0.0.1", "cluster_id": "h1",
          "poll_seconds": 1, "join_timeout": 2, "retries": 2, "run_id": "run-1"}


def test_ray_node_join_is_polled_waited_on_then_retried_then_fails_naming_the_node(engine):
    rc, first = run(ray_node, WORKER)
    assert rc == 0 and first["done"] is False and first["changed"] is True and first["attempts"] == 1
    assert "10.0.0.2 not in the table yet; cluster has 0 alive nodes, attempt 1 of 2" in first["progress"]
    started = engine.containers.items["sparkfleet-ray"]
    rc, second = run(ray_node, WORKER)  # the same join: waited on, and restarted once join_timeout passed
    assert rc == 0 and second["done"] is False and second["attempts"] == 2
    assert len(engine.containers.runs) == 2 and engine.containers.items["sparkfleet-ray"] is not started
    rc, third = run(ray_node, dict(WORKER, poll_seconds=4))
    assert rc == 1 and third["msg"].startswith("Ray worker on 10.0.0.2 did not come up after 2 attempts of 2 s "
                                               "(head 10.0.0.1:6379)")
    assert len(engine.containers.runs) == 2


def test_ray_node_poll_does_not_restart_its_own_join_and_ends_changed_once_alive(engine):
    rc, first = run(ray_node, dict(WORKER, join_timeout=60))
    assert rc == 0 and first["done"] is False
    engine.ray_table = [node("10.0.0.1"), node("10.0.0.2")]
    rc, second = run(ray_node, dict(WORKER, join_timeout=60))
    assert rc == 0 and second["done"] is True and second["changed"] is True and second["attempts"] == 1
    assert len(engine.containers.runs) == 1
    # The next run (another run_id) finds it current and alive: nothing to change.
    rc, again = run(ray_node, dict(WORKER, run_id="run-2"))
    assert rc == 0 and again == dict(again, changed=False, done=True, attempts=0)
    assert len(engine.containers.runs) == 1


def test_ray_node_restarts_a_current_container_of_an_earlier_run_that_is_not_alive(engine):
    engine.ray_table = [node("10.0.0.1"), node("10.0.0.2")]
    run(ray_node, dict(WORKER, run_id="run-0"))
    engine.containers.items["sparkfleet-ray"].tables = [[node("10.0.0.1")]]  # its raylet is gone, it still runs
    rc, res = run(ray_node, dict(WORKER, run_id="run-1"), check_mode=True)
    assert rc == 0 and res["changed"] is True and len(engine.containers.runs) == 1
    rc, res = run(ray_node, dict(WORKER, run_id="run-1"))
    assert rc == 0 and res["changed"] is True and res["done"] is True and len(engine.containers.runs) == 2


def test_ray_node_writes_the_token_where_ray_reads_it_and_restarts_ray_only_when_its_env_says_so(engine, tmp_path):
    """The role puts the token's digest in the Ray env (SPARKFLEET_RAY_TOKEN_SHA256): that restarts Ray. The
    file itself is only written; a rewrite alone restarts nothing, and says so (restarts)."""
    engine.ray_table = [node("10.0.0.1"), node("10.0.0.2")]
    path = tmp_path / "ray" / "token"
    first, second = "t" * 40, "u" * 40

    def join(token, run_id, check_mode=False):
        env = {"SPARKFLEET_RAY_TOKEN_SHA256": hashlib.sha256(token.encode()).hexdigest()}
        return run(ray_node, dict(WORKER, run_id=run_id, env=env, token=token, token_path=str(path)),
                   check_mode=check_mode)

    rc, res = join(first, "run-1")
    assert rc == 0 and res["done"] is True and res["changed"] is True and res["restarts"] is True
    assert path.read_text() == first and path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o777 == 0o700
    started = engine.containers.runs[0]
    assert first not in json.dumps(res) and first not in json.dumps(started["command"])
    assert first not in json.dumps(started["environment"])
    # The same token on the next run: nothing changes.
    rc, res = join(first, "run-2")
    assert rc == 0 and res["changed"] is False and res["restarts"] is False and len(engine.containers.runs) == 1
    # A new token: check mode predicts the restart and writes nothing; the run writes it and restarts Ray.
    rc, res = join(second, "run-3", check_mode=True)
    assert rc == 0 and res["restarts"] is True and path.read_text() == first and len(engine.containers.runs) == 1
    rc, res = join(second, "run-3")
    assert rc == 0 and res["restarts"] is True and path.read_text() == second and len(engine.containers.runs) == 2
    # A token file loosened by hand: written again (0600), a change, but Ray is left running.
    path.chmod(0o644)
    rc, res = join(second, "run-4", check_mode=True)
    assert rc == 0 and res["changed"] is True and res["restarts"] is False
    assert path.stat().st_mode & 0o777 == 0o644
    rc, res = join(second, "run-4")
    assert rc == 0 and res["changed"] is True and res["restarts"] is False
    assert path.stat().st_mode & 0o777 == 0o600 and len(engine.containers.runs) == 2


def test_a_secret_file_leaves_an_existing_directory_as_it_is_and_needs_an_absolute_path(tmp_path):
    from ansible_collections.sparkfleet.vllm.plugins.module_utils import secret_file

    shared = tmp_path / "etc"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)
    assert secret_file.write(str(shared / "api-key"), "k" * 40, check_mode=False) is True
    assert shared.stat().st_mode & 0o777 == 0o755 and (shared / "api-key").stat().st_mode & 0o777 == 0o600
    assert secret_file.write(str(shared / "api-key"), "k" * 40, check_mode=False) is False
    assert sorted(p.name for p in shared.iterdir()) == ["api-key"]  # no temporary file left
    with pytest.raises(OSError, match="not an absolute path"):
        secret_file.write("relative/api-key", "k" * 40, check_mode=False)


def test_ray_node_without_the_gpu_fails_with_the_fix(engine):
    engine.ray_table = [node("10.0.0.1"), node("10.0.0.2", gpus=0)]
    rc, res = run(ray_node, WORKER)
    assert rc == 1 and "registered 0 GPU(s), expected 1" in res["msg"] and "NVIDIA Container Toolkit" in res["msg"]


def test_the_image_build_reports_its_steps_and_its_last_output_line(tmp_path):
    from ansible_collections.sparkfleet.vllm.plugins.module_utils.progress import Progress, read_progress
    from ansible_collections.sparkfleet.vllm.plugins.modules import vllm_image

    path = str(tmp_path / "build.json")
    progress = Progress(path, "b1", unit="steps", phase="building")
    seen = []

    class Api:
        def build(self, **kwargs):
            for chunk in ({"stream": "Step 1/3 : FROM base@sha256:ab\n"}, {"stream": " ---> 1234\n"},
                          {"stream": "Step 2/3 : RUN pip install ray==2.60.0\n"},
                          {"stream": "Collecting ray==2.60.0\n"}, {"stream": "Step 3/3 : LABEL x=y\n"}):
                progress.last = 0.0  # every update is written, as if a second had passed
                yield chunk
                seen.append(read_progress(path, "b1"))

    class Cli:
        api = Api()

    vllm_image.build(Cli(), "t:1", "FROM base", "2.60.0", {}, {}, progress)
    assert [(d["done"], d["total"], d["note"]) for d in seen] == [
        (1, 3, "FROM base@sha256:ab"), (1, 3, "FROM base@sha256:ab | ---> 1234"),
        (2, 3, "RUN pip install ray==2.60.0"), (2, 3, "RUN pip install ray==2.60.0 | Collecting ray==2.60.0"),
        (3, 3, "LABEL x=y")]


def test_ray_node_diff_of_a_join_over_several_polls_still_shows_what_it_replaced(engine):
    engine.ray_table = [node("10.0.0.1"), node("10.0.0.2")]
    run(ray_node, dict(WORKER, run_id="run-0"))
    engine.ray_table = [node("10.0.0.1")]
    rc, first = run(ray_node, dict(WORKER, image="img:2", join_timeout=60))
    assert rc == 0 and first["done"] is False and first["diff"]["before"]["image"] == "img:1"
    engine.ray_table = [node("10.0.0.1"), node("10.0.0.2")]
    rc, last = run(ray_node, dict(WORKER, image="img:2", join_timeout=60))
    assert rc == 0 and last["done"] is True and last["changed"] is True
    assert last["diff"]["before"]["image"] == "img:1" and last["diff"]["after"]["image"] == "img:2"


def test_ray_node_polls_need_a_run_id(engine):
    rc, res = run(ray_node, dict(WORKER, run_id=""))
    assert rc == 1 and res["msg"].startswith("run_id is required with poll_seconds")
    assert engine.containers.runs == []


def rollout_states(engine):
    return {name: c.status for name, c in sorted(engine.containers.items.items())}


def test_rollout_keeps_the_running_containers_aside_and_restores_them_as_they_were(engine):
    """kept: stopped and renamed -previous; the deploy then starts new ones; restored: the new ones go, the
    previous ones run again under the usual names, with their own image and command; a second restore finds
    nothing left to do."""
    for name in ("sparkfleet-vllm", "sparkfleet-ray"):
        engine.containers.add(Container(name, image="img:1", command=["old", name]))
    args = {"containers": ["sparkfleet-vllm", "sparkfleet-ray"]}
    rc, res = run(rollout, dict(args, state="kept", _ansible_diff=True), check_mode=True)
    assert rc == 0 and res["changed"] and rollout_states(engine) == {"sparkfleet-ray": "running",
                                                                     "sparkfleet-vllm": "running"}
    assert res["diff"]["after"]["sparkfleet-vllm"] == "absent"
    rc, res = run(rollout, dict(args, state="kept"))
    assert rc == 0 and res["actions"] == ["sparkfleet-vllm: stop current, rename current",
                                          "sparkfleet-ray: stop current, rename current"]
    assert rollout_states(engine) == {"sparkfleet-ray-previous": "exited", "sparkfleet-vllm-previous": "exited"}
    for name in ("sparkfleet-vllm", "sparkfleet-ray"):  # what the deploy starts
        engine.containers.add(Container(name, image="img:2", command=["new", name]))
    rc, res = run(rollout, dict(args, state="restored"))
    assert rc == 0 and res["changed"]
    assert rollout_states(engine) == {"sparkfleet-ray": "running", "sparkfleet-vllm": "running"}
    assert engine.containers.get("sparkfleet-vllm").attrs["Config"]["Cmd"] == ["old", "sparkfleet-vllm"]
    rc, res = run(rollout, dict(args, state="restored"))
    assert rc == 0 and not res["changed"]


def test_rollout_keeps_the_proven_previous_over_an_unproven_current_and_discards_what_was_kept(engine):
    engine.containers.add(Container("sparkfleet-vllm-previous", image="img:1"))
    rc, res = run(rollout, {"containers": ["sparkfleet-vllm", "sparkfleet-ray"], "state": "kept"})
    assert rc == 0 and not res["changed"]  # nothing runs under the usual name: the kept one stays
    engine.containers.add(Container("sparkfleet-vllm", image="img:2"))
    rc, res = run(rollout, {"containers": ["sparkfleet-vllm"], "state": "kept"})
    # The one aside is the last proven deployment; the current one (an interrupted run's) goes.
    assert res["actions"] == ["sparkfleet-vllm: remove current"]
    assert engine.containers.get("sparkfleet-vllm-previous").attrs["Config"]["Image"] == "img:1"
    rc, res = run(rollout, {"containers": ["sparkfleet-vllm", "sparkfleet-ray"], "state": "discarded"})
    assert rc == 0 and res["changed"] and rollout_states(engine) == {}


def test_rollout_names_the_container_and_step_that_failed(engine):
    engine.containers.add(Container("sparkfleet-vllm", image="img:2"))

    def refuse(timeout=10):
        raise docker.errors.APIError("cannot stop container: permission denied")

    engine.containers.get("sparkfleet-vllm").stop = refuse
    rc, res = run(rollout, {"containers": ["sparkfleet-vllm"], "state": "kept"})
    assert rc == 1 and res["msg"].startswith("rollout kept: sparkfleet-vllm (stop current): cannot stop container")
