#!/usr/bin/python
# Copyright: sparkfleet maintainers. MIT License (see LICENSE).

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_check
short_description: Prove that a vLLM endpoint is healthy and that its answers are coherent
version_added: 0.1.0
description:
  - Checks C(/health) (200), C(/v1/models) (lists the served name), then sends every probe and judges each
    answer. An answer fails on degenerate repetition ("foss foss foss"), a soup of unrelated scripts, NUL
    bytes, or when it lacks all of the probe's expected words.
  - When the serve container is named, also compares every kernel fact the command line and the recipe ask for
    (MoE backend, attention backend, KV-cache dtype, quantization method, MXFP8 linear kernel) with what the
    startup log states, in the wording of the release that logged it. A mismatch fails and names both values;
    a fact the log cannot prove is unverifiable, and fails unless O(unverifiable=warn). The KV-cache dtype is
    read from the engine's resolved configuration line, the other facts from the kernels' own lines.
  - Fails with every problem found, so a deploy never ends with a "healthy" server that emits garbage.
options:
  url:
    description: Base URL of the endpoint.
    type: str
    required: true
  served_model_name:
    description: Model name to expect and to query.
    type: str
    required: true
  api_key:
    description: Bearer key for C(/v1).
    type: str
  probes:
    required: true
  scripts:
    description:
      - Unicode scripts an answer may use, for probes that name none (latin, han, kana, hangul, hebrew, arabic,
        cyrillic, greek, devanagari, thai). Digits, punctuation, symbols and emoji belong to every script.
    type: list
    elements: str
    default: [latin]
  container_name:
    description: The serve container whose startup log to check; empty to skip the log checks.
    type: str
    default: ""
  log_file:
    description:
      - The server's startup log as a file on the managed host, for a C(vllm serve) that runs outside a
        container (a bare-metal or systemd service, the GPU tier's runs). Read like the container's log;
        when set, it is the log checked and O(container_name) is not read.
    type: path
  serve_args:
    description:
      - The C(vllm serve) arguments the server was started with. The kernels they request are checked against
        the startup log - C(--moe-backend), C(--attention-backend), C(--kv-cache-dtype) and C(--quantization).
    type: list
    elements: str
    default: []
  moe_backend:
    description: The MoE backend to expect when O(serve_args) has no C(--moe-backend).
    type: str
  attention_backend:
    description: The attention backend to expect when O(serve_args) has no C(--attention-backend).
    type: str
  kv_cache_dtype:
    description: The KV-cache dtype to expect when O(serve_args) has no C(--kv-cache-dtype).
    type: str
  quantization:
    description:
      - The quantization method vLLM must resolve (for example V(modelopt_mixed), V(compressed-tensors)), when
        O(serve_args) has no C(--quantization).
    type: str
  mxfp8_linear_kernel:
    description:
      - The MXFP8 linear kernel to expect (for example V(flashinfer_cutlass), seed 004's
        C(FlashInferCutlassMxfp8LinearKernel)); V(any) asks only that one was chosen.
    type: str
  vllm_version:
    description:
      - The vLLM release the server runs (the inventory's pin, checked against the image by the preflight).
        Decides which facts the release logs; defaults to the version the log states.
    type: str
  unverifiable:
    description:
      - What an expected fact that the log cannot prove does to the verdict - the release does not log it, or
        the release is not known to this collection. V(fail) fails the check (a fact nobody saw is never
        passed); V(warn) passes with a warning, for a release newer than the collection's catalogue.
    type: str
    choices: [fail, warn]
    default: fail
  expect_mxfp8:
    description:
      - Require an MXFP8 GEMM line (any kernel) when O(mxfp8_linear_kernel) is not set. Without it, MXFP8
        attention fell through to UnquantizedLinearMethod (seed 004's first garbage).
    type: bool
    default: false
  timeout:
    description: Seconds per HTTP request.
    type: int
    default: 120
  validate_certs:
    description:
      - Check the certificate of an C(https://) O(url). Turn it off only for an endpoint whose certificate
        cannot be checked (a self-signed one on a private network); C(http://) is not affected.
    type: bool
    default: true
extends_documentation_fragment:
  - sparkfleet.vllm.probes
  - sparkfleet.vllm.attributes
  - sparkfleet.vllm.attributes.read_only
author:
  - sparkfleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Verify the endpoint
  sparkfleet.vllm.vllm_check:
    url: http://192.168.0.10:8000
    served_model_name: kimi-k2.5
    probes:
      - prompt: The capital of France is
        expect_any: [Paris]
        max_tokens: 10
    container_name: sparkfleet-vllm
    serve_args: [--moe-backend, triton, --kv-cache-dtype, fp8]
    quantization: compressed-tensors
"""

RETURN = r"""
answers:
  description: Each probe with its answer and verdict.
  returned: always
  type: list
  elements: dict
models:
  description: Model IDs that C(/v1/models) listed.
  returned: always
  type: list
  elements: str
boot:
  description: Facts from the startup log (when C(container_name) or C(log_file) is set).
  returned: when container_name or log_file is set
  type: dict
kernels:
  description:
    - One verdict per expected kernel fact, with C(fact), C(expected), C(found), C(status) (V(ok), V(mismatch) or
      V(unverifiable)) and C(message).
  returned: when container_name or log_file is set
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils import endpoint, vllm_logs

FLAG_FACTS = {"--moe-backend": "moe_backend", "--attention-backend": "attention_backend",
              "--kv-cache-dtype": "kv_cache_dtype", "--quantization": "quantization", "-q": "quantization"}


def expected_kernels(params):
    """The kernel facts to expect: the flags of the serve command line (the last of a repeated flag, as
    argparse takes it), and the explicit options for facts the command line does not set."""
    expected = {}
    args = list(params["serve_args"])
    for i, arg in enumerate(args):
        flag, eq, value = arg.partition("=")
        if flag in FLAG_FACTS:
            if not eq:
                value = args[i + 1] if i + 1 < len(args) else None
            expected[FLAG_FACTS[flag]] = value
    for fact in ("moe_backend", "attention_backend", "kv_cache_dtype", "quantization", "mxfp8_linear_kernel"):
        if params[fact] and not expected.get(fact):  # the command line is what the server was told
            expected[fact] = params[fact]
    if params["expect_mxfp8"] and not expected.get("mxfp8_linear_kernel"):
        expected["mxfp8_linear_kernel"] = "any"
    return expected


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type="str", required=True),
            served_model_name=dict(type="str", required=True),
            api_key=dict(type="str", no_log=True),
            probes=dict(type="list", elements="dict", required=True, options=endpoint.PROBE_OPTIONS),
            scripts=dict(type="list", elements="str", default=["latin"]),
            container_name=dict(type="str", default=""),
            log_file=dict(type="path"),
            serve_args=dict(type="list", elements="str", default=[]),
            moe_backend=dict(type="str"),
            attention_backend=dict(type="str"),
            kv_cache_dtype=dict(type="str"),
            quantization=dict(type="str"),
            mxfp8_linear_kernel=dict(type="str"),
            vllm_version=dict(type="str"),
            unverifiable=dict(type="str", choices=["fail", "warn"], default="fail"),
            expect_mxfp8=dict(type="bool", default=False),
            timeout=dict(type="int", default=120),
            validate_certs=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    p = module.params
    base = p["url"].rstrip("/")
    problems, answers, models = endpoint.prove(base, p["served_model_name"], p["probes"], p["api_key"], p["timeout"],
                                               p["validate_certs"], tuple(p["scripts"]))
    out = {}
    log = None
    if p["log_file"]:
        try:
            with open(p["log_file"], encoding="utf-8", errors="replace") as fh:
                log = fh.read()
        except OSError as exc:
            problems.append("cannot read the startup log %s: %s" % (p["log_file"], exc.strerror))
    elif p["container_name"]:
        from ansible_collections.sparkfleet.vllm.plugins.module_utils import _docker

        _docker.require(module)
        try:
            container = _docker.current(_docker.connect(), p["container_name"])
            if container is None:
                problems.append("no serve container %s to read the startup log from" % p["container_name"])
            else:
                log = _docker.logs(container)
        except _docker.DockerFailure as exc:
            problems.append(str(exc))
    if log is not None:
        out["boot"] = vllm_logs.parse(log)
        out["kernels"] = vllm_logs.verdicts(expected_kernels(p), out["boot"], p["vllm_version"])
        problems += vllm_logs.problems(out["kernels"], unverifiable_fails=p["unverifiable"] == "fail")
        if p["unverifiable"] == "warn":
            for v in out["kernels"]:
                if v["status"] == "unverifiable":
                    module.warn(v["message"])
    if problems:
        module.fail_json(msg="endpoint %s is not proven coherent: %s" % (base, " | ".join(problems)),
                         answers=answers, models=models, **out)
    module.exit_json(changed=False, answers=answers, models=models, **out)


if __name__ == "__main__":
    main()
