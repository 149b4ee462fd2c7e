"""The balancer and balancer_server modules called through their entry point, with the Docker engine faked.

The fake is the Docker SDK's client API as the modules use it (docker.from_env: ping, images.get/pull,
api.build, containers.get/run, a container's reload/exec_run/kill/logs/wait/remove). A balancer container
holds a fake HAProxy: it reads the haproxy.cfg of its mounted directory when it starts and on SIGUSR2 (as
the master's reload does: a new worker, and every admin state back to ready), and answers the runtime API
commands with the texts HAProxy 2.6 prints (the header lines are those recorded in test_haproxy). A
throwaway ``haproxy -c`` container refuses an address that does not resolve, with HAProxy's own message.
"""

import io
import os
import re
import tarfile

import docker
import pytest
from docker.errors import ImageNotFound, NotFound
from module_runner import run
from test_haproxy import SHOW_SERVERS_STATE, SHOW_STAT

from ansible_collections.sparkfleet.vllm.plugins.module_utils import haproxy, waiter
from ansible_collections.sparkfleet.vllm.plugins.modules import balancer, balancer_server

STAT_HEADER = SHOW_STAT.splitlines()[0][2:].rstrip(",").split(",")
STATE_HEADER = SHOW_SERVERS_STATE.splitlines()[1]
BASE_ID = "sha256:" + "b1" * 32
SERVERS = [{"name": "replica-0", "address": "172.29.0.10:8000"}, {"name": "replica-1", "address": "172.29.0.20:8000"}]


class Exec:
    def __init__(self, exit_code, output):
        self.exit_code, self.output = exit_code, output


class HAProxy:
    """What the balancer's HAProxy answers on its admin socket."""

    def __init__(self, engine, config_path):
        self.engine, self.path, self.pid = engine, config_path, 40
        self.load()

    def load(self):
        with open(self.path) as fh:
            self.text = fh.read()
        self.servers = re.findall(r"^ +server (\S+) (\S+) check$", self.text, re.M)
        self.admin = {name: 0 for name, _addr in self.servers}  # a reload forgets the runtime admin states
        self.pid += 1

    def health(self, name):
        """(status, check_status, last_chk, scur); a list in engine.health advances one step per show stat."""
        seq = self.engine.health.get(name)
        if not seq:
            return "UP", "L7OK", "", 0
        return seq.pop(0) if len(seq) > 1 else seq[0]

    def show_stat(self):
        def line(values):
            return ",".join(str(values.get(col, "")) for col in STAT_HEADER) + ","

        out = ["# " + ",".join(STAT_HEADER) + ",", line({"pxname": "openai_api", "svname": "FRONTEND", "scur": 0,
                                                        "status": "OPEN", "type": 0})]
        for name, addr in self.servers:
            status, check, last, scur = self.health(name)
            admin = self.admin[name]
            if admin & 1:
                status, check, last = "MAINT", "", ""
            elif admin & 8 and status == "UP":
                status = "DRAIN"
            out.append(line({"pxname": "replicas", "svname": name, "scur": scur, "status": status, "type": 2,
                             "check_status": check, "last_chk": last, "addr": addr, "weight": 1}))
        out.append(line({"pxname": "replicas", "svname": "BACKEND", "scur": 0, "status": "UP", "type": 1}))
        return "\n".join(out) + "\n\n"

    def answer(self, command):
        self.engine.commands.append(command)
        if command == "show stat":
            return self.show_stat()
        if command == "show info":
            return "Name: HAProxy\nVersion: 2.6.12-1+deb12u4\nPid: %d\nUptime_sec: 5\n\n" % self.pid
        found = re.fullmatch(r"show servers state (\S+)", command)
        if found:
            if found.group(1) != "replicas":
                return "Can't find backend.\n\n"
            rows = ["3 replicas %d %s %s 2 %d 1 1 5 15 3 3 6 0 0 0 - %s - 0 0 - - 0" % (
                i + 1, name, addr.split(":")[0], self.admin[name], addr.split(":")[1])
                for i, (name, addr) in enumerate(self.servers)]
            return "1\n%s\n%s\n\n" % (STATE_HEADER, "\n".join(rows))
        found = re.fullmatch(r"set server (\S+)/(\S+) state (ready|drain|maint)", command)
        if found:
            if found.group(1) != "replicas":
                return "No such backend.\n\n"
            if found.group(2) not in self.admin:
                return "No such server.\n\n"
            self.admin[found.group(2)] = {"ready": 0, "drain": 8, "maint": 1}[found.group(3)]
            return "\n"
        return "Unknown command: '%s'\n\n" % command


class Container:
    def __init__(self, engine, name, image, command, labels=None, volumes=None):
        engine.serial += 1
        self.engine, self.name, self.id, self.status = engine, name, "c%03d" % engine.serial, "running"
        self.labels, self.volumes, self.command = dict(labels or {}), dict(volumes or {}), list(command or [])
        self.attrs = {"Image": engine.images.present.get(image), "State": {"StartedAt": "2026-01-01T00:00:00Z"},
                      "Config": {"Image": image, "Cmd": self.command, "Env": ["PATH=/usr/bin"]}}
        self.kills, self.removed = [], False
        self.haproxy = None
        if self.command[:2] == ["haproxy", "-W"] and not engine.crash:
            self.haproxy = HAProxy(engine, self.mounted(self.command[-1]))
        elif self.command[:2] == ["haproxy", "-W"]:
            self.status = "restarting"

    def mounted(self, path):
        for host, bind in self.volumes.items():
            if path.startswith(bind["bind"] + "/"):
                return os.path.join(host, path[len(bind["bind"]) + 1:])
        raise AssertionError("%s is not in a mounted directory: %s" % (path, self.volumes))

    def reload(self):
        pass

    def exec_run(self, argv, demux=False, environment=None):
        assert argv[:2] == ["sh", "-c"] and "socat stdio /run/haproxy/admin.sock" in argv[2], argv
        if self.haproxy is None:
            return Exec(1, (b"", b"socat[9] E connect(5, AF=1 \"/run/haproxy/admin.sock\", 25): No such file or directory\n"))
        return Exec(0, (self.haproxy.answer(argv[-1]).encode(), b""))

    def kill(self, signal=None):
        self.kills.append(signal)
        if signal == "SIGUSR2":
            self.haproxy.load()

    def logs(self, stdout=True, stderr=True, tail=None, **kw):
        if self.command[:2] == ["haproxy", "-c"]:
            return self.check_output.encode()
        return b"[ALERT] (1) : Starting frontend openai_api: cannot bind socket (Address already in use) [0.0.0.0:8080]\n"

    def wait(self, timeout=None):
        """A throwaway haproxy -c: refuse an address that does not resolve, as HAProxy does."""
        path = self.mounted(self.command[-1])
        with open(path) as fh:
            text = fh.read()
        self.engine.checked.append((os.path.basename(path), text))
        bad = re.search(r"^( +server (\S+) ([a-z0-9.-]+\.invalid):\d+ check)$", text, re.M)
        if bad:
            line = text[:bad.start()].count("\n") + 1
            self.check_output = ("[ALERT]    (1) : config : [%s:%d] : 'server replicas/%s' : could not resolve address "
                                 "'%s'.\n[ALERT]    (1) : config : Failed to initialize server(s) addr.\n"
                                 % (self.command[-1], line, bad.group(2), bad.group(3)))
            return {"StatusCode": 1}
        self.check_output = "Configuration file is valid\n"
        return {"StatusCode": 0}

    def remove(self, force=False):
        self.removed = True
        if self.engine.containers.items.get(self.name) is self:
            del self.engine.containers.items[self.name]


class Containers:
    def __init__(self, engine):
        self.engine, self.items, self.runs, self.checks = engine, {}, [], []

    def get(self, name):
        if name not in self.items:
            raise NotFound("No such container: %s" % name)
        return self.items[name]

    def run(self, image=None, command=None, name=None, detach=False, **kwargs):
        assert detach
        container = Container(self.engine, name, image, command, kwargs.get("labels"), kwargs.get("volumes"))
        if name is None:
            self.checks.append(container)
        else:
            self.runs.append(dict(kwargs, image=image, command=command, name=name))
            self.items[name] = container
        return container


class Image:
    def __init__(self, image_id):
        self.id, self.attrs = image_id, {"Config": {"Env": ["PATH=/usr/bin"]}}


class Images:
    def __init__(self, engine):
        self.engine, self.present, self.pulls = engine, {"debian:bookworm-slim": BASE_ID}, []

    def get(self, ref):
        if ref not in self.present:
            raise ImageNotFound("No such image: %s" % ref)
        return Image(self.present[ref])

    def pull(self, ref):
        self.pulls.append(ref)
        self.present[ref] = "sha256:" + "0d" * 32


class API:
    def __init__(self, engine):
        self.engine, self.builds = engine, []

    def build(self, fileobj, tag, **kwargs):
        with tarfile.open(fileobj=fileobj) as tar:
            dockerfile = tar.extractfile("Dockerfile").read().decode()
        self.builds.append({"tag": tag, "dockerfile": dockerfile, **kwargs})
        yield {"stream": "Step 1/4 : FROM debian:bookworm-slim\n"}
        yield {"stream": " ---> b1b1b1b1b1b1\n"}
        yield {"stream": "Step 2/4 : RUN apt-get update  && DEBIAN_FRONTEND=noninteractive apt-get install -y "
                         "--no-install-recommends haproxy socat\n"}
        if self.engine.build_fails:
            yield {"stream": "Err:1 http://deb.debian.org/debian bookworm InRelease\n  Temporary failure resolving "
                             "'deb.debian.org'\n"}
            yield {"stream": "E: Unable to locate package haproxy\n"}
            yield {"error": "The command '/bin/sh -c apt-get update ...' returned a non-zero code: 100"}
            return
        yield {"stream": "Successfully built 5eed5eed5eed\n"}
        self.engine.images.present[tag] = "sha256:" + ("%02d" % len(self.builds)) * 32


class Engine:
    def __init__(self):
        self.serial = 0
        self.containers, self.images, self.api = Containers(self), Images(self), API(self)
        self.health, self.commands, self.checked = {}, [], []
        self.build_fails = self.crash = False

    def ping(self):
        return True


class FakeClock:
    now = 0.0

    def monotonic(self):
        return FakeClock.now

    def sleep(self, seconds):
        FakeClock.now += seconds


@pytest.fixture
def engine(monkeypatch):
    fake = Engine()
    monkeypatch.setattr(docker, "from_env", lambda **kw: fake)
    monkeypatch.setattr(waiter, "Clock", FakeClock)
    return fake


def args(tmp_path, **kw):
    return dict({"port": 8080, "servers": SERVERS, "config_dir": str(tmp_path / "balancer")}, **kw)


def cfg(tmp_path):
    return tmp_path / "balancer" / "haproxy.cfg"


def leftovers(tmp_path):
    return sorted(n for n in os.listdir(tmp_path / "balancer") if n not in ("haproxy.cfg", ".loaded.json"))


# balancer


def test_first_run_builds_checks_writes_and_starts_then_a_second_run_changes_nothing(engine, tmp_path):
    rc, res = run(balancer, args(tmp_path))
    assert rc == 0, res
    assert res["changed"] is True and res["built"] is True and res["reloaded"] is False
    (build,) = engine.api.builds
    assert res["image"] == build["tag"] == haproxy.image_tag(BASE_ID, haproxy.dockerfile("debian:bookworm-slim"))
    assert "apt-get install -y --no-install-recommends haproxy socat" in build["dockerfile"]
    text = haproxy.render(8080, SERVERS)
    assert cfg(tmp_path).read_text() == text and (cfg(tmp_path).stat().st_mode & 0o777) == 0o644
    assert res["config_path"] == str(cfg(tmp_path))
    # haproxy -c ran on the new text, in a throwaway container that is gone, before the file went live.
    ((checked_name, checked_text),) = engine.checked
    assert checked_name.startswith(".haproxy.cfg.") and checked_text == text
    assert [c.removed for c in engine.containers.checks] == [True]
    assert leftovers(tmp_path) == []
    (started,) = engine.containers.runs
    assert started["image"] == res["image"] and started["name"] == "sparkfleet-balancer"
    assert started["command"] == ["haproxy", "-W", "-db", "-f", "/usr/local/etc/haproxy/haproxy.cfg"]
    assert started["network_mode"] == "host" and started["restart_policy"] == {"Name": "unless-stopped"}
    assert started["volumes"] == {str(tmp_path / "balancer"): {"bind": "/usr/local/etc/haproxy", "mode": "ro"}}
    assert started["labels"]["sparkfleet.balancer.config"] == haproxy.config_digest(text)
    assert started["labels"]["sparkfleet.balancer.image"] == engine.images.present[res["image"]]
    assert res["container_id"] == engine.containers.items["sparkfleet-balancer"].id
    assert [(s["svname"], s["status"], s["admin_state"]) for s in res["servers"]] == [
        ("replica-0", "UP", "ready"), ("replica-1", "UP", "ready")]
    assert res["diff"][0] == {"before": "", "after": text, "before_header": str(cfg(tmp_path)),
                              "after_header": str(cfg(tmp_path))}

    rc, again = run(balancer, args(tmp_path))
    assert rc == 0 and again["changed"] is False and "diff" not in again
    assert len(engine.api.builds) == 1 and len(engine.containers.runs) == 1 and len(engine.checked) == 1
    assert engine.containers.items["sparkfleet-balancer"].kills == []
    assert again["container_id"] == res["container_id"]


def test_check_mode_on_a_bare_node_predicts_and_touches_nothing(engine, tmp_path):
    rc, res = run(balancer, args(tmp_path), check_mode=True)
    assert rc == 0, res
    assert res["changed"] is True and res["built"] is True and res["container_id"] == "" and res["servers"] == []
    assert res["diff"][0]["before"] == "" and res["diff"][0]["after"] == haproxy.render(8080, SERVERS)
    assert res["diff"][1]["after"]["image"] == res["image"]
    assert engine.api.builds == [] and engine.containers.runs == [] and engine.containers.checks == []
    assert not (tmp_path / "balancer").exists()


def test_a_new_configuration_reloads_the_balancer_without_a_restart(engine, tmp_path):
    run(balancer, args(tmp_path))
    container = engine.containers.items["sparkfleet-balancer"]
    container.haproxy.admin["replica-1"] = 8  # drained with balancer_server before this change
    old = cfg(tmp_path).read_text()
    three = SERVERS + [{"name": "replica-2", "address": "172.29.0.30:8000"}]

    rc, predicted = run(balancer, args(tmp_path, servers=three), check_mode=True)
    assert rc == 0 and predicted["changed"] is True and predicted["reloaded"] is True
    assert predicted["built"] is False and predicted["container_id"] == container.id
    assert len(predicted["diff"]) == 1 and predicted["diff"][0]["before"] == old
    assert "server replica-2 172.29.0.30:8000 check" in predicted["diff"][0]["after"]
    assert cfg(tmp_path).read_text() == old and container.kills == []

    rc, res = run(balancer, args(tmp_path, servers=three))
    assert rc == 0, res
    assert res["changed"] is True and res["reloaded"] is True and res["built"] is False
    assert container.kills == ["SIGUSR2"] and engine.containers.items["sparkfleet-balancer"] is container
    assert len(engine.containers.runs) == 1
    assert cfg(tmp_path).read_text() == haproxy.render(8080, three)
    assert container.haproxy.text == haproxy.render(8080, three)  # what the reload read
    # The drained server stays drained over the reload.
    assert {s["svname"]: s["admin_state"] for s in res["servers"]} == {
        "replica-0": "ready", "replica-1": "drain", "replica-2": "ready"}

    # The container's label still names the first configuration; the record of the reload keeps it at rest.
    rc, again = run(balancer, args(tmp_path, servers=three))
    assert rc == 0 and again["changed"] is False and container.kills == ["SIGUSR2"]


def test_a_configuration_haproxy_refuses_fails_and_replaces_nothing(engine, tmp_path):
    run(balancer, args(tmp_path))
    container = engine.containers.items["sparkfleet-balancer"]
    good = cfg(tmp_path).read_text()
    gone = SERVERS + [{"name": "replica-2", "address": "replica-gone.invalid:8000"}]
    rc, res = run(balancer, args(tmp_path, servers=gone))
    assert rc == 1
    assert res["msg"].startswith("balancer: haproxy -c refused the new configuration (exit 1); the live %s and the "
                                 "running balancer are unchanged:\n" % cfg(tmp_path))
    assert "'server replicas/replica-2' : could not resolve address 'replica-gone.invalid'" in res["msg"]
    assert cfg(tmp_path).read_text() == good and leftovers(tmp_path) == []
    assert container.kills == [] and engine.containers.items["sparkfleet-balancer"] is container
    assert container.haproxy.text == good
    rc, res = run(balancer, args(tmp_path))
    assert rc == 0 and res["changed"] is False


def test_a_new_base_image_rebuilds_and_recreates_the_container(engine, tmp_path):
    run(balancer, args(tmp_path))
    first = engine.containers.items["sparkfleet-balancer"]
    engine.images.present["debian:bookworm-slim"] = "sha256:" + "c2" * 32  # a newer bookworm-slim
    rc, res = run(balancer, args(tmp_path))
    assert rc == 0, res
    assert res["changed"] is True and res["built"] is True and res["reloaded"] is False
    assert first.removed and res["container_id"] != first.id
    assert res["diff"][1]["before"]["image"] != res["diff"][1]["after"]["image"] == res["image"]
    assert res["diff"][0]["before"] == res["diff"][0]["after"]  # the configuration is the same


def test_a_container_that_runs_another_image_is_recreated(engine, tmp_path):
    run(balancer, args(tmp_path))
    first = engine.containers.items["sparkfleet-balancer"]
    first.attrs["Image"] = "sha256:" + "ee" * 32  # the tag was moved to another image since
    rc, res = run(balancer, args(tmp_path))
    assert rc == 0 and res["changed"] is True and res["built"] is False
    assert first.removed and len(engine.containers.runs) == 2


def test_the_wait_fails_naming_each_server_that_is_not_up(engine, tmp_path):
    engine.health["replica-1"] = [("DOWN", "L4CON", "Connection refused", 0)]
    rc, res = run(balancer, args(tmp_path, wait_timeout=5))
    assert rc == 1
    assert res["msg"] == ("balancer: not every server is UP after 5 s: replica-1 is DOWN (check L4CON: Connection "
                          "refused)")


def test_the_wait_passes_once_every_server_passed_its_check(engine, tmp_path):
    engine.health["replica-1"] = [("UP 1/2", "INI", "", 0), ("UP 1/2", "INI", "", 0), ("UP", "L7OK", "", 0)]
    rc, res = run(balancer, args(tmp_path, wait_timeout=30))
    assert rc == 0, res
    assert [s["status"] for s in res["servers"]] == ["UP", "UP"]
    assert engine.commands.count("show stat") == 3


def test_a_balancer_that_does_not_come_up_fails_with_its_log(engine, tmp_path):
    engine.crash = True
    rc, res = run(balancer, args(tmp_path))
    assert rc == 1
    assert res["msg"].startswith("balancer: the balancer in sparkfleet-balancer (restarting) does not answer on its "
                                 "runtime API after 15 s (DockerFailure: show servers state replicas on the runtime "
                                 "API in sparkfleet-balancer exited 1: socat[9] E connect")
    assert "cannot bind socket (Address already in use) [0.0.0.0:8080]" in res["msg"]


def test_a_failed_build_names_the_step_and_the_end_of_its_log(engine, tmp_path):
    engine.build_fails = True
    rc, res = run(balancer, args(tmp_path))
    assert rc == 1
    assert res["msg"].startswith("balancer: building the balancer image sparkfleet-balancer:")
    assert (" on this node failed at step 2/4 (RUN apt-get update  && DEBIAN_FRONTEND=noninteractive apt-get install "
            "-y --no-install-recommends haproxy socat): The command '/bin/sh -c apt-get update ...' returned a "
            "non-zero code: 100\n--- last lines of the build ---\n") in res["msg"]
    assert res["msg"].endswith("E: Unable to locate package haproxy\n")
    assert engine.containers.runs == [] and not (tmp_path / "balancer").exists()


def test_a_base_image_that_is_not_on_the_node_is_pulled_outside_check_mode(engine, tmp_path):
    rc, res = run(balancer, args(tmp_path, base_image="debian:trixie-slim"), check_mode=True)
    assert rc == 0 and res["image"] == "unknown" and res["changed"] is True and engine.images.pulls == []
    rc, res = run(balancer, args(tmp_path, base_image="debian:trixie-slim"))
    assert rc == 0, res
    assert engine.images.pulls == ["debian:trixie-slim"]
    assert engine.api.builds[0]["dockerfile"].startswith("FROM debian:trixie-slim\n")


def test_bad_servers_fail_naming_the_field_before_anything_is_touched(engine, tmp_path):
    twice = [{"name": "replica-0", "address": "172.29.0.10:8000"}, {"name": "replica-0", "address": "172.29.0.20:8000"}]
    rc, res = run(balancer, args(tmp_path, servers=twice))
    assert rc == 1
    assert res["msg"] == "balancer: servers[1].name 'replica-0' is used twice; each server needs its own name"
    rc, res = run(balancer, args(tmp_path, servers=[{"name": "r0", "address": "172.29.0.10"}]))
    assert rc == 1 and res["msg"].startswith("balancer: servers[0].address must be host:port")
    assert engine.api.builds == [] and not (tmp_path / "balancer").exists()


def test_state_absent_removes_the_container_and_keeps_image_and_configuration(engine, tmp_path):
    run(balancer, args(tmp_path))
    container = engine.containers.items["sparkfleet-balancer"]
    rc, res = run(balancer, {"state": "absent"}, check_mode=True)
    assert rc == 0 and res["changed"] is True and not container.removed
    rc, res = run(balancer, {"state": "absent"})
    assert rc == 0 and res["changed"] is True and container.removed
    assert cfg(tmp_path).exists() and len(engine.images.present) == 2
    rc, res = run(balancer, {"state": "absent"})
    assert rc == 0 and res["changed"] is False


# balancer_server


@pytest.fixture
def running(engine, tmp_path):
    rc, res = run(balancer, args(tmp_path, servers=SERVERS + [{"name": "replica-2", "address": "172.29.0.30:8000"}]))
    assert rc == 0, res
    engine.commands.clear()
    return engine.containers.items["sparkfleet-balancer"]


def test_without_states_it_only_reads(engine, running):
    rc, res = run(balancer_server, {})
    assert rc == 0 and res["changed"] is False and res["changes"] == {}
    assert [(s["svname"], s["status"], s["admin_state"], s["scur"]) for s in res["servers"]] == [
        ("replica-0", "UP", "ready", 0), ("replica-1", "UP", "ready", 0), ("replica-2", "UP", "ready", 0)]
    assert not [c for c in engine.commands if c.startswith("set ")]


def test_drain_is_predicted_then_set_once(engine, running):
    rc, res = run(balancer_server, {"states": {"replica-1": "drain", "replica-0": "ready"}}, check_mode=True)
    assert rc == 0 and res["changed"] is True
    assert res["changes"] == {"replica-1": {"before": "ready", "after": "drain"}}
    assert res["diff"]["before"] == {"replica-0": "ready", "replica-1": "ready"}
    assert res["diff"]["after"] == {"replica-0": "ready", "replica-1": "drain"}
    assert running.haproxy.admin["replica-1"] == 0 and not [c for c in engine.commands if c.startswith("set ")]

    rc, res = run(balancer_server, {"states": {"replica-1": "drain", "replica-0": "ready"}})
    assert rc == 0 and res["changed"] is True
    assert [c for c in engine.commands if c.startswith("set ")] == ["set server replicas/replica-1 state drain"]
    assert {s["svname"]: (s["status"], s["admin_state"]) for s in res["servers"]}["replica-1"] == ("DRAIN", "drain")

    rc, res = run(balancer_server, {"states": {"replica-1": "drain", "replica-0": "ready"}})
    assert rc == 0 and res["changed"] is False and res["changes"] == {} and "diff" not in res
    assert len([c for c in engine.commands if c.startswith("set ")]) == 1


def test_wait_drained_fails_naming_the_server_and_its_open_sessions(engine, running):
    engine.health["replica-2"] = [("UP", "L7OK", "", 3)]
    rc, res = run(balancer_server, {"states": {"replica-2": "maint"}, "wait_drained": 10})
    assert rc == 1
    assert res["msg"] == ("balancer_server: sessions still open on the drained servers after 10 s: replica-2 has 3 "
                          "open session(s)")
    assert res["changed"] is True and running.haproxy.admin["replica-2"] == 1


def test_wait_drained_passes_once_the_sessions_have_ended(engine, running):
    engine.health["replica-2"] = [("UP", "L7OK", "", 2), ("UP", "L7OK", "", 1), ("UP", "L7OK", "", 0)]
    rc, res = run(balancer_server, {"states": {"replica-2": "drain"}, "wait_drained": 60})
    assert rc == 0, res
    assert {s["svname"]: s["scur"] for s in res["servers"]}["replica-2"] == 0


def test_wait_up_fails_naming_the_server_that_is_not_up(engine, running):
    running.haproxy.admin["replica-0"] = 1
    engine.health["replica-0"] = [("DOWN", "L7STS", "HTTP status check returned code <3C>503<3E>", 0)]
    rc, res = run(balancer_server, {"states": {"replica-0": "ready"}, "wait_up": 4})
    assert rc == 1
    assert res["msg"] == ("balancer_server: not every server is UP after 4 s: replica-0 is DOWN (check L7STS: HTTP "
                          "status check returned code <3C>503<3E>)")
    assert running.haproxy.admin["replica-0"] == 0


def test_a_server_the_backend_lacks_is_named_with_those_it_has(engine, running):
    rc, res = run(balancer_server, {"states": {"replica-7": "drain"}})
    assert rc == 1
    assert res["msg"] == ("balancer_server: backend replicas of sparkfleet-balancer has no server replica-7; it has: "
                          "replica-0, replica-1, replica-2")


def test_an_unknown_state_names_the_allowed_ones(engine, running):
    rc, res = run(balancer_server, {"states": {"replica-0": "off"}})
    assert rc == 1
    assert res["msg"] == "balancer_server: states[replica-0] must be one of ready, drain, maint, got 'off'"


def test_another_backend_name_fails_saying_haproxy_has_none(engine, running):
    rc, res = run(balancer_server, {"backend": "api"})
    assert rc == 1 and "Can't find backend." in res["msg"]


def test_without_a_balancer_container_it_fails_saying_so(engine):
    rc, res = run(balancer_server, {"states": {"replica-0": "drain"}})
    assert rc == 1
    assert res["msg"] == ("balancer_server: the balancer container sparkfleet-balancer is not running on this node "
                          "(no such container); run sparkfleet.vllm.balancer first")


def test_the_build_context_holds_the_dockerfile_only():
    with tarfile.open(fileobj=balancer.build_context("FROM x\n")) as tar:
        assert tar.getnames() == ["Dockerfile"]
        assert tar.extractfile("Dockerfile").read() == b"FROM x\n"
    assert isinstance(balancer.build_context("FROM x\n"), io.BytesIO)


def test_keep_serving_refuses_to_drain_the_last_replica_that_is_up_and_changes_nothing(engine, running):
    engine.health["replica-1"] = [("DOWN", "L4CON", "Connection refused", 0)]
    running.haproxy.admin["replica-2"] = 1  # in maintenance
    rc, res = run(balancer_server, {"states": {"replica-0": "drain"}, "keep_serving": True})
    assert rc == 1
    assert res["msg"].startswith("balancer_server: replica-0 not taken out of replicas: replica-1 is DOWN (check "
                                 "L4CON: Connection refused), ready; replica-2 is ")
    assert res["msg"].endswith(", maint, so the endpoint would answer nothing; bring another replica back first "
                               "(deploy.yml heals one that is down and puts every replica back in the balancer)")
    assert not [c for c in engine.commands if c.startswith("set ")]
    # With another replica UP and ready, the same drain goes through.
    engine.health["replica-1"] = [("UP", "L7OK", "", 0)]
    rc, res = run(balancer_server, {"states": {"replica-0": "drain"}, "keep_serving": True})
    assert rc == 0 and res["changed"] is True
