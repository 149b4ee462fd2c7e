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
            raise ValueError("extra_args must not carry %s: set the API key through api_key, which reaches vLLM "
                             "as VLLM_API_KEY in its environment, never on the command line" % flag)
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
