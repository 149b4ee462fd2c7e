"""Every module's DOCUMENTATION, EXAMPLES and RETURN are valid YAML (ansible-doc renders them)."""

import ast
from pathlib import Path

import pytest
import yaml

MODULES = sorted((Path(__file__).resolve().parents[2] / "plugins" / "modules").glob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.stem)
def test_module_docs_parse(path):
    blocks = {n.targets[0].id: n.value.value for n in ast.parse(path.read_text()).body
              if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") in ("DOCUMENTATION", "EXAMPLES", "RETURN")}
    assert set(blocks) == {"DOCUMENTATION", "EXAMPLES", "RETURN"}
    for name, text in blocks.items():
        assert yaml.safe_load(text) is not None, name
