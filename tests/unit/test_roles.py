"""Every role declares its inputs: its argument specs name exactly the variables its defaults set plus the
variables of the collection's namespace (sparkfleet_*) that it reads. Roles pass facts to each other only
through that namespace, which the playbooks fill from each role's published facts; no role reads another
role's variables."""

import re
from pathlib import Path

import pytest
import yaml

ROLES = sorted(p for p in (Path(__file__).resolve().parents[2] / "roles").iterdir() if p.is_dir())


def role_text(role):
    return "".join(f.read_text() for sub in ("tasks", "defaults", "templates") for f in sorted((role / sub).glob("*"))
                   if f.is_file())


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_argument_specs_match_defaults(role):
    defaults = yaml.safe_load((role / "defaults/main.yml").read_text()) or {}
    text = role_text(role)
    # Inventory groups a role creates (add_host's groups:) share the prefix but are not variables.
    groups = set(re.findall(r"^\s*groups: (sparkfleet_[a-z0-9_]+)$", text, flags=re.M))
    namespace = set(re.findall(r"\bsparkfleet_[a-z0-9_]+", text)) - groups
    specs = yaml.safe_load((role / "meta/argument_specs.yml").read_text())["argument_specs"]
    for entry, spec in specs.items():
        assert set(spec.get("options", {})) == set(defaults) | namespace, f"{role.name}:{entry}"
    for name in defaults:
        assert name.startswith(role.name + "_"), f"{role.name}: {name} lacks the role prefix"


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_no_role_reads_another_roles_variables(role):
    # What a role reads: its text without the keys of its YAML mappings (a module option such as
    # validate_certs is not the validate role's variable).
    text = re.sub(r"(?m)^(\s*-?\s*)[a-z0-9_]+:", r"\1", role_text(role))
    for other in ROLES:
        if other == role:
            continue
        hits = sorted(set(re.findall(r"(?<![\w.])_*%s_[a-z0-9_]+" % other.name, text)))  # not a module FQCN
        assert not hits, "%s reads %s's variables %s; pass them through a sparkfleet_* fact" % (
            role.name, other.name, hits)


class _DuplicateKeyLoader(yaml.SafeLoader):
    """Flags a key that a mapping sets twice, or sets again after merging it in with <<: ansible-core warns
    about both ("Found duplicate mapping key") and keeps only the last value."""

    def construct_mapping(self, node, deep=False):
        merged, explicit = set(), []
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                sources = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
                merged |= {key.value for source in sources for key, _value in source.value}
            else:
                explicit.append(key_node.value)
        twice = {k for k in explicit if explicit.count(k) > 1} | (merged & set(explicit))
        if twice:
            raise yaml.constructor.ConstructorError(None, None, "duplicate mapping key %s" % sorted(twice),
                                                    node.start_mark)
        return super().construct_mapping(node, deep)


def load_strict(text):
    return yaml.load(text, Loader=_DuplicateKeyLoader)  # noqa: S506 - a SafeLoader subclass


REPO = Path(__file__).resolve().parents[2]
YAML_FILES = sorted({p for pattern in ("*.yml", "*.yaml") for p in REPO.rglob(pattern)
                     if not {".venv", "collections"} & set(p.relative_to(REPO).parts[:1])
                     and ".git" not in p.parts and "output" not in p.parts})


@pytest.mark.parametrize("path", YAML_FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_no_duplicate_mapping_keys(path):
    load_strict(path.read_text())


def test_duplicate_key_loader_flags_a_key_set_again_after_a_merge():
    with pytest.raises(yaml.constructor.ConstructorError, match="description"):
        load_strict("a: &x {description: 1, o: 2}\nb:\n  <<: *x\n  description: 3\n")
    with pytest.raises(yaml.constructor.ConstructorError, match="'k'"):
        load_strict("k: 1\nk: 2\n")
