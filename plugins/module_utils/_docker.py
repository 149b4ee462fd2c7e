# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""The one way this collection talks to a node's Docker engine: the Docker SDK for Python.

Containers are declared by a spec; a container is (re)created only when its spec's digest, kept in a
label, changes, which is what makes a second run report changed=false. Every failure goes through
``DockerFailure`` with the operation named, and never with the environment (it may hold secrets).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import re

try:
    import docker
    from docker.errors import APIError, DockerException, ImageNotFound, NotFound

    HAS_DOCKER = True
    IMPORT_ERROR = None
except ImportError as exc:  # reported by the module through require()
    HAS_DOCKER = False
    IMPORT_ERROR = exc

    class DockerException(Exception):  # stand-ins with the SDK's hierarchy, never raised without it
        pass

    class APIError(DockerException):
        pass

    class NotFound(APIError):
        pass

    class ImageNotFound(NotFound):
        pass


SPEC_LABEL = "sparkfleet.spec"
ROLE_LABEL = "sparkfleet.role"


class DockerFailure(Exception):
    pass


def require(module):
    if not HAS_DOCKER:
        module.fail_json(msg="the Docker SDK for Python is needed on %s (Debian: apt-get install python3-docker;"
                             " pip: docker): %s" % (module.params.get("_ansible_remote_host") or "this node",
                                                    IMPORT_ERROR))


def connect(timeout=600):
    try:
        cli = docker.from_env(timeout=timeout)
        cli.ping()
        return cli
    except DockerException as exc:
        raise DockerFailure("cannot reach the Docker engine: %s" % exc) from exc


def image_id(cli, ref):
    try:
        return cli.images.get(ref).id
    except ImageNotFound:
        return None
    except APIError as exc:
        raise DockerFailure("inspecting image %s: %s" % (ref, exc)) from exc


def binds(items, base=None):
    """``host:container[:ro|rw]`` strings -> the SDK's volumes dict, on top of ``base``."""
    out = dict(base or {})
    for item in items:
        parts = str(item).split(":")
        bad_mode = len(parts) == 3 and parts[2] not in ("ro", "rw")
        if len(parts) not in (2, 3) or not parts[0] or not parts[1] or bad_mode:
            raise DockerFailure("volumes entry %r must be host_path:container_path[:ro|rw]" % (item,))
        out[parts[0]] = {"bind": parts[1], "mode": parts[2] if len(parts) == 3 else "rw"}
    return out


def gpu_request():
    """How every container of the collection asks for the node's GPU: all of them, with the GPU capability.

    This is ``docker run --gpus all``. Without it the NVIDIA container runtime exposes nothing: Ray then
    counts 0 GPUs and vLLM finds no CUDA device, even on a Spark whose host sees its GB10.
    """
    return [{"Driver": "", "Count": -1, "DeviceIDs": None, "Capabilities": [["gpu"]], "Options": {}}]


def ensure_volume(cli, name, driver_opts):
    """A named volume with these local-driver options; a volume declared differently is recreated.

    Containers that still use an outdated volume are removed first (they are restarted by their own
    module with the new declaration). Returns True when the volume was (re)created.
    """
    try:
        vol = cli.volumes.get(name)
        if (vol.attrs.get("Options") or {}) == driver_opts:
            return False
        for user in cli.containers.list(all=True, filters={"volume": name}):
            user.remove(force=True)
        vol.remove(force=True)
    except NotFound:
        pass
    except APIError as exc:
        raise DockerFailure("replacing volume %s: %s" % (name, exc)) from exc
    try:
        cli.volumes.create(name, driver="local", driver_opts=driver_opts)
    except APIError as exc:
        raise DockerFailure("creating volume %s: %s" % (name, exc)) from exc
    return True


def spec_digest(spec):
    return hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()[:24]


def current(cli, name):
    try:
        return cli.containers.get(name)
    except NotFound:
        return None


def container_state(container):
    if container is None:
        return {"exists": False, "running": False, "spec": None}
    container.reload()
    return {"exists": True, "running": container.status == "running",
            "spec": container.labels.get(SPEC_LABEL), "status": container.status, "id": container.id}


def needs_change(state, digest):
    """Pure: recreate when missing, stopped, or declared differently."""
    return not (state["exists"] and state["running"] and state["spec"] == digest)


def replace(cli, name, spec, role, digest=None):
    """Remove ``name`` if present and start it anew from ``spec`` (a dict of containers.run kwargs).

    ``digest`` is the label to compare on later runs; pass one computed without secret values when the
    spec carries any.
    """
    digest = digest or spec_digest(spec)
    old = current(cli, name)
    try:
        if old is not None:
            old.remove(force=True)
        kwargs = dict(spec)
        kwargs["labels"] = dict(kwargs.get("labels") or {}, **{SPEC_LABEL: digest, ROLE_LABEL: role})
        return cli.containers.run(name=name, detach=True, **kwargs)
    except (APIError, DockerException) as exc:
        raise DockerFailure("starting container %s from %s: %s" % (name, spec.get("image"), exc)) from exc


def remove(cli, name):
    old = current(cli, name)
    if old is None:
        return False
    try:
        old.remove(force=True)
    except APIError as exc:
        raise DockerFailure("removing container %s: %s" % (name, exc)) from exc
    return True


def remove_image(cli, image_id, what):
    try:
        cli.images.remove(image_id, force=True)
    except APIError as exc:
        raise DockerFailure("removing image %s: %s" % (what, exc)) from exc


def exec_text(container, argv, env=None, what=None):
    """Run argv in a container and return its stdout; a failure names ``what`` (argv[0]) and holds stderr."""
    what = what or argv[0]
    try:
        res = container.exec_run(argv, demux=True, environment=env)
    except DockerException as exc:
        raise DockerFailure("%s in %s: %s" % (what, container.name, exc)) from exc
    out, err = res.output if isinstance(res.output, tuple) else (res.output, b"")
    out, err = (out or b"").decode(errors="replace"), (err or b"").decode(errors="replace")
    if res.exit_code != 0:
        raise DockerFailure("%s in %s exited %s: %s" % (what, container.name, res.exit_code, (err or out)[-1500:]))
    return out


def exec_json(container, argv, env=None):
    """Run argv in a container and parse its stdout as JSON; stderr goes into the failure."""
    out = exec_text(container, argv, env)
    last = (out.strip().splitlines() or [""])[-1]
    try:
        return json.loads(last)
    except ValueError:
        shown = last if len(last) <= 600 else last[:300] + " ... " + last[-300:]
        raise DockerFailure("%s in %s printed no JSON as its last line: %s"
                            % (argv[0], container.name, shown)) from None


def logs(container, tail=None):
    kwargs = {"stdout": True, "stderr": True}
    if tail:
        kwargs["tail"] = tail
    return container.logs(**kwargs).decode(errors="replace")


def _stamp_ns(stamp):
    """Docker's RFC 3339 log timestamp (nanoseconds, trailing zeros trimmed, always UTC) as integer ns."""
    whole, _dot, frac = stamp.rstrip("Z").partition(".")
    seconds = datetime.datetime.strptime(whole, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=datetime.timezone.utc)
    return int(seconds.timestamp()) * 10**9 + int((frac + "000000000")[:9])


def started_at(container):
    """The container's start time, seconds since the epoch."""
    return _stamp_ns(container.attrs["State"]["StartedAt"]) / 1e9


def logs_after(container, cursor):
    """The log entries written after ``cursor``, as [(ns, text)], and the cursor that follows them.

    ``cursor`` is plain data (``None`` at first): ``since``, a whole second, and ``skip``, how many of the
    entries Docker returns for ``since`` were read already. Docker filters on each entry's own timestamp
    (at or after ``since``) and returns entries in the order it stored them, so skipping that many is exact
    even where stdout and stderr interleave out of timestamp order. The next ``since`` lies a second before
    the newest entry, so an entry stamped a little earlier than one stored before it is not lost. A line
    without a stamp (a piece of an entry that held a newline) belongs to the entry before it.
    """
    cursor = cursor or {"since": 0, "skip": 0}
    kwargs = {"stdout": True, "stderr": True, "timestamps": True}
    if cursor["since"]:
        kwargs["since"] = cursor["since"]
    raw = container.logs(**kwargs).decode(errors="replace")
    entries = []
    for line in raw.split("\n")[:-1] if raw.endswith("\n") else raw.split("\n"):
        stamp, _sp, text = line.partition(" ")
        try:
            entries.append([_stamp_ns(stamp), text + "\n"])
        except ValueError:
            if entries:
                entries[-1][1] += line + "\n"
            else:
                entries.append([cursor["since"] * 10**9, line + "\n"])
    new = entries[cursor["skip"]:]
    if not entries:
        return [], cursor
    since = max(0, max(ns for ns, _text in entries) // 10**9 - 1)
    return [tuple(e) for e in new], {"since": since, "skip": sum(1 for ns, _text in entries if ns >= since * 10**9)}


def _env_dict(items):
    return dict(str(item).partition("=")[::2] for item in items or ())


# Environment names whose values a diff never shows (API keys, tokens, passwords, credentials).
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL", re.I)


def container_diff(cli, existing, spec):
    """``{"before", "after"}`` for ``--diff``: the image, command and environment of the running container
    and of the declared ``spec``. Variables whose value is the image's own default are left out of both
    sides. A secret (SECRET_NAME) shows only as set, or as changed when its value differs."""
    before, before_env, image_env = {}, {}, {}
    if existing is not None:
        config = existing.attrs.get("Config") or {}
        try:
            image_env = _env_dict((cli.images.get(config.get("Image")).attrs.get("Config") or {}).get("Env"))
        except (APIError, DockerException):
            image_env = {}
        before_env = _env_dict(config.get("Env"))
        before = {"image": config.get("Image"), "command": list(config.get("Cmd") or [])}
    after_env = {k: str(v) for k, v in (spec.get("environment") or {}).items()}

    def shown(env, other):
        out = {}
        for name, value in sorted(env.items()):
            if image_env.get(name) == value:
                continue
            if not SECRET_NAME.search(name):
                out[name] = value
            elif other is not None and name in other and other[name] != value:
                out[name] = "(set, changed)"
            else:
                out[name] = "(set, not shown)"
        return out

    after = {"image": spec.get("image"), "command": list(spec.get("command") or []),
             "environment": shown(after_env, before_env if existing is not None else None)}
    if existing is not None:
        before["environment"] = shown(before_env, None)
    return {"before": before, "after": after}
