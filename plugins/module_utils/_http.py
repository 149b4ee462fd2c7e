# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""Small JSON-over-HTTP client for the OpenAI-compatible endpoint (Ansible's own ``open_url``)."""

from __future__ import annotations

import json

from ansible.module_utils.urls import open_url

try:
    from urllib.error import HTTPError
except ImportError:  # pragma: no cover
    HTTPError = Exception


def request(url, body=None, api_key=None, timeout=30, validate_certs=True):
    """Return (status, parsed_json_or_text). Non-2xx answers are returned, not raised. An HTTPS endpoint's
    certificate is checked unless ``validate_certs`` is false."""
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = "Bearer %s" % api_key
    data = json.dumps(body).encode() if body is not None else None
    try:
        resp = open_url(url, data=data, headers=headers, method="POST" if body is not None else "GET",
                        timeout=timeout, validate_certs=validate_certs)
        status, raw = resp.getcode(), resp.read()
    except HTTPError as exc:
        status, raw = exc.code, exc.read()
    text = raw.decode("utf-8", errors="replace")
    try:
        return status, json.loads(text) if text else None
    except ValueError:
        return status, text
