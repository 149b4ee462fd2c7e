"""The no-op probe of a re-run: deploy_stamp through its entry point on a real directory tree, with the
Docker SDK's client faked (images.get, containers.get and a container's attrs, as the module reads them),
and the digest of a run's inputs (the inputs_digest filter) over this collection's own files."""

import json
import os
import shutil

import docker
import pytest
from docker.errors import ImageNotFound, NotFound
from module_runner import run

from ansible_collections.sparkfleet.vllm.plugins.filter import inputs_digest, pick_matching
from ansible_collections.sparkfleet.vllm.plugins.module_utils import endpoint, fabric, stamp
from ansible_collections.sparkfleet.vllm.plugins.modules import deploy_stamp


class Container:
    def __init__(self, cid, running=True, started="2026-12-06T09:00:00.1Z", paused=False):
        self.id = cid
        self.attrs = {"State": {"Running": running, "Paused": paused, "StartedAt": started}}


class Engine:
    def __init__(self):
        self.images = self
        self.containers = self
        self.image_ids = {"sparkfleet/vllm:0.34.0-abc": "sha256:" + "1" * 64, "base:1": "sha256:" + "2" * 64}
        self.running = {"sparkfleet-ray": Container("r1"), "sparkfleet-vllm": Container("v1")}

    def ping(self):
        return True

    def get(self, name):
        if name in self.running:
            return self.running[name]
        if name in self.image_ids:
            return type("Image", (), {"id": self.image_ids[name]})()
        raise (ImageNotFound if ":" in name else NotFound)(name)


@pytest.fixture
def node(tmp_path, monkeypatch):
    engine = Engine()
    monkeypatch.setattr(docker, "from_env", lambda **kw: engine)
    tree = tmp_path / "hub" / "models--org--Model"
    (tree / "blobs").mkdir(parents=True)
    (tree / "snapshots" / "rev").mkdir(parents=True)
    (tree / "blobs" / "aa").write_bytes(b"x" * 100)
    os.symlink("../../blobs/aa", tree / "snapshots" / "rev" / "model.safetensors")
    return engine, tree, tmp_path / "stamp" / "deploy.json"


def stamp_it(tree, path, digest="d1", check_mode=False):
    return run(deploy_stamp, {"state": "present", "path": str(path), "inputs_digest": digest,
                              "images": ["sparkfleet/vllm:0.34.0-abc", "base:1"],
                              "containers": ["sparkfleet-ray", "sparkfleet-vllm"], "trees": [str(tree)]},
               check_mode=check_mode)


def probe(path, digest="d1"):
    rc, res = run(deploy_stamp, {"path": str(path), "inputs_digest": digest})
    assert rc == 0 and res["changed"] is False, res
    return res["unchanged"], res["differences"]


def test_a_stamped_node_is_unchanged_and_a_second_stamp_changes_nothing(node):
    _engine, tree, path = node
    rc, res = stamp_it(tree, path, check_mode=True)
    assert rc == 0 and res["changed"] and not path.exists()  # check mode predicts and writes nothing
    rc, res = stamp_it(tree, path)
    assert rc == 0 and res["changed"] and json.loads(path.read_text()) == res["stamp"]
    assert res["stamp"]["containers"]["sparkfleet-ray"]["id"] == "r1"
    assert probe(path) == (True, [])
    rc, res = stamp_it(tree, path)
    assert rc == 0 and not res["changed"]


@pytest.mark.parametrize("change, said", [
    (lambda e, t, p: None, "the run's inputs differ from the verified deploy's"),
    (lambda e, t, p: e.image_ids.update({"base:1": "sha256:" + "3" * 64}), "image base:1 is sha256:333"),
    (lambda e, t, p: e.image_ids.pop("sparkfleet/vllm:0.34.0-abc"), "image sparkfleet/vllm:0.34.0-abc is absent"),
    (lambda e, t, p: e.running.pop("sparkfleet-vllm"), "container sparkfleet-vllm is gone"),
    (lambda e, t, p: e.running.update({"sparkfleet-ray": Container("r1", running=False)}),
     "container sparkfleet-ray is not running"),
    (lambda e, t, p: e.running.update({"sparkfleet-ray": Container("r1", paused=True)}),
     "container sparkfleet-ray is not running (or paused)"),
    (lambda e, t, p: e.running.update({"sparkfleet-ray": Container("r2")}), "container sparkfleet-ray was replaced"),
    (lambda e, t, p: e.running.update({"sparkfleet-ray": Container("r1", started="2026-12-06T10:00:00Z")}),
     "container sparkfleet-ray was replaced or restarted"),
    (lambda e, t, p: (t / "blobs" / "aa").write_bytes(b"y" * 100), "models--org--Model changed"),
    (lambda e, t, p: os.utime(t / "blobs" / "aa", ns=(1, 1)), "models--org--Model changed"),
    (lambda e, t, p: os.chmod(t / "blobs" / "aa", 0o600), "models--org--Model changed"),
    (lambda e, t, p: (t / "blobs" / "bb.incomplete").write_bytes(b""), "models--org--Model changed"),
    (lambda e, t, p: shutil.rmtree(t), "models--org--Model is gone"),
    (lambda e, t, p: p.write_text("{"), "no stamp of a verified deploy"),
    (lambda e, t, p: p.unlink(), "no stamp of a verified deploy"),
])
def test_each_change_since_the_stamp_is_named(node, change, said):
    engine, tree, path = node
    assert stamp_it(tree, path)[0] == 0
    change(engine, tree, path)
    digest = "d2" if said.startswith("the run's inputs") else "d1"
    unchanged, diffs = probe(path, digest)
    assert not unchanged and any(said in d for d in diffs), diffs


@pytest.mark.parametrize("change, images, trees", [
    (lambda e, t, p: None, True, True),
    # A lost worker: its Ray container is gone, but its image and its weights are still the verified ones.
    (lambda e, t, p: e.running.pop("sparkfleet-ray"), True, True),
    (lambda e, t, p: e.image_ids.update({"base:1": "sha256:" + "3" * 64}), False, True),
    (lambda e, t, p: (t / "blobs" / "aa").write_bytes(b"y" * 100), True, False),
    (lambda e, t, p: "other inputs", False, False),
    (lambda e, t, p: p.unlink(), False, False),
])
def test_what_still_holds_when_the_node_differs(node, change, images, trees):
    engine, tree, path = node
    facts = {"image_built": {"tag": "sparkfleet/vllm:0.34.0-abc"}}
    rc, _res = run(deploy_stamp, {"state": "present", "path": str(path), "inputs_digest": "d1",
                                  "images": ["sparkfleet/vllm:0.34.0-abc", "base:1"],
                                  "containers": ["sparkfleet-ray"], "trees": [str(tree)], "facts": facts})
    assert rc == 0
    digest = "d2" if change(engine, tree, path) == "other inputs" else "d1"
    rc, res = run(deploy_stamp, {"path": str(path), "inputs_digest": digest})
    assert rc == 0 and res["held"] == {"images": images, "trees": trees}, res
    # The check returns the stamp's facts as written; without a stamp, none.
    assert res["stamp"].get("facts") == (facts if path.exists() else None), res["stamp"]


def test_a_stage_recorded_absent_is_not_held_and_a_secret_env_is_not_stamped(node):
    engine, tree, path = node
    engine.image_ids.pop("base:1")  # absent when stamped, absent now: the same, but no verified image
    facts = {"release_env": {"VLLM_X": "1", "MY_API_TOKEN": "s3cret"}, "weights": {"digest": "d"}}
    rc, res = run(deploy_stamp, {"state": "present", "path": str(path), "inputs_digest": "d1",
                                 "images": ["base:1"], "trees": [str(tree)], "facts": facts})
    assert rc == 0 and res["stamp"]["images"] == {"base:1": None}
    assert "s3cret" not in path.read_text() and res["stamp"]["facts"] == {"weights": {"digest": "d"}}
    rc, res = run(deploy_stamp, {"path": str(path), "inputs_digest": "d1"})
    assert rc == 0 and res["held"] == {"images": False, "trees": True}, res


def test_an_unchanged_node_proves_its_endpoints_and_one_that_answers_garbage_is_not_unchanged(node, monkeypatch):
    _engine, tree, path = node
    assert stamp_it(tree, path)[0] == 0
    texts = {"http://10.0.0.1:8000": " Paris. It is the capital of France.", "http://10.0.0.2:8000": " foss" * 12}
    asked = []

    def request(url, body=None, api_key=None, timeout=30, validate_certs=True):
        asked.append((url, api_key))
        if url.endswith("/health"):
            return 200, ""
        base, route = url.split("/v1/")
        if route == "models":
            return 200, {"data": [{"id": "m"}]}
        return 200, {"choices": [{"text": texts[base]}]}

    monkeypatch.setattr(endpoint, "request", request)
    args = {"path": str(path), "inputs_digest": "d1", "served_model_name": "m", "api_key": "k" * 32,
            "probes": [{"prompt": "The capital of France is", "expect_any": ["Paris"]}]}
    rc, res = run(deploy_stamp, dict(args, probe_urls=["http://10.0.0.1:8000"]))
    assert rc == 0 and res["unchanged"] and res["endpoints"]["http://10.0.0.1:8000"]["problems"] == [], res
    assert ("http://10.0.0.1:8000/v1/completions", "k" * 32) in asked and "k" * 32 not in str(res)
    rc, res = run(deploy_stamp, dict(args, probe_urls=list(texts)))
    assert rc == 0 and not res["unchanged"]
    (said,) = res["differences"]
    assert said.startswith("endpoint http://10.0.0.2:8000 is not proven coherent: probe 'The capital of France is'")
    # A node that differs from its stamp is not probed: the full path proves it after its repair.
    asked.clear()
    rc, res = run(deploy_stamp, dict(args, inputs_digest="d2", probe_urls=list(texts)))
    assert not res["unchanged"] and asked == [] and res["endpoints"] == {}


def test_a_head_whose_member_gives_no_answer_over_the_fabric_is_not_unchanged(node, monkeypatch):
    _engine, tree, path = node
    assert stamp_it(tree, path)[0] == 0
    asked = []
    monkeypatch.setattr(fabric, "reach", lambda ip, port, timeout: asked.append((ip, port)) or
                        ((False, "no answer in 5 s") if ip == "10.0.0.3" else (True, "")))
    rc, res = run(deploy_stamp, {"path": str(path), "inputs_digest": "d1", "members": ["10.0.0.2", "10.0.0.3"]})
    assert rc == 0 and res["differences"] == ["10.0.0.3 gives this head no answer on port 6700 over the fabric (no answer in 5 s)"]
    assert sorted(asked) == [("10.0.0.2", 6700), ("10.0.0.3", 6700)]
    _rc, res = run(deploy_stamp, {"path": str(path), "inputs_digest": "d1", "members": ["10.0.0.2"]})
    assert res["unchanged"]


def test_tree_digest_sees_a_write_whose_times_were_put_back(tmp_path):
    blob = tmp_path / "blob"
    blob.write_bytes(b"x" * 64)
    st = os.stat(blob)
    before = stamp.tree_digest(str(tmp_path))
    with open(blob, "r+b") as fh:  # one bit flipped in place, then the times restored (touch -d)
        fh.write(b"y")
    os.utime(blob, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(blob).st_mtime_ns == st.st_mtime_ns and os.stat(blob).st_size == st.st_size
    assert stamp.tree_digest(str(tmp_path)) != before


def test_tree_digest_follows_no_link_and_sees_a_retargeted_one(tmp_path):
    (tmp_path / "a").write_text("1")
    os.symlink("a", tmp_path / "l")
    before = stamp.tree_digest(str(tmp_path))
    os.unlink(tmp_path / "l")
    os.symlink("b", tmp_path / "l")
    assert stamp.tree_digest(str(tmp_path)) != before
    assert stamp.tree_digest(str(tmp_path / "absent")) is None


def test_the_inputs_digest_covers_the_inputs_and_the_collections_files(tmp_path):
    root = tmp_path / "coll"
    for folder in ("plugins", "roles", "playbooks", "recipes"):
        (root / folder).mkdir(parents=True)
    (root / "recipes" / "m.yml").write_text("max_tp: 8\n")
    first = inputs_digest.inputs_digest({"a": 1, "b": [1, 2]}, root=str(root))
    assert first == inputs_digest.inputs_digest({"b": [1, 2], "a": 1}, root=str(root))  # key order is no change
    assert first != inputs_digest.inputs_digest({"a": 2, "b": [1, 2]}, root=str(root))
    (root / "recipes" / "m.yml").write_text("max_tp: 4\n")
    assert first != inputs_digest.inputs_digest({"a": 1, "b": [1, 2]}, root=str(root))
    (root / "plugins" / "__pycache__").mkdir()
    edited = inputs_digest.inputs_digest({"a": 1, "b": [1, 2]}, root=str(root))
    (root / "plugins" / "__pycache__" / "x.pyc").write_bytes(b"\0")
    assert edited == inputs_digest.inputs_digest({"a": 1, "b": [1, 2]}, root=str(root))
    # This collection's own files are found (the filter's default root).
    assert inputs_digest.code_digest() != inputs_digest.code_digest(str(root))
    assert os.path.isfile(os.path.join(inputs_digest.ROOT, "playbooks", "deploy.yml"))


def test_pick_matching_keeps_the_names_of_the_pattern_sorted():
    got = pick_matching.pick_matching({"vllm_serve_env": {}, "sparkfleet_x": 1, "ansible_host": "h", "xsparkfleet_": 0},
                                      "^(sparkfleet|vllm_serve)_")
    assert list(got) == ["sparkfleet_x", "vllm_serve_env"]


class Balancer(Container):
    """A balancer container whose HAProxy answers the runtime API with the texts test_haproxy recorded:
    replica-0 UP, replica-1 drained, replica-2 in maintenance, replica-3 refusing connections."""

    def __init__(self, stat, state):
        super().__init__("b1")
        self.answers = {"show stat": stat, "show servers state replicas": state}

    def exec_run(self, argv, demux=True, environment=None):
        return type("Exec", (), {"exit_code": 0, "output": (self.answers[argv[-1]].encode(), b"")})()


def test_a_balancer_with_a_replica_not_ready_and_up_is_not_unchanged(node):
    from test_haproxy import SHOW_SERVERS_STATE, SHOW_STAT
    engine, tree, path = node
    engine.running["sparkfleet-balancer"] = Balancer(SHOW_STAT, SHOW_SERVERS_STATE)
    assert stamp_it(tree, path)[0] == 0
    rc, res = run(deploy_stamp, {"path": str(path), "inputs_digest": "d1", "balancer_container": "sparkfleet-balancer"})
    assert rc == 0 and not res["unchanged"], res
    said = "\n".join(res["differences"])
    assert "replica-0" not in said and "replica-1 is DRAIN" in said and ", drain" in said
    assert "replica-2 is MAINT" in said and "replica-3 is DOWN (check L4CON" in said
    engine.running.pop("sparkfleet-balancer")
    rc, res = run(deploy_stamp, {"path": str(path), "inputs_digest": "d1", "balancer_container": "sparkfleet-balancer"})
    assert res["differences"] == ["balancer sparkfleet-balancer is gone"]


def test_the_probe_lists_which_of_the_containers_it_is_asked_about_exist(node):
    engine, _tree, path = node
    engine.running["sparkfleet-vllm-previous"] = Container("p1", running=False)  # kept aside, stopped
    names = ["sparkfleet-vllm", "sparkfleet-vllm-previous", "sparkfleet-ray-previous", "sparkfleet-balancer"]
    rc, res = run(deploy_stamp, {"path": str(path), "inputs_digest": "d1", "find_containers": names})
    assert rc == 0 and res["found_containers"] == ["sparkfleet-vllm", "sparkfleet-vllm-previous"]
    engine.running.clear()
    rc, res = run(deploy_stamp, {"path": str(path), "inputs_digest": "d1", "find_containers": names})
    assert rc == 0 and res["found_containers"] == []
