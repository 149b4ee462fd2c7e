# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""The HAProxy load balancer in front of the vLLM replicas, as pure functions (no Docker here).

Each replica is a Ray cluster of its own whose head serves the OpenAI API. The balancer is one HAProxy in
HTTP mode: ``render`` writes its haproxy.cfg, ``dockerfile`` and ``image_tag`` describe the image it runs
in, and the rest reads and writes its runtime API (the admin socket), which the modules reach with
``docker exec`` and socat: ``runtime_argv`` is the command, ``parse_stat`` and ``parse_servers_state`` read
``show stat`` and ``show servers state`` (``observe`` joins them, given a function that asks), and
``server_commands`` sets the servers' admin states; ``not_up`` and ``open_sessions`` are the predicates the
waits use.
"""

from __future__ import annotations

import csv
import hashlib
import re

from ansible_collections.sparkfleet.vllm.plugins.module_utils import _docker

FRONTEND = "openai_api"
BACKEND = "replicas"
SOCKET = "/run/haproxy/admin.sock"
# The config directory is mounted here (read-only); a directory, not the file, so that a file replaced on
# the host by a rename is the one HAProxy reads on its next reload.
MOUNT = "/usr/local/etc/haproxy"
CONFIG_NAME = "haproxy.cfg"
STATES = ("ready", "drain", "maint")

NAME = re.compile(r"[A-Za-z0-9_.-]+")
HOST = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?")
HEALTH_PATH = re.compile(r"/[!-~]*")  # printable ASCII, no space: it is one word of the config line

TEMPLATE = """\
# Rendered by sparkfleet.vllm (module_utils/haproxy.py, the balancer module); a hand edit is overwritten.
global
    master-worker
    # The runtime API (show stat, set server ... state): the balancer_server module, through docker exec.
    stats socket {socket} mode 600 level admin
    user haproxy
    group haproxy
    log stdout format raw local0 info

defaults
    mode http
    log global
    option httplog
    option dontlognull
    timeout connect 5s
    # A streamed generation may run for long and be silent for long (a long prompt's prefill).
    timeout client 1h
    timeout server 1h
    timeout http-request 30s
    timeout check 5s

frontend {frontend}
    bind *:{port}
    # Requests pass through as clients sent them: their headers, Authorization: Bearer <api key>
    # included, are neither read, rewritten nor logged here. Each replica checks the key itself.
    default_backend {backend}

backend {backend}
    balance leastconn
    option httpchk GET {health_path}
    http-check expect status 200
    default-server inter {inter}s fall {fall} rise {rise}
    option redispatch
    retries 2
    # Retried on another replica only when the request never reached one (conn-failure) or one closed the
    # connection without a byte of answer (empty-response). Never on a response timeout: a completion
    # must never be generated twice.
    retry-on conn-failure empty-response
{servers}"""


def _positive(field, value, top=None):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1 or (top and value > top):
        raise ValueError("%s must be an integer from 1%s, got %r" % (field, " to %d" % top if top else " up", value))
    return value


def check_address(field, address):
    """``host:port`` with a host name or an IPv4 address and a port 1..65535; returns it."""
    host, sep, port = str(address).rpartition(":")
    if not sep or not HOST.fullmatch(host) or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError("%s must be host:port (a host name or an IPv4 address, a port 1 to 65535), got %r"
                         % (field, address))
    return "%s:%d" % (host, int(port))


def check_name(field, name):
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise ValueError("%s must match [A-Za-z0-9_.-]+, got %r" % (field, name))
    return name


def render(port, servers, health_path="/health", check_interval_s=2, fall=2, rise=2):
    """The haproxy.cfg text for ``servers`` ([{"name", "address"}]) behind ``*:port``; the same input gives
    the same bytes. Raises ValueError naming the field at fault."""
    _positive("port", port, 65535)
    _positive("check_interval_s", check_interval_s)
    _positive("fall", fall)
    _positive("rise", rise)
    if not isinstance(health_path, str) or not HEALTH_PATH.fullmatch(health_path):
        raise ValueError("health_path must be a path that starts with / and holds no space, got %r" % (health_path,))
    if not isinstance(servers, (list, tuple)) or not servers:
        raise ValueError("servers must list at least one server ({name, address})")
    lines, seen = [], set()
    for i, server in enumerate(servers):
        if not isinstance(server, dict) or set(server) - {"name", "address"}:
            raise ValueError("servers[%d] must be a dict with the keys name and address, got %r" % (i, server))
        name = check_name("servers[%d].name" % i, server.get("name"))
        if name in seen:
            raise ValueError("servers[%d].name %r is used twice; each server needs its own name" % (i, name))
        seen.add(name)
        address = check_address("servers[%d].address" % i, server.get("address"))
        lines.append("    server %s %s check\n" % (name, address))
    return TEMPLATE.format(socket=SOCKET, frontend=FRONTEND, backend=BACKEND, port=port, health_path=health_path,
                           inter=check_interval_s, fall=fall, rise=rise, servers="".join(lines))


def config_digest(text):
    return hashlib.sha256(text.encode()).hexdigest()[:24]


DOCKERFILE = """\
FROM {base}
RUN apt-get update \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends haproxy socat \\
 && rm -rf /var/lib/apt/lists/* \\
 && mkdir -p /run/haproxy {mount}
# docker stop: a soft stop, HAProxy finishes the requests in flight.
STOPSIGNAL SIGUSR1
CMD ["haproxy", "-W", "-db", "-f", "{mount}/{config}"]
"""


def dockerfile(base_image):
    if not re.fullmatch(r"[^\s\0\"]+", str(base_image)):
        raise ValueError("base_image %r is not an image reference" % (base_image,))
    return DOCKERFILE.format(base=base_image, mount=MOUNT, config=CONFIG_NAME)


def image_tag(base_id, dockerfile_text, repo="sparkfleet-balancer"):
    """Content address: the base image's ID and the Dockerfile, the image's whole build context."""
    return "%s:%s" % (repo, hashlib.sha256(("%s\0%s" % (base_id, dockerfile_text)).encode()).hexdigest()[:16])


def runtime_argv(command):
    """``docker exec`` argv that sends one runtime API command and prints the answer. The command is an
    argument of the shell, never part of its script."""
    return ["sh", "-c", 'printf "%s\\n" "$1" | socat stdio ' + SOCKET, "sh", command]


# show stat columns kept as text even when they hold only digits (a server may be named "1").
TEXT_FIELDS = frozenset(("pxname", "svname", "status", "check_status", "last_chk", "last_agt", "addr", "cookie",
                         "mode", "algo", "agent_status", "check_desc", "agent_desc", "tracked"))


def parse_stat(csv_text):
    """Rows of ``show stat`` (its CSV, the header line ``# pxname,svname,...``) as dicts. Columns that
    hold numbers are ints (``scur``, ``stot``, ``type``, ...), an empty number is None."""
    lines = csv_text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("# ")), None)
    if start is None:
        raise ValueError("show stat printed no header line (# pxname,svname,...): %r" % csv_text[:300])
    rows = []
    for raw in csv.DictReader([lines[start][2:]] + [x for x in lines[start + 1:] if x.strip()]):
        row = {}
        for key, value in raw.items():
            if not key:  # every line ends with a comma: an unnamed last column
                continue
            if key in TEXT_FIELDS:
                row[key] = value or ""
            elif re.fullmatch(r"-?[0-9]+", value or ""):
                row[key] = int(value)
            else:
                row[key] = value or None
        rows.append(row)
    for row in rows:
        if not isinstance(row.get("scur"), int) or "pxname" not in row or "svname" not in row:
            raise ValueError("show stat row without pxname, svname or a number in scur: %r" % (row,))
    return rows


def server_rows(rows, backend=BACKEND):
    """The server rows of ``backend`` (without its FRONTEND and BACKEND summary rows)."""
    return [r for r in rows if r["pxname"] == backend and r["svname"] not in ("FRONTEND", "BACKEND")]


# show servers state: srv_admin_state bits set by "set server ... state" (FMAINT, FDRAIN); the others come
# from the configuration, a tracked server, DNS or the health checks.
ADMIN_FMAINT, ADMIN_FDRAIN = 0x01, 0x08


def parse_servers_state(text):
    """Rows of ``show servers state [<backend>]`` ({be_name, srv_name, srv_admin_state, ...}): a version
    line, a ``# be_id be_name ...`` header, then one space-separated line per server."""
    header, rows = None, []
    for line in text.splitlines():
        if line.startswith("# "):
            header = line[2:].split()
        elif header and line.strip():
            values = line.split()
            row = dict(zip(header, values))
            for key in ("srv_op_state", "srv_admin_state", "srv_uweight", "srv_iweight"):
                if key in row:
                    row[key] = int(row[key])
            rows.append(row)
    if header is None or "srv_name" not in header or "srv_admin_state" not in header:
        raise ValueError("show servers state printed no header line (# be_id be_name ...): %r" % text[:300])
    return rows


def admin_state(row):
    """The state that ``set server ... state`` gave a server: maint, drain or ready."""
    flags = row["srv_admin_state"]
    return "maint" if flags & ADMIN_FMAINT else "drain" if flags & ADMIN_FDRAIN else "ready"


def server_commands(backend, states):
    """Runtime API lines that give each server (``states``: name -> ready|drain|maint) its admin state,
    in name order."""
    check_name("backend", backend)
    out = []
    for name, state in sorted((states or {}).items()):
        check_name("states key", name)
        if state not in STATES:
            raise ValueError("states[%s] must be one of %s, got %r" % (name, ", ".join(STATES), state))
        out.append("set server %s/%s state %s" % (backend, name, state))
    return out


def reply_error(reply):
    """A ``set server`` command answers nothing when it worked, a sentence when it did not."""
    text = (reply or "").strip()
    return text or None


CHECK_OK = ("L7OK", "L7OKC", "L6OK", "L4OK")


def is_up(row):
    """UP for HAProxy (it sends the server traffic) and its last health check passed; a server that has
    not been checked yet (check_status INI) is not UP yet."""
    status = (row.get("status") or "").split()
    return bool(status) and status[0] == "UP" and (row.get("check_status") or "").lstrip("* ") in CHECK_OK


def describe(row):
    """``replica-1 is DOWN (check L4CON: Connection refused)``."""
    check = (row.get("check_status") or "").lstrip("* ") or "none"
    detail = row.get("last_chk") or row.get("check_desc") or ""
    return "%s is %s (check %s%s)" % (row["svname"], row.get("status") or "unknown", check,
                                      ": %s" % detail if detail else "")


def not_up(rows, names):
    """Predicate of the wait for servers: (every one of ``names`` is UP, what is not)."""
    by_name = {r["svname"]: r for r in rows}
    missing = ["%s is not in the backend" % n for n in names if n not in by_name]
    down = [describe(by_name[n]) for n in names if n in by_name and not is_up(by_name[n])]
    return not (missing or down), "; ".join(missing + down) or "all UP: %s" % ", ".join(names)


def serving_without(rows, names):
    """(whether a server other than ``names`` is UP and ready, the others' states in words)."""
    others = [r for r in rows if r["svname"] not in names]
    if any(is_up(r) and r.get("admin_state", "ready") == "ready" for r in others):
        return True, ""
    return False, "; ".join("%s, %s" % (describe(r), r.get("admin_state") or "ready") for r in others) or \
        "no other server is in the backend"


def open_sessions(rows, names):
    """Predicate of the wait for drained servers: (none of ``names`` has a session open, which have)."""
    by_name = {r["svname"]: r for r in rows}
    busy = ["%s has %d open session(s)" % (n, by_name[n]["scur"]) for n in names if by_name.get(n, {}).get("scur")]
    return not busy, "; ".join(busy) or "no open sessions: %s" % ", ".join(names)


SUMMARY_FIELDS = ("pxname", "svname", "addr", "status", "check_status", "last_chk", "scur", "smax", "stot", "qcur",
                  "weight", "lastchg", "downtime", "hrsp_5xx")


def summary(rows, backend=BACKEND, admin=None):
    """What the modules return for each server of ``backend``: the useful columns of ``show stat``, and
    its admin state (ready, drain, maint) when ``admin`` ({name: state}) knows it."""
    out = []
    for row in server_rows(rows, backend):
        item = {k: row.get(k) for k in SUMMARY_FIELDS}
        if admin is not None:
            item["admin_state"] = admin.get(row["svname"])
        out.append(item)
    return out


def observe(ask, backend=BACKEND):
    """The servers of ``backend`` as ``summary`` gives them, admin states included, read with ``ask``
    (a runtime API command -> its reply). Raises ValueError when a reply is not what HAProxy prints."""
    state = parse_servers_state(ask("show servers state %s" % backend))
    admin = {r["srv_name"]: admin_state(r) for r in state if r.get("be_name") == backend}
    return summary(parse_stat(ask("show stat")), backend, admin)


def held_out(rows):
    """Pure: each server of ``rows`` (observe()'s) that an admin state keeps out of the balancer, in words:
    ``replica-1 is held out (drain)``. A server that is DOWN for its health check is its head's finding."""
    return ["%s is held out (%s)" % (r["svname"], r.get("admin_state")) for r in rows
            if r.get("admin_state") not in (None, "ready")]


def read(container, backend=BACKEND):
    """observe() on the runtime API of the balancer in ``container`` (docker exec + socat)."""
    return observe(lambda command: _docker.exec_text(container, runtime_argv(command),
                                                     what="%s on the runtime API" % command), backend)
