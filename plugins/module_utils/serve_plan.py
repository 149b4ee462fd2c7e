# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""The `vllm serve` command line, built from the recipe (pure). Secrets never reach it."""

from __future__ import annotations

# Flags the collection owns: a recipe's extra_args may not set them a second time.
OWNED = ("--tensor-parallel-size", "-tp", "--pipeline-parallel-size", "-pp", "--distributed-executor-backend",
         "--served-model-name", "--host", "--port")
SECRET_FLAGS = ("--api-key",)


def flag_name(arg):
    """Pure: the flag an argument sets, in vLLM's canonical spelling. vLLM's parser takes ``--x_y`` for
    ``--x-y`` and ``--x=v`` for ``--x v``, so a check against a flag name must compare these forms:
    ``--Tensor_Parallel_Size=4`` is ``--tensor-parallel-size``. A value (no leading dash) is returned as is."""
    head = str(arg).split("=", 1)[0]
    if head.startswith("--"):
        return "--" + head[2:].replace("_", "-").lower()
    return head


def serve_argv(model_path, served_name, tp, pp, port, host, extra_args=()):
    extra = list(extra_args)
    for arg in extra:
        flag = flag_name(arg)
        if flag in SECRET_FLAGS:
            raise ValueError("extra_args must not carry %s: the API key reaches vLLM from a file as VLLM_API_KEY "
                             "in its environment, never on the command line (set sparkfleet_api_key)" % flag)
        if flag in OWNED:
            raise ValueError("extra_args sets %s, which the collection derives from the topology; remove it" % flag)
    return ["vllm", "serve", model_path, "--served-model-name", served_name,
            "--tensor-parallel-size", str(tp), "--pipeline-parallel-size", str(pp),
            "--distributed-executor-backend", "ray", "--host", host, "--port", str(port)] + [str(a) for a in extra]


def requested_moe_backend(extra_args):
    """The --moe-backend a command line asks for (None when it asks for none)."""
    args = [str(a) for a in extra_args]
    for i, arg in enumerate(args):
        if arg == "--moe-backend" and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--moe-backend="):
            return arg.split("=", 1)[1]
    return None


# Runs in the serve container before vllm serve (python3 is in every vLLM image): it reads the API key from
# a file mounted read-only, refuses to start without one, keeps it out of the environment that vLLM's Ray
# executor copies to every worker (vllm/ray/ray_env.py excludes the names listed in
# $VLLM_CONFIG_ROOT/ray_non_carry_over_env_vars.json), and execs vllm with VLLM_API_KEY set. The key is
# thus in no command line, in no container's declared environment (docker inspect) and on no Ray worker.
API_KEY_WRAPPER = """\
import json, os, sys
key_file, argv = sys.argv[1], sys.argv[2:]
try:
    with open(key_file) as fh:
        key = fh.read().strip()
except OSError as exc:
    sys.exit("sparkfleet: cannot read the API key file %s (%s); vllm serve was not started" % (key_file, exc))
if not key:
    sys.exit("sparkfleet: the API key file %s is empty; vllm serve was not started" % key_file)
# VLLM_CONFIG_ROOT as vllm/envs.py computes it, where vllm/ray/ray_env.py reads the list
root = os.path.expanduser(os.getenv("VLLM_CONFIG_ROOT", os.path.join(
    os.getenv("XDG_CONFIG_HOME", os.path.join(os.path.expanduser("~"), ".config")), "vllm")))
path = os.path.join(root, "ray_non_carry_over_env_vars.json")
try:
    with open(path) as fh:
        names = set(json.load(fh))
except (OSError, ValueError):
    names = set()
os.makedirs(root, exist_ok=True)
with open(path, "w") as fh:
    json.dump(sorted(names | {"VLLM_API_KEY"}), fh)
os.environ["VLLM_API_KEY"] = key
os.execvp(argv[0], argv)
"""


def with_api_key_file(argv, key_file):
    """Pure: ``argv`` run through API_KEY_WRAPPER, which gives vLLM the key in ``key_file``."""
    return ["python3", "-c", API_KEY_WRAPPER, key_file] + list(argv)
