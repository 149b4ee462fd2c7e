"""Every role's argument specs name exactly the variables its defaults set."""

from pathlib import Path

import pytest
import yaml

ROLES = sorted(p for p in (Path(__file__).resolve().parents[2] / "roles").iterdir() if p.is_dir())


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_argument_specs_match_defaults(role):
    defaults = yaml.safe_load((role / "defaults/main.yml").read_text()) or {}
    specs = yaml.safe_load((role / "meta/argument_specs.yml").read_text())["argument_specs"]
    for entry, spec in specs.items():
        assert set(spec.get("options", {})) == set(defaults), f"{role.name}:{entry}"
    for name in defaults:
        assert name.startswith(role.name + "_"), f"{role.name}: {name} lacks the role prefix"
