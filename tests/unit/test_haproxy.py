"""module_utils/haproxy: the balancer's haproxy.cfg, and the replies of its runtime API.

The runtime API texts below are what HAProxy 2.6.12 (Debian bookworm's haproxy package, the one the
balancer image installs) printed for a backend of four servers: replica-0 UP, replica-1 drained while it
held a request, replica-2 in maintenance, replica-3 refusing connections; and, at the start, servers whose
first check had not run yet.
"""

import shutil
import subprocess

import pytest

from ansible_collections.sparkfleet.vllm.plugins.module_utils import haproxy

SERVERS = [{"name": "replica-0", "address": "172.29.0.10:8000"}, {"name": "replica-1", "address": "172.29.0.20:8000"}]

# The header line of show stat, as HAProxy 2.6 (Debian bookworm) prints it.
STAT_HEADER = (
    "# pxname,svname,qcur,qmax,scur,smax,slim,stot,bin,bout,dreq,dresp,ereq,econ,eresp,wretr,wredis,statu"
    "s,weight,act,bck,chkfail,chkdown,lastchg,downtime,qlimit,pid,iid,sid,throttle,lbtot,tracked,type,rat"
    "e,rate_lim,rate_max,check_status,check_code,check_duration,hrsp_1xx,hrsp_2xx,hrsp_3xx,hrsp_4xx,hrsp_"
    "5xx,hrsp_other,hanafail,req_rate,req_rate_max,req_tot,cli_abrt,srv_abrt,comp_in,comp_out,comp_byp,co"
    "mp_rsp,lastsess,last_chk,last_agt,qtime,ctime,rtime,ttime,agent_status,agent_code,agent_duration,che"
    "ck_desc,agent_desc,check_rise,check_fall,check_health,agent_rise,agent_fall,agent_health,addr,cookie"
    ",mode,algo,conn_rate,conn_rate_max,conn_tot,intercepted,dcon,dses,wrew,connect,reuse,cache_lookups,c"
    "ache_hits,srv_icur,src_ilim,qtime_max,ctime_max,rtime_max,ttime_max,eint,idle_conn_cur,safe_conn_cur"
    ",used_conn_cur,need_conn_est,uweight,agg_server_status,agg_server_check_status,agg_check_status,-,ss"
    "l_sess,ssl_reused_sess,ssl_failed_handshake,h2_headers_rcvd,h2_data_rcvd,h2_settings_rcvd,h2_rst_str"
    "eam_rcvd,h2_goaway_rcvd,h2_detected_conn_protocol_errors,h2_detected_strm_protocol_errors,h2_rst_str"
    "eam_resp,h2_goaway_resp,h2_open_connections,h2_backend_open_streams,h2_total_connections,h2_backend_"
    "total_streams,h1_open_connections,h1_open_streams,h1_total_connections,h1_total_streams,h1_bytes_in,"
    "h1_bytes_out,h1_spliced_bytes_in,h1_spliced_bytes_out,\n"
)

SHOW_STAT = STAT_HEADER + (
    "openai_api,FRONTEND,,,2,2,9983,2,0,0,0,0,0,,,,,OPEN,,,,,,,,,1,2,0,,,,0,2,0,2,,,,0,0,0,0,0,0,,2,2,2,,"
    ",0,0,0,0,,,,,,,,,,,,,,,,,,,,,http,,2,2,2,0,0,0,0,,,0,0,,,,,,,0,,,,,,,,,-,0,0,0,0,0,0,0,0,0,0,0,0,0,0"
    ",0,0,2,2,2,2,246,184,0,0,\n"
    "replicas,replica-0,0,0,1,1,,1,0,0,,0,,0,0,0,0,UP,1,1,0,0,0,6,0,,1,3,1,,1,,2,1,,1,L7OK,200,1,0,1,0,0,"
    "0,0,,,,1,0,0,,,,,0,,,0,0,0,0,,,,Layer7 check passed,,2,2,3,,,,127.0.0.1:18001,,http,,,,,,,,0,1,0,,,0"
    ",,0,0,0,0,0,0,0,1,1,1,,,,-,0,0,0,,,,,,,,,,,,,,,,,,,,,,\n"
    "replicas,replica-1,0,0,1,1,,1,0,0,,0,,0,0,0,0,DRAIN,1,1,0,0,0,0,0,,1,3,2,,1,,2,1,,1,L7OK,200,1,0,1,0"
    ",0,0,0,,,,1,0,0,,,,,0,,,0,0,0,0,,,,Layer7 check passed,,2,2,3,,,,127.0.0.1:18001,,http,,,,,,,,0,1,0,"
    ",,0,,0,0,0,0,0,0,0,1,1,1,,,,-,0,0,0,,,,,,,,,,,,,,,,,,,,,,\n"
    "replicas,replica-2,0,0,0,0,,0,0,0,,0,,0,0,0,0,MAINT,1,1,0,1,1,4,4,,1,3,3,,0,,2,0,,0,,,,0,0,0,0,0,0,,"
    ",,0,0,0,,,,,-1,,,0,0,0,0,,,,,,,,,,,,127.0.0.1:18002,,http,,,,,,,,0,0,0,,,0,,0,0,0,0,0,0,0,0,1,1,,,,-"
    ",0,0,0,,,,,,,,,,,,,,,,,,,,,,\n"
    "replicas,replica-3,0,0,0,0,,0,0,0,,0,,0,0,0,0,DOWN,1,1,0,1,1,4,4,,1,3,4,,0,,2,0,,0,L4CON,,0,0,0,0,0,"
    "0,0,,,,0,0,0,,,,,-1,Connection refused,,0,0,0,0,,,,Layer4 connection problem,,2,2,0,,,,127.0.0.1:180"
    "03,,http,,,,,,,,0,0,0,,,0,,0,0,0,0,0,0,0,0,1,1,,,,-,0,0,0,,,,,,,,,,,,,,,,,,,,,,\n"
    "replicas,BACKEND,0,0,2,2,999,2,0,0,0,0,,0,0,0,0,UP,1,1,0,,0,6,0,,1,3,0,,2,,1,2,,2,,,,0,0,0,0,0,0,,,,"
    "0,0,0,0,0,0,0,0,,,0,0,0,0,,,,,,,,,,,,,,http,leastconn,,,,,,,0,2,0,0,0,,,0,0,0,0,0,,,,,1,0,0,0,-,0,0,"
    "0,0,0,0,0,0,0,0,0,0,0,0,0,0,2,2,14,14,742,352,0,0,\n"
    "\n"
)

SHOW_STAT_STARTING = STAT_HEADER + (
    "openai_api,FRONTEND,,,0,0,9983,0,0,0,0,0,0,,,,,OPEN,,,,,,,,,1,2,0,,,,0,0,0,0,,,,0,0,0,0,0,0,,0,0,0,,"
    ",0,0,0,0,,,,,,,,,,,,,,,,,,,,,http,,0,0,0,0,0,0,0,,,0,0,,,,,,,0,,,,,,,,,-,0,0,0,0,0,0,0,0,0,0,0,0,0,0"
    ",0,0,0,0,0,0,0,0,0,0,\n"
    "replicas,replica-0,0,0,0,0,,0,0,0,,0,,0,0,0,0,UP,1,1,0,0,0,1,0,,1,3,1,,0,,2,0,,0,L7OK,200,4,0,0,0,0,"
    "0,0,,,,0,0,0,,,,,-1,,,0,0,0,0,,,,Layer7 check passed,,2,2,3,,,,127.0.0.1:18001,,http,,,,,,,,0,0,0,,,"
    "0,,0,0,0,0,0,0,0,0,1,1,,,,-,0,0,0,,,,,,,,,,,,,,,,,,,,,,\n"
    "replicas,replica-1,0,0,0,0,,0,0,0,,0,,0,0,0,0,UP 1/2,1,1,0,0,0,1,0,,1,3,2,,0,,2,0,,0,INI,,,0,0,0,0,0"
    ",0,,,,0,0,0,,,,,-1,,,0,0,0,0,,,,Initializing,,2,2,2,,,,127.0.0.1:18001,,http,,,,,,,,0,0,0,,,0,,0,0,0"
    ",0,0,0,0,0,0,1,,,,-,0,0,0,,,,,,,,,,,,,,,,,,,,,,\n"
    "replicas,replica-2,0,0,0,0,,0,0,0,,0,,0,0,0,0,UP 1/2,1,1,0,0,0,1,0,,1,3,3,,0,,2,0,,0,INI,,,0,0,0,0,0"
    ",0,,,,0,0,0,,,,,-1,,,0,0,0,0,,,,Initializing,,2,2,2,,,,127.0.0.1:18002,,http,,,,,,,,0,0,0,,,0,,0,0,0"
    ",0,0,0,0,0,0,1,,,,-,0,0,0,,,,,,,,,,,,,,,,,,,,,,\n"
    "replicas,replica-3,0,0,0,0,,0,0,0,,0,,0,0,0,0,UP 1/2,1,1,0,0,0,1,0,,1,3,4,,0,,2,0,,0,INI,,,0,0,0,0,0"
    ",0,,,,0,0,0,,,,,-1,,,0,0,0,0,,,,Initializing,,2,2,2,,,,127.0.0.1:18003,,http,,,,,,,,0,0,0,,,0,,0,0,0"
    ",0,0,0,0,0,0,1,,,,-,0,0,0,,,,,,,,,,,,,,,,,,,,,,\n"
    "replicas,BACKEND,0,0,0,0,999,0,0,0,0,0,,0,0,0,0,UP,4,4,0,,0,1,0,,1,3,0,,0,,1,0,,0,,,,0,0,0,0,0,0,,,,"
    "0,0,0,0,0,0,0,-1,,,0,0,0,0,,,,,,,,,,,,,,http,leastconn,,,,,,,0,0,0,0,0,,,0,0,0,0,0,,,,,4,0,0,0,-,0,0"
    ",0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,1,1,94,24,0,0,\n"
    "\n"
)

SHOW_SERVERS_STATE = (
    "1\n"
    "# be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state srv_uweight srv_iweight srv_ti"
    "me_since_last_change srv_check_status srv_check_result srv_check_health srv_check_state srv_agent_st"
    "ate bk_f_forced_id srv_f_forced_id srv_fqdn srv_port srvrecord srv_use_ssl srv_check_port srv_check_"
    "addr srv_agent_addr srv_agent_port\n"
    "3 replicas 1 replica-0 127.0.0.1 2 0 1 1 6 15 3 3 6 0 0 0 - 18001 - 0 0 - - 0\n"
    "3 replicas 2 replica-1 127.0.0.1 2 8 1 1 0 15 3 3 6 0 0 0 - 18001 - 0 0 - - 0\n"
    "3 replicas 3 replica-2 127.0.0.1 0 1 1 1 4 8 2 0 14 0 0 0 - 18002 - 0 0 - - 0\n"
    "3 replicas 4 replica-3 127.0.0.1 0 0 1 1 4 8 2 0 6 0 0 0 - 18003 - 0 0 - - 0\n"
    "\n"
)


def lines(text):
    return [line.strip() for line in text.splitlines()]


def test_render_says_what_matters():
    cfg = haproxy.render(8080, SERVERS)
    got = lines(cfg)
    for line in ("global", "master-worker", "stats socket /run/haproxy/admin.sock mode 600 level admin",
                 "mode http", "bind *:8080", "default_backend replicas", "backend replicas", "balance leastconn",
                 "option httpchk GET /health", "http-check expect status 200", "default-server inter 2s fall 2 rise 2",
                 "option redispatch", "retries 2", "retry-on conn-failure empty-response", "timeout connect 5s",
                 "timeout client 1h", "timeout server 1h", "timeout http-request 30s",
                 "server replica-0 172.29.0.10:8000 check", "server replica-1 172.29.0.20:8000 check"):
        assert line in got, line
    # In the foreground of its container, never retried after a response timeout, headers untouched.
    assert "daemon" not in got
    assert "response-timeout" not in cfg
    assert "Authorization: Bearer <api key>" in cfg
    assert not [x for x in got if x.startswith(("http-request set-header", "http-request del-header", "option forwardfor"))]
    # The servers keep their order; the backend is the one balancer_server defaults to.
    assert cfg.index("replica-0 ") < cfg.index("replica-1 ")
    assert haproxy.BACKEND == "replicas"


def test_render_is_stable_and_follows_its_arguments():
    assert haproxy.render(8080, SERVERS) == haproxy.render(8080, [dict(s) for s in SERVERS])
    cfg = haproxy.render(9000, SERVERS[:1], health_path="/v1/models", check_interval_s=5, fall=3, rise=4)
    assert "option httpchk GET /v1/models" in lines(cfg)
    assert "default-server inter 5s fall 3 rise 4" in lines(cfg)
    assert "bind *:9000" in lines(cfg)
    assert haproxy.config_digest(cfg) != haproxy.config_digest(haproxy.render(9000, SERVERS[:1]))


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"port": 0}, "port"),
    ({"port": 65536}, "port"),
    ({"port": "8080"}, "port"),
    ({"port": True}, "port"),
    ({"servers": []}, "servers"),
    ({"servers": "replica-0"}, "servers"),
    ({"servers": [{"name": "replica 0", "address": "10.0.0.1:8000"}]}, "servers[0].name"),
    ({"servers": [{"name": "r0", "address": "10.0.0.1:8000"}, {"name": "r0", "address": "10.0.0.2:8000"}]},
     "servers[1].name"),
    ({"servers": [{"address": "10.0.0.1:8000"}]}, "servers[0].name"),
    ({"servers": [{"name": "r0", "address": "10.0.0.1"}]}, "servers[0].address"),
    ({"servers": [{"name": "r0", "address": "10.0.0.1:0"}]}, "servers[0].address"),
    ({"servers": [{"name": "r0", "address": "10.0.0.1:70000"}]}, "servers[0].address"),
    ({"servers": [{"name": "r0", "address": "[::1]:8000"}]}, "servers[0].address"),
    ({"servers": [{"name": "r0", "address": "10.0.0.1:8000\n    server evil 6.6.6.6:80"}]}, "servers[0].address"),
    ({"servers": [{"name": "r0", "address": "10.0.0.1:8000", "weight": 3}]}, "servers[0]"),
    ({"health_path": "health"}, "health_path"),
    ({"health_path": "/he alth"}, "health_path"),
    ({"check_interval_s": 0}, "check_interval_s"),
    ({"fall": 0}, "fall"),
    ({"rise": -1}, "rise"),
])
def test_render_refuses_bad_input_naming_the_field(kwargs, field):
    args = dict({"port": 8080, "servers": SERVERS}, **kwargs)
    with pytest.raises(ValueError) as exc:
        haproxy.render(**args)
    assert str(exc.value).startswith(field + " "), str(exc.value)


@pytest.mark.skipif(not shutil.which("haproxy"), reason="haproxy is not installed here (the balancer's image has it)")
def test_haproxy_itself_accepts_the_rendered_configuration(tmp_path):
    path = tmp_path / "haproxy.cfg"
    path.write_text(haproxy.render(8080, SERVERS + [{"name": "local", "address": "localhost:8001"}]))
    res = subprocess.run(["haproxy", "-c", "-f", str(path)], capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stdout + res.stderr


def test_parse_stat_reads_the_recorded_show_stat():
    rows = haproxy.parse_stat(SHOW_STAT)
    assert [(r["pxname"], r["svname"]) for r in rows] == [
        ("openai_api", "FRONTEND"), ("replicas", "replica-0"), ("replicas", "replica-1"), ("replicas", "replica-2"),
        ("replicas", "replica-3"), ("replicas", "BACKEND")]
    by = {r["svname"]: r for r in haproxy.server_rows(rows)}
    assert list(by) == ["replica-0", "replica-1", "replica-2", "replica-3"]
    assert [(by[n]["status"], by[n]["check_status"], by[n]["scur"]) for n in by] == [
        ("UP", "L7OK", 1), ("DRAIN", "L7OK", 1), ("MAINT", "", 0), ("DOWN", "L4CON", 0)]
    assert by["replica-3"]["last_chk"] == "Connection refused"
    assert by["replica-0"]["addr"] == "127.0.0.1:18001"
    assert by["replica-0"]["type"] == 2 and by["replica-0"]["qlimit"] is None
    assert "" not in by["replica-0"]  # the unnamed column after the trailing comma


def test_parse_stat_refuses_what_is_not_show_stat():
    with pytest.raises(ValueError, match="no header line"):
        haproxy.parse_stat("Unknown command: 'show stats'\n")


def test_only_a_server_whose_check_passed_is_up():
    rows = {r["svname"]: r for r in haproxy.server_rows(haproxy.parse_stat(SHOW_STAT))}
    assert [n for n, r in rows.items() if haproxy.is_up(r)] == ["replica-0"]
    starting = {r["svname"]: r for r in haproxy.server_rows(haproxy.parse_stat(SHOW_STAT_STARTING))}
    # HAProxy lists a server whose first check has not run as "UP 1/2" (check INI): not UP yet.
    assert starting["replica-1"]["status"] == "UP 1/2" and starting["replica-1"]["check_status"] == "INI"
    assert [n for n, r in starting.items() if haproxy.is_up(r)] == ["replica-0"]
    assert haproxy.is_up({"status": "UP", "check_status": "* L7OK"})  # a check in progress


def test_not_up_names_each_server_and_its_last_check():
    rows = haproxy.server_rows(haproxy.parse_stat(SHOW_STAT))
    done, why = haproxy.not_up(rows, ["replica-0", "replica-3", "replica-7"])
    assert not done
    assert why == "replica-7 is not in the backend; replica-3 is DOWN (check L4CON: Connection refused)"
    assert haproxy.not_up(rows, ["replica-0"]) == (True, "all UP: replica-0")


def test_open_sessions_names_the_busy_servers():
    rows = haproxy.server_rows(haproxy.parse_stat(SHOW_STAT))
    assert haproxy.open_sessions(rows, ["replica-1", "replica-2"]) == (False, "replica-1 has 1 open session(s)")
    assert haproxy.open_sessions(rows, ["replica-2", "replica-3"]) == (True, "no open sessions: replica-2, replica-3")


def test_parse_servers_state_gives_each_servers_admin_state():
    rows = haproxy.parse_servers_state(SHOW_SERVERS_STATE)
    assert {r["srv_name"]: haproxy.admin_state(r) for r in rows} == {
        "replica-0": "ready", "replica-1": "drain", "replica-2": "maint", "replica-3": "ready"}
    assert rows[0]["be_name"] == "replicas" and rows[0]["srv_port"] == "18001"
    with pytest.raises(ValueError, match="no header line"):
        haproxy.parse_servers_state("Can't find backend.\n\n")


def test_observe_joins_show_stat_and_the_admin_states():
    asked = []

    def ask(command):
        asked.append(command)
        return SHOW_SERVERS_STATE if command.startswith("show servers state") else SHOW_STAT

    servers = haproxy.observe(ask)
    assert asked == ["show servers state replicas", "show stat"]
    assert [(s["svname"], s["status"], s["admin_state"], s["scur"]) for s in servers] == [
        ("replica-0", "UP", "ready", 1), ("replica-1", "DRAIN", "drain", 1), ("replica-2", "MAINT", "maint", 0),
        ("replica-3", "DOWN", "ready", 0)]
    assert set(servers[0]) == set(haproxy.SUMMARY_FIELDS) | {"admin_state"}


def test_server_commands():
    assert haproxy.server_commands("replicas", {"replica-1": "drain", "replica-0": "ready", "r.2_x": "maint"}) == [
        "set server replicas/r.2_x state maint", "set server replicas/replica-0 state ready",
        "set server replicas/replica-1 state drain"]
    assert haproxy.server_commands("replicas", {}) == []


@pytest.mark.parametrize(("backend", "states", "message"), [
    ("replicas", {"replica-0": "disabled"}, "states[replica-0] must be one of ready, drain, maint, got 'disabled'"),
    ("replicas", {"replica 0": "ready"}, "states key must match [A-Za-z0-9_.-]+, got 'replica 0'"),
    ("replicas; shutdown sessions", {}, "backend must match"),
])
def test_server_commands_refuse_what_the_runtime_api_must_not_see(backend, states, message):
    with pytest.raises(ValueError) as exc:
        haproxy.server_commands(backend, states)
    assert str(exc.value).startswith(message)


def test_a_set_command_answers_nothing_when_it_worked():
    assert haproxy.reply_error("\n") is None
    assert haproxy.reply_error("No such server.\n\n") == "No such server."


def test_the_runtime_command_is_an_argument_never_part_of_the_shell_script():
    argv = haproxy.runtime_argv("show stat")
    assert argv[:2] == ["sh", "-c"] and argv[-1] == "show stat"
    assert "show stat" not in argv[2] and "socat stdio /run/haproxy/admin.sock" in argv[2]


def test_the_image_is_built_from_the_base_with_the_distributions_haproxy():
    text = haproxy.dockerfile("debian:bookworm-slim")
    assert text.startswith("FROM debian:bookworm-slim\n")
    assert "apt-get install -y --no-install-recommends haproxy socat" in text
    assert 'CMD ["haproxy", "-W", "-db", "-f", "/usr/local/etc/haproxy/haproxy.cfg"]' in text
    tag = haproxy.image_tag("sha256:" + "1" * 64, text)
    assert tag.startswith("sparkfleet-balancer:") and len(tag.split(":")[1]) == 16
    assert tag == haproxy.image_tag("sha256:" + "1" * 64, text)
    assert tag != haproxy.image_tag("sha256:" + "2" * 64, text)
    assert tag != haproxy.image_tag("sha256:" + "1" * 64, haproxy.dockerfile("debian:trixie-slim"))
    with pytest.raises(ValueError, match="base_image"):
        haproxy.dockerfile("debian bookworm")
