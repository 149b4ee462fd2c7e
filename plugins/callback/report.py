# Copyright: sparkfleet maintainers. MIT License (see LICENSE).

from __future__ import annotations

DOCUMENTATION = r"""
name: report
type: notification
short_description: Report a sparkfleet.vllm run while it goes and when it ends
version_added: 0.1.0
description:
  - While a task of the collection polls (a vLLM boot being followed, a Ray node joining, the Ray gate, a
    snapshot being hashed, the image build or a transfer reported by M(sparkfleet.vllm.job_progress)),
    prints each poll's C(progress) line, so that a long step is never silent.
  - Prints the bytes, time and rate of every image and weights transfer when it ends.
  - When the run ends, successful or not, prints one table row per node (image ID, weights revision, Ray
    state) and per endpoint (address, resolved backends, verdict), with the task that failed if one did. It
    writes the same as JSON and prints the file's path.
  - Enable it in C(ansible.cfg) with C(callbacks_enabled = sparkfleet.vllm.report) (the shipped site
    configuration does).
options:
  report_dir:
    description: Directory where each run's JSON report is written (relative to the working directory).
    type: path
    default: sparkfleet-reports
    env:
      - name: SPARKFLEET_REPORT_DIR
    ini:
      - section: sparkfleet
        key: report_dir
  diagnose_on_failure:
    description:
      - When a deploy fails on a node, run the C(sparkfleet.vllm.diagnose) playbook with the same inventory,
        extra vars, user, key and vault options, and print the path of its tarball (which holds this run's
        report). A failure on the controller alone (validation) touches no node and collects nothing.
      - Only plays that set C(sparkfleet_diagnose_on_failure) (every play of the deploy does) count as a deploy.
    type: bool
    default: true
    env:
      - name: SPARKFLEET_DIAGNOSE_ON_FAILURE
    ini:
      - section: sparkfleet
        key: diagnose_on_failure
author:
  - sparkfleet maintainers (!UNKNOWN)
"""

import datetime
import json
import os
import re
import subprocess
import sys
import tempfile

from ansible import context
from ansible.parsing.splitter import parse_kv
from ansible.plugins.callback import CallbackBase

# The collection's modules whose results the report reads.
_NS = "sparkfleet.vllm."


def _action(task):
    name = getattr(task, "resolved_action", None) or task.action or ""
    return name[len(_NS):] if name.startswith(_NS) else None


def _rate(transfer):
    size, secs = transfer.get("bytes") or 0, transfer.get("seconds") or 0
    return {"bytes": size, "seconds": round(secs, 1), "mib_per_s": round(size / 2**20 / secs, 1) if secs else None}


def _first_line(msg, limit=500):
    lines = str(msg or "").strip().splitlines()
    return lines[0][:limit] if lines else ""


def _backends(kernels):
    return {k["fact"]: k.get("found") for k in kernels or () if k.get("found")}


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "notification"
    CALLBACK_NAME = "sparkfleet.vllm.report"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self.started = datetime.datetime.now(datetime.timezone.utc)
        self.playbook = None
        self.deploy = False
        self.nodes, self.endpoints, self.transfers, self.failures = {}, {}, [], []

    # -------------------------------------------------------------------------------- while it goes
    def v2_playbook_on_start(self, playbook):
        self.playbook = os.path.basename(playbook._file_name)

    def v2_playbook_on_play_start(self, play):
        if play.vars.get("sparkfleet_diagnose_on_failure") is True:
            self.deploy = True

    def v2_runner_retry(self, result):
        line = result._result.get("progress")
        if line and _action(result._task):
            self._display.display("  [%s] %s" % (result._host.get_name(), line))

    def v2_runner_on_ok(self, result):
        self._read(result, failed=False)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._read(result, failed=not ignore_errors)

    def v2_runner_on_unreachable(self, result):
        self._failure(result, "unreachable: %s" % result._result.get("msg", ""))

    def v2_runner_item_on_ok(self, result):
        self._read(result, failed=False)

    def _failure(self, result, msg):
        self.failures.append({"host": result._host.get_name(), "task": result._task.get_name(),
                              "msg": _first_line(msg) or "failed (the task gave no message)"})

    def _node(self, host):
        return self.nodes.setdefault(host, {"image_id": None, "weights_revision": None, "weights_digest": None,
                                            "ray": None})

    def _read(self, result, failed):
        host, res, action = result._host.get_name(), result._result, _action(result._task)
        if failed:
            self._failure(result, res.get("msg") or res.get("progress"))
        if action is None or res.get("skipped"):
            return
        node = self._node(host) if action in ("vllm_image", "image_info", "weights_verify", "ray_node",
                                              "ray_gate", "deploy_stamp") else {}
        if action == "vllm_image" and res.get("image_id"):
            node["image_id"] = res["image_id"]
        elif action == "image_info" and res.get("local_id"):
            node["image_id"] = res["local_id"]
        elif action == "weights_verify" and res.get("snapshot_path"):
            node["weights_revision"] = os.path.basename(res["snapshot_path"].rstrip("/"))
            node["weights_digest"] = res.get("digest")
        elif action == "ray_node" and ("attempts" in res or res.get("failed")):
            node["ray"] = "failed" if res.get("failed") else "running"
        elif action == "ray_gate" and res.get("summary"):
            summary = res["summary"]
            node["ray"] = "head; cluster %s nodes alive, %s dead, %s GPUs" % (
                summary.get("alive"), summary.get("dead"), summary.get("gpus"))
        elif action == "vllm_boot":
            endpoint = self.endpoints.setdefault(host, {})
            endpoint.update(stage=res.get("stage"), boot_s=(res.get("boot") or {}).get("boot_s"))
        elif action == "vllm_check":
            args = res.get("invocation", {}).get("module_args", {})
            # A check without a server log to read is the one through the balancer (on a head's node, too).
            endpoint = self.endpoints.setdefault(host if args.get("container_name", "-") else host + " balancer", {})
            endpoint.update(url=args.get("url"),
                            backends=_backends(res.get("kernels")),
                            verdict="failed" if res.get("failed") else "coherent",
                            reason=_first_line(res.get("msg"), 300) if res.get("failed") else None)
        elif action == "deploy_stamp":
            # A re-run's probe: what the node still holds of its verified deploy (a stage it holds is skipped;
            # a stage that runs anyway overwrites these with what it finds), and, when the node is as its
            # verified deploy left it, the endpoints it proved.
            held, facts = res.get("held") or {}, (res.get("stamp") or {}).get("facts") or {}
            if held.get("images"):
                node["image_id"] = (facts.get("image_built") or {}).get("image_id")
            if held.get("trees"):
                node["weights_revision"] = (facts.get("weights") or {}).get("revision")
                node["weights_digest"] = (facts.get("weights") or {}).get("digest")
            for url, proven in (res.get("endpoints") or {}).items() if res.get("unchanged") else ():
                endpoint = self.endpoints.setdefault(host + " balancer" if proven.get("balancer") else host, {})
                endpoint.update(url=url, verdict="coherent", unchanged=True)
        transfer = res.get("transfer")
        # The sender's last poll holds the transfer (the receivers' polls end in their own phases).
        if action == "job_progress" and res.get("phase") == "sent" and isinstance(transfer, dict) \
                and transfer.get("bytes"):
            entry = dict(_rate(transfer), host=host, what=res.get("what"))
            self.transfers.append(entry)
            self._display.display("  %s sent the %s down the chain: %.2f GiB in %.1f s, %s MiB/s" % (
                host, entry["what"], entry["bytes"] / 2**30, entry["seconds"], entry["mib_per_s"]))

    # -------------------------------------------------------------------------------- when it ends
    def v2_playbook_on_stats(self, stats):
        failed = bool(self.failures) or any(stats.summarize(h)["failures"] or stats.summarize(h)["unreachable"]
                                            for h in stats.processed)
        report = {"playbook": self.playbook, "started": self.started.isoformat(timespec="seconds"),
                  "finished": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                  "ok": not failed, "failures": self.failures, "nodes": self.nodes, "endpoints": self.endpoints,
                  "transfers": self.transfers}
        self._table(report)
        directory = self.get_option("report_dir")
        try:
            os.makedirs(directory, exist_ok=True)
            path = os.path.abspath(os.path.join(directory, "report-%s.json"
                                                % self.started.strftime("%Y%m%dT%H%M%SZ")))
            with open(path, "w") as fh:
                json.dump(report, fh, indent=2, sort_keys=True)
            self._display.display("sparkfleet report: %s" % path)
        except OSError as exc:
            self._display.warning("sparkfleet report: could not write it to %s: %s" % (directory, exc))
            path = None
        on_nodes = any(f["host"] != "localhost" for f in self.failures)
        if failed and on_nodes and self.deploy and self.get_option("diagnose_on_failure") \
                and not context.CLIARGS.get("check"):
            self._diagnose(path)

    def _diagnose(self, report_path):
        """Run the diagnose playbook as this run was run (its own process: a callback cannot run plays)."""
        args = context.CLIARGS
        argv = [sys.argv[0], "sparkfleet.vllm.diagnose"]
        for inventory in args.get("inventory") or ():
            argv += ["-i", inventory]
        # Extra vars given inline (they may hold a secret) go to the child in 0600 files, never in its argv;
        # "@file" ones are paths and pass as they are. Same order, so the same precedence.
        inline = []
        for extra in args.get("extra_vars") or ():
            if extra.startswith("@"):
                argv += ["-e", extra]
                continue
            fd, path = tempfile.mkstemp(prefix="sparkfleet-extra-", suffix=".json")
            with os.fdopen(fd, "w") as fh:  # mkstemp: 0600
                fh.write(extra if extra.lstrip()[:1] in ("{", "[") else json.dumps(parse_kv(extra)))
            inline.append(path)
            argv += ["-e", "@" + path]
        for flag, key in (("--private-key", "private_key_file"), ("-u", "remote_user"), ("-c", "connection")):
            if args.get(key):
                argv += [flag, str(args[key])]
        for vault_id in args.get("vault_ids") or ():
            argv += ["--vault-id", vault_id]
        for vault_file in args.get("vault_password_files") or ():
            argv += ["--vault-password-file", vault_file]
        if args.get("become"):
            argv += ["--become"]
        env = dict(os.environ, SPARKFLEET_DIAGNOSE_ON_FAILURE="0", SPARKFLEET_DIAGNOSE_REPORT=report_path or "")
        self._display.display("sparkfleet: the deploy failed on a node; collecting diagnostics from every node")
        try:
            res = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            self._display.warning("sparkfleet diagnostics: %s" % exc)
            return
        finally:
            for path in inline:
                os.unlink(path)
        said = re.findall(r"sparkfleet diagnostics: (\S+\.tar\.gz)", res.stdout)
        if res.returncode == 0 and said:
            self._display.display("sparkfleet diagnostics: %s" % said[-1])
        else:
            self._display.warning("sparkfleet diagnostics failed (%s): %s"
                                  % (" ".join(argv[:2]), (res.stdout + res.stderr)[-1500:]))

    def _table(self, report):
        show = self._display.display
        show("")
        show("SPARKFLEET RUN %s: %s" % (report["playbook"], "ok" if report["ok"] else "FAILED"))
        if report["nodes"]:
            show("%-18s %-14s %-14s %s" % ("node", "image", "weights", "ray"))
            for host in sorted(report["nodes"]):
                n = report["nodes"][host]
                show("%-18s %-14s %-14s %s" % (host, (n["image_id"] or "-").replace("sha256:", "")[:12],
                                               (n["weights_revision"] or "-")[:12], n["ray"] or "-"))
        for host, e in sorted(report["endpoints"].items()):
            backends = ", ".join("%s=%s" % kv for kv in sorted((e.get("backends") or {}).items())) or "-"
            show("endpoint %s: %s; boot %s s (%s); backends %s; verdict %s%s" % (
                host, e.get("url") or "-", e.get("boot_s") or "-", e.get("stage") or "-", backends,
                e.get("verdict") or "not checked", ": %s" % e["reason"] if e.get("reason") else
                " (a re-run that changed nothing: proven by its probe)" if e.get("unchanged") else ""))
        for f in report["failures"]:
            show("failed: %s, task %r: %s" % (f["host"], f["task"], f["msg"]))
