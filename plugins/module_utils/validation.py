# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""Strict checks of everything a deploy is given, on the controller, before any node is touched (pure).

Each finding names the field as the user wrote it (``sparkfleet_api_port``, ``recipe mimo-v2.5-pro:
max_tp``, ``sim-spark-01: sparkfleet_node_ip``), what is wrong, and the fix. All findings are returned at
once, so one run lists every mistake.
"""

from __future__ import annotations

import ipaddress
import re

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils._ray import port_plan
from ansible_collections.sparkfleet.vllm.plugins.module_utils.serve_plan import OWNED, SECRET_FLAGS, flag_name

COMMIT = re.compile(r"[0-9a-f]{40}")
REPO_PART = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,94}[A-Za-z0-9])?")
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/-]{0,127}")
# PEP 440 public versions (the spec's canonical form: release, pre, post, dev segments), no local part.
PEP440 = re.compile(r"(?:[1-9][0-9]*!)?(?:0|[1-9][0-9]*)(?:\.(?:0|[1-9][0-9]*))*"
                    r"(?:(?:a|b|rc)(?:0|[1-9][0-9]*))?(?:\.post(?:0|[1-9][0-9]*))?(?:\.dev(?:0|[1-9][0-9]*))?")
ENV_NAME = re.compile(r"[A-Z][A-Z0-9_]{0,127}")
# Variables that change what a process loads or runs before vLLM's own code: refused in passthrough env.
ENV_DENIED = re.compile(r"LD_.*|DYLD_.*|PYTHON(?!UNBUFFERED$|HASHSEED$|FAULTHANDLER$).*|PATH|HOME|SHELL|BASH_ENV|ENV"
                        r"|SHELLOPTS|BASHOPTS|IFS|PERL5LIB|PERL5OPT|PERLLIB|RUBYOPT|RUBYLIB|NODE_OPTIONS"
                        r"|GCONV_PATH|MALLOC_.*|GLIBC_TUNABLES")
# Variables the collection sets itself on every node; a recipe or inventory may not set them again.
ENV_OWNED = ("VLLM_HOST_IP", "RAY_NODE_IP_ADDRESS", "VLLM_API_KEY", "RAY_ADDRESS", "HF_HUB_OFFLINE")
RECIPE_REQUIRED = {"name": str, "repo_id": str, "revision": str, "served_model_name": str, "min_vllm": str,
                   "api_port": int, "max_tp": int, "kv_cache_gib": (int, float), "memory_margin_gib": (int, float),
                   "serve_args": list, "probes": list}
RECIPE_OPTIONAL = {"quantization": str, "expect_mxfp8": bool, "mxfp8_linear_kernel": str, "moe_backend": str,
                   "patches": list, "required_patches": list, "env": dict, "model_bytes": int, "attention_backend": str,
                   "kv_cache_dtype": str, "description": str,
                   "attention_heads": int}
GPUS_PER_SPARK = 1


class PlanFailure(Exception):
    """A planner's refusal (its message names the field and the fix), with extra result keys."""

    def __init__(self, msg, **extra):
        super().__init__(msg)
        self.extra = extra


def planner_main(argument_spec, compute):
    """A planner module's main(): its result is ``compute(params)``, a PlanFailure its failure. (The same
    ``compute`` runs on the controller in-process through the planner's action plugin.)"""
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    try:
        module.exit_json(**compute(module.params))
    except PlanFailure as exc:
        module.fail_json(msg=str(exc), **exc.extra)


def _type_name(value):
    return "a boolean" if isinstance(value, bool) else "a %s" % type(value).__name__


def as_int(value):
    """An integer, or None: booleans are not integers, and a string counts only when it is all digits (the form
    ``-e key=value`` gives)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"[0-9]{1,9}", value):
        return int(value)
    return None


def as_number(value):
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, str) and re.fullmatch(r"[0-9]{1,6}(\.[0-9]{1,6})?", value):
        return float(value)
    return None


class Checker:
    def __init__(self):
        self.findings = []

    def add(self, field, problem, fix):
        self.findings.append("%s: %s; fix: %s" % (field, problem, fix))

    def integer(self, field, value, low, high, fix):
        n = as_int(value)
        if n is None:
            self.add(field, "%r is %s, not an integer" % (value, _type_name(value)), fix)
        elif not low <= n <= high:
            self.add(field, "%d is outside %d..%d" % (n, low, high), fix)
        return n

    def number(self, field, value, low, high, fix):
        n = as_number(value)
        if n is None:
            self.add(field, "%r is %s, not a number" % (value, _type_name(value)), fix)
        elif not low < n <= high:
            self.add(field, "%s is outside (%s, %s]" % (n, low, high), fix)
        return n

    def text(self, field, value, pattern, what, fix):
        if not isinstance(value, str):
            self.add(field, "%r is %s, not a string" % (value, _type_name(value)), fix)
            return False
        if not pattern.fullmatch(value):
            self.add(field, "%r is not %s" % (value, what), fix)
            return False
        return True

    def address(self, field, value, fix):
        if not isinstance(value, str):
            self.add(field, "%r is %s, not an IP address" % (value, _type_name(value)), fix)
            return None
        try:
            ip = ipaddress.ip_address(value)
        except ValueError:
            self.add(field, "%r is not an IP address" % value, fix)
            return None
        plain = getattr(ip, "ipv4_mapped", None) or ip
        for bad, what in (("is_unspecified", "unspecified"), ("is_loopback", "a loopback address"),
                          ("is_multicast", "a multicast address"), ("is_link_local", "a link-local address"),
                          ("is_reserved", "a reserved address")):
            if getattr(plain, bad) or getattr(ip, bad):
                self.add(field, "%s is %s, which other nodes cannot reach" % (value, what), fix)
                return None
        return plain

    def port(self, field, value, fix):
        return self.integer(field, value, 1024, 65535, fix)

    def flags(self, field, args):
        """Extra `vllm serve` arguments: strings, none of them a flag the collection owns, in any spelling."""
        if not isinstance(args, list):
            self.add(field, "%r is %s, not a list of arguments" % (args, _type_name(args)),
                     "give a YAML list, one argument per item: [--max-model-len, '32768']")
            return
        for arg in args:
            if not isinstance(arg, (str, int, float)) or isinstance(arg, bool):
                self.add(field, "argument %r is %s, not a string" % (arg, _type_name(arg)), "quote it")
                continue
            if any(c in str(arg) for c in "\n\r\0"):
                self.add(field, "argument %r holds a line break or NUL" % (arg,), "remove it")
                continue
            name = flag_name(str(arg))
            if name in SECRET_FLAGS:
                self.add(field, "%s is %s, which would put the API key on the command line" % (arg, name),
                         "remove it and set sparkfleet_api_key (vLLM reads it from VLLM_API_KEY)")
            elif name in OWNED:
                self.add(field, "%s is %s, which the collection derives from the topology" % (arg, name),
                         "remove it; set sparkfleet_tensor_parallel_size / sparkfleet_pipeline_parallel_size "
                         "or the recipe's api_port instead")

    def env(self, field, env):
        if not isinstance(env, dict):
            self.add(field, "%r is %s, not a mapping of variables" % (env, _type_name(env)),
                     "give a YAML mapping NAME: value")
            return
        for name, value in env.items():
            where = "%s.%s" % (field, name)
            if not isinstance(name, str) or not ENV_NAME.fullmatch(name):
                self.add(where, "%r is not a variable name of capitals, digits and _" % (name,), "rename it")
            elif ENV_DENIED.fullmatch(name):
                self.add(where, "%s changes what the node's processes load or run, before vLLM's own code" % name,
                         "remove it; bake such a change into the image instead")
            elif name in ENV_OWNED:
                self.add(where, "%s is set by the collection on every node" % name, "remove it")
            # The value is never echoed: a passthrough variable may hold a token.
            if isinstance(value, bool) or not isinstance(value, (str, int, float)):
                self.add(where, "the value is %s, not a string or number" % _type_name(value), "quote it")
            elif any(c in str(value) for c in "\n\r\0"):
                self.add(where, "the value holds a line break or NUL", "remove it")


def check_recipe(c, recipe, label):
    """A recipe (after the inventory's overrides) against its schema."""
    if not isinstance(recipe, dict):
        c.add(label, "is %s, not a mapping" % _type_name(recipe), "fix the recipe file")
        return
    for key, kind in sorted(dict(RECIPE_OPTIONAL, **RECIPE_REQUIRED).items()):
        value = recipe.get(key)
        if value is None:
            if key in RECIPE_REQUIRED:
                c.add("%s: %s" % (label, key), "missing", "add it (see recipes/mimo-v2.5-pro.yml)")
            continue
        if kind is int:
            good, want = as_int(value) is not None, "an integer"
        elif kind == (int, float):
            good, want = as_number(value) is not None, "a number"
        else:
            good, want = isinstance(value, kind) and (kind is bool or not isinstance(value, bool)), \
                "a %s" % {str: "string", list: "list", dict: "mapping", bool: "boolean"}[kind]
        if not good:
            c.add("%s: %s" % (label, key), "%r is %s" % (value, _type_name(value)), "give %s" % want)
    unknown = sorted(set(recipe) - set(RECIPE_REQUIRED) - set(RECIPE_OPTIONAL))
    if unknown:
        c.add(label, "unknown keys %s" % ", ".join(map(str, unknown)), "remove them or correct their spelling")
    if as_int(recipe.get("max_tp")) is not None:
        c.integer("%s: max_tp" % label, recipe["max_tp"], 1, 64, "the largest TP that loads the model correctly")
    if as_int(recipe.get("attention_heads")) is not None:
        c.integer("%s: attention_heads" % label, recipe["attention_heads"], 1, 4096,
                  "the model's num_attention_heads (its config.json), which every TP must divide")
    if isinstance(recipe.get("min_vllm"), str):
        c.text("%s: min_vllm" % label, recipe["min_vllm"], PEP440, "a PEP 440 version", "write it as 0.24.0")
    if isinstance(recipe.get("serve_args"), list):
        c.flags("%s: serve_args" % label, recipe["serve_args"])
    if isinstance(recipe.get("env"), dict):
        c.env("%s: env" % label, recipe["env"])
    for key in ("patches", "required_patches"):
        if isinstance(recipe.get(key), list) and not all(isinstance(x, str) for x in recipe[key]):
            c.add("%s: %s" % (label, key), "holds items that are not patch ids", "list patch ids as strings")
    for i, probe in enumerate(recipe.get("probes") if isinstance(recipe.get("probes"), list) else []):
        if not isinstance(probe, dict) or not isinstance(probe.get("prompt"), str) or not probe["prompt"].strip():
            c.add("%s: probes[%d]" % (label, i), "has no prompt", "give each probe a prompt: and expect_any:")


def check_inputs(settings, recipe, nodes, ports, ray_port=6379):
    """Every finding about a deploy's inputs, as one list of strings (empty when all is well).

    ``settings``: the sparkfleet_* inventory values, by name (absent ones left out); ``recipe``: the recipe
    with the inventory's overrides; ``nodes``: {host: {sparkfleet_node_ip, sparkfleet_gpus_per_node}};
    ``ports``: {setting name: port} of the ports the deploy opens besides Ray's, whose GCS port is
    ``ray_port`` (the rest of Ray's ports are pinned by the collection).
    """
    c = Checker()
    s = settings
    label = "recipe %s" % (recipe.get("name") if isinstance(recipe, dict) else "?")
    extra = s.get("sparkfleet_serve_extra_args")
    if isinstance(recipe, dict) and isinstance(recipe.get("serve_args"), list) and isinstance(extra, list) \
            and extra and recipe["serve_args"][-len(extra):] == extra:
        # The validate role appends the inventory's extra args to the recipe's: each is judged once, by name.
        recipe = dict(recipe, serve_args=recipe["serve_args"][:-len(extra)])
    check_recipe(c, recipe, label)
    recipe = recipe if isinstance(recipe, dict) else {}
    if "repo_id" in recipe:
        repo = recipe["repo_id"]
        parts = repo.split("/") if isinstance(repo, str) else []
        if len(parts) != 2 or not all(REPO_PART.fullmatch(x) for x in parts) or ".." in repo:
            c.add("sparkfleet_model_repo_id (or the recipe's repo_id)", "%r is not ORG/NAME" % (repo,),
                  "give the Hugging Face model id, e.g. festr2/MiMo-V2.5-Pro-NVFP4-MXFP8-attn-TP8")
    if "revision" in recipe:
        c.text("sparkfleet_model_revision (or the recipe's revision)", recipe["revision"], COMMIT,
               "a 40-hex commit hash", "set the snapshot's commit, the name under models--ORG--NAME/snapshots/")
    if "served_model_name" in recipe:
        c.text("sparkfleet_served_model_name (or the recipe's served_model_name)", recipe["served_model_name"],
               NAME, "a model name of letters, digits and ._:/-", "rename it")
    for key in ("sparkfleet_vllm_version", "sparkfleet_ray_version"):
        if key not in s:
            c.add(key, "is not set", "set the release, X.Y.Z")
        else:
            c.text(key, s[key], PEP440, "a PEP 440 release", "write it as X.Y.Z, e.g. 2.60.0")
    base = s.get("sparkfleet_base_image")
    if not base:
        c.add("sparkfleet_base_image", "is not set", "set the vLLM image, e.g. vllm/vllm-openai:v0.34.0")
    elif not isinstance(base, str) or re.search(r"[\s\0]", base):
        c.add("sparkfleet_base_image", "%r is not an image reference" % (base,), "give name:tag or name@sha256:...")
    if "sparkfleet_tensor_parallel_size" in s:  # unset: the recipe's max_tp plans it
        c.integer("sparkfleet_tensor_parallel_size", s["sparkfleet_tensor_parallel_size"], 1, 64,
                  "set the TP size, an integer (TP x PP = the cluster's GPUs)")
    c.integer("sparkfleet_pipeline_parallel_size", s.get("sparkfleet_pipeline_parallel_size", 1), 1, 16,
              "set the PP size, an integer")
    if "sparkfleet_replicas" in s:  # unset: the recipe's max_tp plans it
        c.integer("sparkfleet_replicas", s["sparkfleet_replicas"], 1, 16,
                  "set how many engines share the GPUs, an integer (replicas x TP x PP = the cluster's GPUs)")
    for key, low, high in (("sparkfleet_kv_cache_gib", 0, 1024), ("sparkfleet_memory_margin_gib", 0, 1024)):
        if key in s:
            c.number(key, s[key], low, high, "give GiB as a number")
    if "sparkfleet_serve_extra_args" in s:
        c.flags("sparkfleet_serve_extra_args", s["sparkfleet_serve_extra_args"])
    if "sparkfleet_serve_env" in s:
        c.env("sparkfleet_serve_env", s["sparkfleet_serve_env"])
    single, ranges = port_plan(ray_port)
    seen_ports = {x["port"]: x["what"] for x in single}
    for name, value in sorted(ports.items()):
        n = c.port(name, value, "give a free port in 1024..65535")
        if n is not None:
            clash = seen_ports.get(n) or next((r["what"] for r in ranges if r["from"] <= n <= r["to"]), None)
            if clash:
                c.add(name, "%d is also %s's" % (n, clash), "give each service its own port")
            seen_ports.setdefault(n, name)
    if not isinstance(nodes, dict) or not nodes:
        c.add("inventory", "has no nodes in ray_head and ray_workers", "list the Sparks under both groups")
        return c.findings
    seen_ips = {}
    for host in sorted(nodes):
        hv = nodes[host] or {}
        if "sparkfleet_node_ip" not in hv:
            c.add("%s: sparkfleet_node_ip" % host, "is not set", "set the node's fabric IP")
        else:
            ip = c.address("%s: sparkfleet_node_ip" % host, hv["sparkfleet_node_ip"],
                           "set the node's fabric IP, the address the other nodes reach it on")
            if ip is not None:
                if ip in seen_ips:
                    c.add("%s: sparkfleet_node_ip" % host, "%s is also %s's" % (ip, seen_ips[ip]),
                          "give every node its own fabric IP")
                seen_ips.setdefault(ip, host)
        c.integer("%s: sparkfleet_gpus_per_node" % host, hv.get("sparkfleet_gpus_per_node", GPUS_PER_SPARK),
                  GPUS_PER_SPARK, GPUS_PER_SPARK, "a DGX Spark has one GB10 GPU; remove the setting")
    # TP x PP against the nodes listed is the topology planner's (topology_plan), with advice that fits them.
    return c.findings
