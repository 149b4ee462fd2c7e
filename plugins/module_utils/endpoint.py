# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""The one way this collection proves an endpoint's answers: /health, /v1/models, then every probe of the
recipe, each answer judged by text_quality (vllm_check after a deploy, deploy_stamp on a re-run)."""

from __future__ import annotations

from ansible_collections.sparkfleet.vllm.plugins.module_utils import text_quality
from ansible_collections.sparkfleet.vllm.plugins.module_utils._http import request

# A probe's options, as vllm_check and deploy_stamp take them.
PROBE_OPTIONS = dict(
    prompt=dict(type="str", required=True),
    expect_any=dict(type="list", elements="str", default=[]),
    kind=dict(type="str", choices=["completion", "chat"], default="completion"),
    max_tokens=dict(type="int", default=16, no_log=False),
    scripts=dict(type="list", elements="str"),
)


def run_probe(base, name, probe, api_key, timeout, validate_certs=True):
    if probe["kind"] == "chat":
        body = {"model": name, "messages": [{"role": "user", "content": probe["prompt"]}],
                "max_tokens": probe["max_tokens"], "temperature": 0.0}
        status, reply = request(base + "/v1/chat/completions", body, api_key, timeout, validate_certs)
        text = reply["choices"][0]["message"]["content"] if status == 200 else None
    else:
        body = {"model": name, "prompt": probe["prompt"], "max_tokens": probe["max_tokens"], "temperature": 0.0}
        status, reply = request(base + "/v1/completions", body, api_key, timeout, validate_certs)
        text = reply["choices"][0]["text"] if status == 200 else None
    return status, reply, text


def prove(base, name, probes, api_key, timeout, validate_certs=True, scripts=("latin",)):
    """(problems in words, answers, models) of the endpoint at ``base``; no problem means proven coherent."""
    base = base.rstrip("/")
    problems, answers, models = [], [], []
    try:
        status, _unused = request(base + "/health", None, None, timeout, validate_certs)
        if status != 200:
            problems.append("/health answered %s" % status)
        status, reply = request(base + "/v1/models", None, api_key, timeout, validate_certs)
        if status == 200 and isinstance(reply, dict):
            models = [m.get("id") for m in reply.get("data", [])]
            if name not in models:
                problems.append("/v1/models lists %s, not %s" % (models, name))
        else:
            problems.append("/v1/models answered %s" % status)
        for probe in probes:
            status, reply, text = run_probe(base, name, probe, api_key, timeout, validate_certs)
            if text is None:
                problems.append("probe %r: HTTP %s %s" % (probe["prompt"], status, str(reply)[:200]))
                answers.append({"prompt": probe["prompt"], "status": status, "ok": False})
                continue
            verdict = text_quality.assess(text, probe["expect_any"], tuple(probe["scripts"] or scripts))
            answers.append({"prompt": probe["prompt"], "answer": text, "ok": verdict["ok"],
                            "reasons": verdict["reasons"], "metrics": verdict["metrics"]})
            if not verdict["ok"]:
                problems.append("probe %r answered %r: %s"
                                % (probe["prompt"], text[:120], "; ".join(verdict["reasons"])))
    except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
        problems.append("endpoint %s: %s: %s" % (base, type(exc).__name__, exc))
    return problems, answers, models
