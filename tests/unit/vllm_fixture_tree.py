"""The committed vLLM source fixtures (tests/tools/vllm_fixtures.py), materialised as release trees."""

import gzip
import json
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "vllm"
INDEX = json.loads((FIXTURES / "index.json").read_text())
RELEASES = list(INDEX)


def vt(version):
    return tuple(int(x) for x in version.split("."))


def materialise(version, dest):
    """The release's watched files under dest/vllm (what the fixtures hold: watched files plus _version.py)."""
    for rel, blob in INDEX[version].items():
        path = dest / "vllm" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(gzip.decompress((FIXTURES / "files" / blob).read_bytes()))
    return dest / "vllm"
