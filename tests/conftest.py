"""Make the collection importable as ansible_collections.sparkfleet.vllm from this checkout."""

import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
_root = Path(tempfile.mkdtemp(prefix="sparkfleet-collections-"))
(_root / "ansible_collections" / "sparkfleet").mkdir(parents=True)
os.symlink(REPO, _root / "ansible_collections" / "sparkfleet" / "vllm")
sys.path.insert(0, str(_root))
sys.path.insert(0, str(REPO / "tests" / "sim"))
