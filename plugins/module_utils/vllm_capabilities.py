# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""What a vLLM release accepts on `vllm serve`, read from that release's own source files.

vLLM cannot be imported where this runs (it needs a GPU stack), so the facts are read statically:

* `read(sources)` takes the text of the files named in `SOURCE_PATHS` (relative to the installed
  `vllm/` package directory; a path the release does not have is simply absent) and returns a
  JSON-serialisable dict of facts: the release version, every `vllm serve` flag with its choices and
  whether it takes a value, the attention/MoE backends, quantization methods, KV-cache dtypes and the
  `VLLM_*` environment variables.
* `check(argv, env, facts)` judges a `vllm serve ...` command line and its environment against those
  facts and returns one problem string per thing the release would refuse (empty list: accepted).

How the flags are found mirrors vLLM's own parser construction: `make_arg_parser` (entrypoints
`cli_args.py`) registers a few flags, the frontend dataclass fields (one `--kebab-case` flag each),
and `AsyncEngineArgs.add_cli_args` / `EngineArgs.add_cli_args` (engine/arg_utils.py), which call
`add_argument("--flag", "-alias", **get_kwargs(SomeConfig)["field"])`. Those functions are
interpreted over their syntax tree here; `get_kwargs` is reproduced from the config dataclasses'
field annotations (config/*.py) with the rules of vLLM's `_compute_kwargs`: a bool field gives
`--x`/`--no-x`, a `Literal` gives choices (or only a metavar when `str` is also allowed), a list a
one-or-more value, a dataclass a JSON value. Values that vLLM validates after argparse, when it builds
its engine config, are judged as well: `--attention-backend` against the AttentionBackendEnum of
v1/attention/backends/registry.py (case-insensitively where the AttentionConfig validator upper-cases
the name), `--kv-cache-dtype` against the `CacheDType` Literal, `--quantization` against the
`QuantizationMethods` Literal. Environment variables come from `environment_variables` in envs.py,
with the choices declared through `env_with_choices` and its list/set variants.

Standard library only (ast, difflib, json, re); Python 3.8 syntax.
"""

from __future__ import annotations

import ast
import difflib
import json
import re

# Paths relative to the vllm package directory (site-packages/vllm/). A trailing "/" names a
# directory: only its *.py files are wanted. Either cli_args location exists, depending on release.
SOURCE_PATHS = (
    "_version.py",
    "envs.py",
    "engine/arg_utils.py",
    "config/",
    "entrypoints/openai/cli_args.py",
    "entrypoints/common/cli_args.py",
    "utils/argparse_utils.py",
    "v1/attention/backends/registry.py",
    "model_executor/layers/quantization/__init__.py",
)

_ARG_UTILS = "engine/arg_utils.py"
_REGISTRY = "v1/attention/backends/registry.py"
_QUANT = "model_executor/layers/quantization/__init__.py"
_ATTENTION_CONFIG = "config/attention.py"
_ARGPARSE_UTILS = "utils/argparse_utils.py"
_ENVS = "envs.py"

# argparse actions that never take a value.
_NO_VALUE_ACTIONS = ("store_true", "store_false", "store_const", "append_const", "count", "help",
                     "version")
_BOOL_OPTIONAL = "BooleanOptionalAction"
_NEG_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")
_HUMAN_INT = re.compile(r"^\s*\d+(?:\.\d+)?[kKmMgGtT]\s*$")
_ENV_CHOICE_FUNCS = ("env_with_choices", "env_list_with_choices", "env_set_with_choices")


# ------------------------------------------------------------------------------------------ versions

def version_tuple(s):
    """The release numbers of a PEP 440-ish version: "0.21.1rc1.dev39+gabc" -> (0, 21, 1); () if none."""
    if s is None:
        return ()
    m = re.match(r"\s*v?(?:\d+!)?(\d+(?:\.\d+)*)", str(s))
    if not m:
        return ()
    return tuple(int(p) for p in m.group(1).split("."))


def at_least(version, minimum):
    """Whether `version`'s release numbers are >= `minimum`'s (pre/dev/local parts are ignored)."""
    a, b = version_tuple(version), version_tuple(minimum)
    if not a:
        return False
    n = max(len(a), len(b))
    return a + (0,) * (n - len(a)) >= b + (0,) * (n - len(b))


# ---------------------------------------------------------------------------------- source index

class _Unknown:
    """A value the static reading could not work out."""

    def __repr__(self):
        return "_UNKNOWN"


_UNKNOWN = _Unknown()


class _Symbol:
    """A name imported from a module that is not among the sources (kept by name)."""

    def __init__(self, name):
        self.name = name


class _ClassRef:
    def __init__(self, path, node):
        self.path, self.node = path, node


class _FuncRef:
    def __init__(self, path, node, owner=None, bound_cls=None):
        self.path, self.node, self.owner, self.bound_cls = path, node, owner, bound_cls


class _ModuleRef:
    def __init__(self, dotted):
        self.dotted = dotted


def _slice(node):
    s = node.slice
    if type(s).__name__ == "Index":  # Python 3.8
        s = s.value
    return s


def _name_of(node):
    """`a.b.c` -> "c", `c` -> "c", `c(...)` -> name of c; else None."""
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _is_type_checking(test):
    return _name_of(test) == "TYPE_CHECKING"


class _Index:
    """Parsed sources with module-level symbol tables and import following."""

    def __init__(self, sources):
        self.sources = {}
        for raw_path, raw_text in (sources or {}).items():
            path = str(raw_path).replace("\\", "/")
            while path.startswith("./"):
                path = path[2:]
            if path.startswith("vllm/"):
                path = path[len("vllm/"):]
            text = raw_text.decode("utf-8", "replace") if isinstance(raw_text, bytes) else raw_text
            self.sources[path] = text
        self._trees = {}
        self._symbols = {}

    def tree(self, path):
        if path not in self._trees:
            text = self.sources.get(path)
            tree = None
            if text is not None:
                try:
                    tree = ast.parse(text)
                except (SyntaxError, ValueError):
                    tree = None
            self._trees[path] = tree
        return self._trees[path]

    def module_path(self, dotted):
        if dotted == "vllm":
            cands = ["__init__.py"]
        elif dotted.startswith("vllm."):
            rel = dotted[len("vllm."):].replace(".", "/")
            cands = [rel + ".py", rel + "/__init__.py"]
        else:
            return None
        for c in cands:
            if c in self.sources:
                return c
        return None

    def _dotted(self, path):
        mod = path[:-len(".py")] if path.endswith(".py") else path
        if mod.endswith("/__init__"):
            mod = mod[:-len("/__init__")]
        elif mod == "__init__":
            mod = ""
        return ("vllm." + mod.replace("/", ".")) if mod else "vllm"

    def symbols(self, path):
        if path in self._symbols:
            return self._symbols[path]
        table = {}
        self._symbols[path] = table
        tree = self.tree(path)
        if tree is not None:
            self._collect(path, tree.body, table)
        return table

    def _collect(self, path, body, table):
        for st in body:
            if isinstance(st, ast.ImportFrom):
                base = st.module or ""
                if st.level:
                    parts = self._dotted(path).split(".")
                    if not path.endswith("__init__.py"):
                        parts = parts[:-1]
                    parts = parts[:len(parts) - (st.level - 1)] if st.level > 1 else parts
                    base = ".".join(parts + ([base] if base else []))
                for alias in st.names:
                    table[alias.asname or alias.name] = ("import", base, alias.name)
            elif isinstance(st, ast.Import):
                for alias in st.names:
                    if alias.asname:
                        table[alias.asname] = ("module", alias.name)
                    else:
                        table[alias.name.split(".")[0]] = ("module", alias.name.split(".")[0])
            elif isinstance(st, ast.Assign):
                for t in st.targets:
                    if isinstance(t, ast.Name):
                        table[t.id] = ("expr", st.value)
            elif isinstance(st, ast.AnnAssign):
                if isinstance(st.target, ast.Name) and st.value is not None:
                    table[st.target.id] = ("expr", st.value)
            elif isinstance(st, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                table[st.name] = ("node", st)
            elif isinstance(st, ast.If):
                if _is_type_checking(st.test):
                    self._collect(path, st.orelse, table)
                elif isinstance(st.test, ast.UnaryOp) and _is_type_checking(st.test.operand):
                    self._collect(path, st.body, table)
                else:
                    self._collect(path, st.body, table)
                    self._collect(path, st.orelse, table)
            elif isinstance(st, ast.Try):
                self._collect(path, st.body, table)

    def resolve(self, path, name, depth=0):
        """(path, kind, payload) for `name` as seen from module `path`; kind in node/expr/module/symbol."""
        if depth > 12 or path is None:
            return None
        entry = self.symbols(path).get(name)
        if entry is None:
            return None
        if entry[0] == "import":
            target = self.module_path(entry[1])
            if target is None:
                sub = self.module_path(entry[1] + "." + entry[2]) if entry[1] else None
                if sub is not None:
                    return (sub, "module", entry[1] + "." + entry[2])
                return (None, "symbol", entry[2])
            found = self.resolve(target, entry[2], depth + 1)
            if found is None:
                sub = self.module_path(entry[1] + "." + entry[2])
                if sub is not None:
                    return (sub, "module", entry[1] + "." + entry[2])
                return (None, "symbol", entry[2])
            return found
        if entry[0] == "module":
            return (self.module_path(entry[1]), "module", entry[1])
        return (path, entry[0], entry[1])

    def find_class(self, path, name):
        found = self.resolve(path, name)
        if found and found[1] == "node" and isinstance(found[2], ast.ClassDef):
            return _ClassRef(found[0], found[2])
        return None


# ----------------------------------------------------------------------------------- type hints

_BUILTIN_TYPES = {
    "bool": "bool", "int": "int", "float": "float", "str": "str", "bytes": "str",
    "dict": "dict", "Dict": "dict", "Mapping": "dict", "MutableMapping": "dict",
    "list": "list", "List": "list", "Sequence": "list",
    "set": "set", "Set": "set", "frozenset": "set", "FrozenSet": "set",
    "tuple": "tuple", "Tuple": "tuple",
}
_TRANSPARENT = ("Annotated", "SkipValidation", "Required", "NotRequired", "Final")


def _is_dataclass(index, cref, depth=0):
    if depth > 10:
        return False
    for dec in cref.node.decorator_list:
        if _name_of(dec) in ("config", "dataclass"):
            return True
    for base in cref.node.bases:
        bref = _class_of_expr(index, cref.path, base)
        if bref is not None and _is_dataclass(index, bref, depth + 1):
            return True
    return False


def _class_of_expr(index, path, expr):
    if isinstance(expr, ast.Name):
        return index.find_class(path, expr.id)
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
        found = index.resolve(path, expr.value.id)
        if found and found[1] == "module" and found[0]:
            return index.find_class(found[0], expr.attr)
    return None


def _hints(index, path, expr, depth=0):
    """The flattened set of type-hint atoms of an annotation, as vLLM's get_type_hints sees them.

    Atoms: ("none",) ("bool",) ("int",) ("float",) ("str",) ("dict",) ("list", elem) ("set", elem)
    ("tuple", elem, n) ("literal", values) ("dataclass", name) ("other", name).
    """
    if depth > 25 or expr is None:
        return [("other", "?")]
    if isinstance(expr, ast.Constant):
        if expr.value is None:
            return [("none",)]
        if isinstance(expr.value, str):  # a forward reference
            try:
                inner = ast.parse(expr.value, mode="eval").body
            except SyntaxError:
                return [("other", expr.value)]
            return _hints(index, path, inner, depth + 1)
        return [("other", repr(expr.value))]
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.BitOr):
        return _hints(index, path, expr.left, depth + 1) + _hints(index, path, expr.right, depth + 1)
    if isinstance(expr, ast.Subscript):
        base = _name_of(expr.value)
        args = _slice(expr)
        items = list(args.elts) if isinstance(args, ast.Tuple) else [args]
        if base == "Literal":
            return [("literal", _literal_values(index, path, items, depth + 1))]
        if base in ("Union",):
            out = []
            for it in items:
                out += _hints(index, path, it, depth + 1)
            return out
        if base == "Optional":
            return _hints(index, path, items[0], depth + 1) + [("none",)]
        if base in _TRANSPARENT:
            return _hints(index, path, items[0], depth + 1)
        kind = _BUILTIN_TYPES.get(base)
        if kind in ("list", "set"):
            return [(kind, _hints(index, path, items[0], depth + 1))]
        if kind == "tuple":
            ellipsis = any(isinstance(i, ast.Constant) and i.value is Ellipsis for i in items)
            elems = [i for i in items if not (isinstance(i, ast.Constant) and i.value is Ellipsis)]
            elem = _hints(index, path, elems[0], depth + 1) if elems else [("str",)]
            return [("tuple", elem, None if ellipsis else len(items))]
        if kind == "dict":
            return [("dict",)]
        if base == "type":
            return [("type",)]
        return [("other", base or "?")]
    if isinstance(expr, (ast.Name, ast.Attribute)):
        name = _name_of(expr)
        if name == "None":
            return [("none",)]
        if isinstance(expr, ast.Name):
            found = index.resolve(path, name)
        else:
            found = None
            if isinstance(expr.value, ast.Name):
                mod = index.resolve(path, expr.value.id)
                if mod and mod[1] == "module" and mod[0]:
                    found = index.resolve(mod[0], expr.attr)
        if found is not None:
            fpath, kind, payload = found
            if kind == "node" and isinstance(payload, ast.ClassDef):
                if _is_dataclass(index, _ClassRef(fpath, payload)):
                    return [("dataclass", name)]
                return [("other", name)]
            if kind == "expr":
                if isinstance(payload, ast.Call):
                    if _name_of(payload.func) == "NewType" and len(payload.args) > 1:
                        return _hints(index, fpath, payload.args[1], depth + 1)
                    return [("other", name)]
                return _hints(index, fpath, payload, depth + 1)
        if name in _BUILTIN_TYPES:
            kind = _BUILTIN_TYPES[name]
            if kind in ("list", "set"):
                return [(kind, [("str",)])]
            if kind == "tuple":
                return [("tuple", [("str",)], None)]
            return [(kind,)]
        if name == "type":
            return [("type",)]
        return [("other", name)]
    return [("other", "?")]


def _literal_values(index, path, items, depth):
    values = []
    for it in items:
        if isinstance(it, ast.Constant):
            values.append(it.value)
        elif isinstance(it, ast.UnaryOp) and isinstance(it.op, ast.USub) and isinstance(
                it.operand, ast.Constant):
            values.append(-it.operand.value)
        else:  # a nested Literal alias is flattened by typing
            for atom in _hints(index, path, it, depth + 1):
                if atom[0] == "literal":
                    values.extend(atom[1])
    return values


def _literals_in(atoms):
    out = []
    for atom in atoms:
        if atom[0] == "literal":
            out.extend(v for v in atom[1] if v not in out)
    return out


def _class_fields(index, cref, depth=0):
    """Ordered [(name, path, annotation)] of a dataclass, base classes' fields first."""
    if depth > 10:
        return []
    fields = []
    for base in cref.node.bases:
        bref = _class_of_expr(index, cref.path, base)
        if bref is not None:
            fields.extend(_class_fields(index, bref, depth + 1))
    own = []
    for st in cref.node.body:
        if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name):
            ann = st.annotation
            if _name_of(ann) in ("ClassVar", "InitVar") or (
                    isinstance(ann, ast.Constant) and isinstance(ann.value, str)
                    and ann.value.startswith(("ClassVar", "InitVar"))):
                continue
            own.append((st.target.id, cref.path, ann))
    names = {n for n, _unused, _unused in own}
    return [f for f in fields if f[0] not in names] + own


def _int_value_types(index):
    """{field name: "human_int" | "human_int_or_auto"} from vLLM's _compute_kwargs special cases."""
    found = {}
    tree = index.tree(_ARG_UTILS)
    func = None
    if tree is not None:
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name == "_compute_kwargs":
                func = node
                break
    if func is None:
        return {"max_model_len": "human_int_or_auto", "max_num_batched_tokens": "human_int",
                "kv_cache_memory_bytes": "human_int"}
    local_sets = {}
    for node in ast.walk(func):
        if isinstance(node, ast.Assign) and isinstance(node.value, (ast.Set, ast.Tuple, ast.List)):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    local_sets[t.id] = [e.value for e in node.value.elts if isinstance(e, ast.Constant)]
    for node in ast.walk(func):
        if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare):
            continue
        test = node.test
        if not (isinstance(test.left, ast.Name) and test.left.id == "name" and len(test.comparators) == 1):
            continue
        comp = test.comparators[0]
        if isinstance(comp, ast.Constant):
            names = [comp.value]
        elif isinstance(comp, (ast.Set, ast.Tuple, ast.List)):
            names = [e.value for e in comp.elts if isinstance(e, ast.Constant)]
        elif isinstance(comp, ast.Name):
            names = local_sets.get(comp.id, [])
        else:
            continue
        kind = None
        for st in node.body:
            if isinstance(st, ast.Assign) and _name_of(st.value) in (
                    "human_readable_int", "human_readable_int_or_auto"):
                kind = "human_int_or_auto" if _name_of(st.value).endswith("_or_auto") else "human_int"
                break
        if kind:
            for n in names:
                found.setdefault(n, kind)
    return found


def _scalar_type(atoms):
    kinds = {a[0] for a in atoms}
    lits = _literals_in(atoms)
    if lits and "str" not in kinds:
        if all(isinstance(v, bool) for v in lits):
            return "str"
        if all(isinstance(v, int) for v in lits):
            return "int"
        if all(isinstance(v, (int, float)) for v in lits):
            return "float"
        return "str"
    for k in ("int", "float"):
        if kinds in ({k}, {k, "none"}):
            return k
    return "str"


def _field_kwargs(atoms, name, int_types):
    """argparse kwargs for one config field, by the rules of vLLM's _compute_kwargs."""
    kinds = set(a[0] for a in atoms)
    kw = {}
    if "dataclass" in kinds:
        kw["type"] = "json"
    elif kinds == {"bool", "str", "none"}:
        kw.update(type="str", nargs="?")
    elif "bool" in kinds:
        kw["action"] = _BOOL_OPTIONAL
    elif "literal" in kinds:
        values = _literals_in(atoms)
        kw["type"] = _scalar_type([a for a in atoms if a[0] == "literal"])
        if "str" not in kinds:
            kw["choices"] = [_choice_str(v) for v in values]
    elif kinds & {"tuple", "list", "set"}:
        for kind in ("tuple", "list", "set"):
            if kind in kinds:
                atom = next(a for a in atoms if a[0] == kind)
                break
        elem = atom[1]
        if kind == "tuple" and atom[2] is not None:
            kw["nargs"] = atom[2]
        else:
            kw["nargs"] = "+"
        kw["type"] = "str" if len(elem) > 1 else _scalar_type(elem)
        lits = _literals_in(elem)
        if lits and len(elem) == 1:
            kw["choices"] = [_choice_str(v) for v in lits]
            kw["type"] = _scalar_type(elem)
    elif "int" in kinds:
        kw["type"] = int_types.get(name, "int")
    elif "float" in kinds:
        kw["type"] = "float"
    elif "dict" in kinds:
        kw["type"] = "json" if not (kinds & {"str", "other"}) else "str"
    else:
        kw["type"] = "str"
    if "none" in kinds and "bool" not in kinds:
        kw["none_ok"] = True
    kw["_literals"] = _literals_in(atoms)
    return kw


def _choice_str(v):
    if isinstance(v, bool):
        return "True" if v else "False"
    return str(v)


# ---------------------------------------------------------------------------------- interpreter

class _Return(Exception):
    def __init__(self, value):
        Exception.__init__(self)
        self.value = value


class _Parser:
    """Stands for an argparse parser or argument group: add_argument calls land in the registry."""


class _Bound:
    def __init__(self, obj, attr):
        self.obj, self.attr = obj, attr


class _Super:
    def __init__(self, defining, bound_cls):
        self.defining, self.bound_cls = defining, bound_cls


class _Frame:
    def __init__(self, path, cls=None):
        self.path, self.cls, self.env = path, cls, {}


class _Interpreter:
    """Walks vLLM's parser-building functions and records every add_argument call."""

    def __init__(self, index):
        self.index = index
        self.flags = {}
        self.positionals = []
        self.int_types = _int_value_types(index)
        self._kw_cache = {}
        self.depth = 0

    # -- statements
    def run(self, stmts, frame):
        for st in stmts:
            self.stmt(st, frame)

    def stmt(self, st, frame):
        if isinstance(st, ast.Expr):
            self.eval(st.value, frame)
        elif isinstance(st, ast.Assign):
            value = self.eval(st.value, frame)
            for t in st.targets:
                self.assign(t, value, frame)
        elif isinstance(st, ast.AnnAssign) and st.value is not None:
            self.assign(st.target, self.eval(st.value, frame), frame)
        elif isinstance(st, ast.AugAssign):
            cur = self.eval(st.target, frame)
            val = self.eval(st.value, frame)
            if isinstance(st.op, ast.Add) and isinstance(cur, list) and isinstance(val, list):
                cur.extend(val)
            elif isinstance(st.op, ast.Add) and isinstance(cur, str) and isinstance(val, str):
                self.assign(st.target, cur + val, frame)
            else:
                self.assign(st.target, _UNKNOWN, frame)
        elif isinstance(st, ast.If):
            test = self.eval(st.test, frame)
            if test is _UNKNOWN or isinstance(test, (_Bound, _Symbol, _FuncRef, _ClassRef, _ModuleRef)):
                self.run(st.body, frame)
                self.run(st.orelse, frame)
            elif test:
                self.run(st.body, frame)
            else:
                self.run(st.orelse, frame)
        elif isinstance(st, ast.For):
            it = self.eval(st.iter, frame)
            if isinstance(it, (list, tuple)):
                for item in list(it):
                    self.assign(st.target, item, frame)
                    self.run(st.body, frame)
            else:
                self.assign(st.target, _UNKNOWN, frame)
                self.run(st.body, frame)
        elif isinstance(st, ast.With):
            self.run(st.body, frame)
        elif isinstance(st, ast.Try):
            self.run(st.body, frame)
            self.run(st.orelse, frame)
            self.run(st.finalbody, frame)
        elif isinstance(st, ast.Return):
            raise _Return(self.eval(st.value, frame) if st.value is not None else None)
        elif isinstance(st, ast.Delete):
            for t in st.targets:
                if isinstance(t, ast.Subscript):
                    container = self.eval(t.value, frame)
                    key = self.eval(_slice(t), frame)
                    if isinstance(container, dict) and not isinstance(key, _Unknown):
                        container.pop(key, None)
        elif isinstance(st, ast.ImportFrom) and st.module and not st.level:
            path = self.index.module_path(st.module)
            for alias in st.names:
                found = self.index.resolve(path, alias.name) if path else None
                frame.env[alias.asname or alias.name] = self._from_found(found, alias.name)
        elif isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)):
            frame.env[st.name] = _FuncRef(frame.path, st)
        elif isinstance(st, ast.ClassDef):
            frame.env[st.name] = _ClassRef(frame.path, st)

    def assign(self, target, value, frame):
        if isinstance(target, ast.Name):
            frame.env[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            if isinstance(value, (list, tuple)) and len(value) == len(target.elts):
                for t, v in zip(target.elts, value):
                    self.assign(t, v, frame)
            else:
                for t in target.elts:
                    self.assign(t, _UNKNOWN, frame)
        elif isinstance(target, ast.Subscript):
            container = self.eval(target.value, frame)
            key = self.eval(_slice(target), frame)
            if isinstance(container, dict) and isinstance(key, (str, int)):
                container[key] = value

    # -- expressions
    def eval(self, node, frame):
        try:
            return self._eval(node, frame)
        except _Return:
            raise
        except (TypeError, ValueError, KeyError, IndexError, AttributeError, RecursionError):
            return _UNKNOWN  # what the static reading cannot follow is simply unknown

    def _eval(self, node, frame):
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            return self.lookup(node.id, frame)
        if isinstance(node, ast.Attribute):
            return self.attribute(node, frame)
        if isinstance(node, ast.Subscript):
            base = self.eval(node.value, frame)
            key = self.eval(_slice(node), frame)
            if isinstance(base, dict) and isinstance(key, (str, int)):
                return base.get(key, _UNKNOWN)
            if isinstance(base, (list, tuple)) and isinstance(key, int):
                return base[key]
            return _UNKNOWN
        if isinstance(node, ast.Dict):
            out = {}
            for k, v in zip(node.keys, node.values):
                val = self.eval(v, frame)
                if k is None:
                    if not isinstance(val, dict):
                        return _UNKNOWN
                    out.update(val)
                else:
                    key = self.eval(k, frame)
                    if isinstance(key, (str, int)):
                        out[key] = val
            return out
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            out = []
            for e in node.elts:
                if isinstance(e, ast.Starred):
                    v = self.eval(e.value, frame)
                    if not isinstance(v, (list, tuple)):
                        return _UNKNOWN
                    out.extend(v)
                else:
                    out.append(self.eval(e, frame))
            return out
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            a, b = self.eval(node.left, frame), self.eval(node.right, frame)
            if isinstance(a, list) and isinstance(b, list):
                return a + b
            if isinstance(a, str) and isinstance(b, str):
                return a + b
            return _UNKNOWN
        if isinstance(node, ast.UnaryOp):
            v = self.eval(node.operand, frame)
            if isinstance(node.op, ast.Not) and isinstance(v, (bool, int, str, list, dict, type(None))):
                return not v
            if isinstance(node.op, ast.USub) and isinstance(v, (int, float)):
                return -v
            return _UNKNOWN
        if isinstance(node, ast.BoolOp):
            vals = [self.eval(v, frame) for v in node.values]
            if any(v is _UNKNOWN or not isinstance(v, (bool, int, str, type(None))) for v in vals):
                return _UNKNOWN
            return all(vals) if isinstance(node.op, ast.And) else any(vals)
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            a, b = self.eval(node.left, frame), self.eval(node.comparators[0], frame)
            plain = (bool, int, float, str, type(None), list, tuple, dict)
            if not isinstance(a, plain) or not isinstance(b, plain):
                return _UNKNOWN
            op = node.ops[0]
            if isinstance(op, ast.Eq):
                return a == b
            if isinstance(op, ast.NotEq):
                return a != b
            if isinstance(op, ast.In):
                return a in b
            if isinstance(op, ast.NotIn):
                return a not in b
            if isinstance(op, ast.Is):
                return a is b
            if isinstance(op, ast.IsNot):
                return a is not b
            return _UNKNOWN
        if isinstance(node, ast.IfExp):
            test = self.eval(node.test, frame)
            if isinstance(test, (bool, int, str, type(None))):
                return self.eval(node.body if test else node.orelse, frame)
            return _UNKNOWN
        if isinstance(node, ast.Lambda):
            return ("normalise", _lambda_ops(node))
        if isinstance(node, ast.JoinedStr):
            parts = []
            for v in node.values:
                if isinstance(v, ast.Constant):
                    parts.append(str(v.value))
                elif isinstance(v, ast.FormattedValue):
                    x = self.eval(v.value, frame)
                    if not isinstance(x, (str, int)):
                        return _UNKNOWN
                    parts.append(str(x))
                else:
                    return _UNKNOWN
            return "".join(parts)
        if isinstance(node, ast.Call):
            return self.call(node, frame)
        return _UNKNOWN

    def lookup(self, name, frame):
        if name in frame.env:
            return frame.env[name]
        if name in ("int", "float", "str"):
            return name
        if name == "True":
            return True
        if name == "False":
            return False
        found = self.index.resolve(frame.path, name)
        return self._from_found(found, name)

    def _from_found(self, found, name):
        if found is None:
            return _Symbol(name)
        fpath, kind, payload = found
        if kind == "node":
            if isinstance(payload, ast.ClassDef):
                return _ClassRef(fpath, payload)
            return _FuncRef(fpath, payload)
        if kind == "module":
            return _ModuleRef(payload)
        if kind == "symbol":
            return _Symbol(payload)
        if kind == "expr":
            if isinstance(payload, (ast.Constant, ast.List, ast.Tuple, ast.Set, ast.Dict, ast.UnaryOp)):
                return self.eval(payload, _Frame(fpath))
            return _Symbol(name)
        return _UNKNOWN

    def attribute(self, node, frame):
        if isinstance(node.value, ast.Name) and node.value.id not in frame.env:
            found = self.index.resolve(frame.path, node.value.id)
            if found is None or found[1] in ("module", "symbol"):
                if found is not None and found[1] == "module" and found[0]:
                    return self._from_found(self.index.resolve(found[0], node.attr), node.attr)
                base_name = node.value.id
                if base_name == "json" and node.attr == "loads":
                    return "json"
                return _Symbol(node.attr)
        base = self.eval(node.value, frame)
        if isinstance(base, _ClassRef):
            return self.class_attr(base, node.attr, base)
        if isinstance(base, _Super):
            return self.super_attr(base, node.attr)
        if isinstance(base, _ModuleRef):
            path = self.index.module_path(base.dotted)
            return self._from_found(self.index.resolve(path, node.attr) if path else None, node.attr)
        if isinstance(base, (list, dict, str, _Parser)):
            return _Bound(base, node.attr)
        return _Symbol(node.attr)

    def _mro(self, cref, depth=0):
        out = [cref]
        if depth > 10:
            return out
        for base in cref.node.bases:
            bref = _class_of_expr(self.index, cref.path, base)
            if bref is not None:
                out.extend(self._mro(bref, depth + 1))
        return out

    def class_attr(self, cref, attr, bound_cls, skip_first=False):
        mro = self._mro(cref)
        if skip_first:
            mro = mro[1:]
        for c in mro:
            for st in c.node.body:
                if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)) and st.name == attr:
                    return _FuncRef(c.path, st, owner=c, bound_cls=bound_cls)
                if isinstance(st, ast.Assign) and any(
                        isinstance(t, ast.Name) and t.id == attr for t in st.targets):
                    return self.eval(st.value, _Frame(c.path))
                if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) and \
                        st.target.id == attr and st.value is not None:
                    return self.eval(st.value, _Frame(c.path))
        return _UNKNOWN

    def super_attr(self, sup, attr):
        return self.class_attr(sup.defining, attr, sup.bound_cls, skip_first=True)

    def call(self, node, frame):
        fname = _name_of(node.func) if isinstance(node.func, ast.Name) else None
        if fname == "get_args" and node.args:
            atoms = _hints(self.index, frame.path, node.args[0])
            lits = _literals_in(atoms)
            return list(lits) if lits else _UNKNOWN
        if fname == "super":
            if frame.cls is not None:
                return _Super(frame.cls, frame.env.get("cls", frame.cls))
            return _UNKNOWN
        args = []
        for a in node.args:
            if isinstance(a, ast.Starred):
                v = self.eval(a.value, frame)
                if isinstance(v, (list, tuple)):
                    args.extend(v)
                else:
                    args.append(_UNKNOWN)
            else:
                args.append(self.eval(a, frame))
        kwargs = {}
        for kw in node.keywords:
            v = self.eval(kw.value, frame)
            if kw.arg is None:
                if isinstance(v, dict):
                    kwargs.update(v)
                else:
                    kwargs["_unknown_kwargs"] = True
            else:
                kwargs[kw.arg] = v
        func = self.eval(node.func, frame)
        if isinstance(func, _Symbol) or (isinstance(func, _FuncRef) and fname):
            name = func.name if isinstance(func, _Symbol) else func.node.name
            special = self.builtin_call(name, args, kwargs)
            if special is not None:
                return special
        if isinstance(func, str) and func in ("int", "float", "str"):
            return _UNKNOWN
        if isinstance(func, _Bound):
            return self.method_call(func, args, kwargs)
        if isinstance(func, _FuncRef):
            return self.invoke(func, args, kwargs)
        return _UNKNOWN

    def builtin_call(self, name, args, kwargs):
        if name == "get_kwargs" and args and isinstance(args[0], _ClassRef):
            return self.get_kwargs(args[0])
        if name == "optional_type" and args:
            return ("optional", args[0])
        if name == "parse_type" and args:
            return args[0]
        if name in ("list", "sorted", "tuple") and args and isinstance(args[0], (list, tuple)):
            return sorted(args[0], key=str) if name == "sorted" else list(args[0])
        if name in ("load_general_plugins", "init_logger", "print"):
            return _UNKNOWN
        return None

    def method_call(self, bound, args, kwargs):
        obj, attr = bound.obj, bound.attr
        if isinstance(obj, _Parser):
            if attr == "add_argument":
                self.register(args, kwargs)
                return _UNKNOWN
            if attr in ("add_argument_group", "add_mutually_exclusive_group", "add_parser"):
                return obj
            return _UNKNOWN
        if isinstance(obj, list):
            if attr == "remove" and args:
                if args[0] in obj:
                    obj.remove(args[0])
                return None
            if attr == "append" and args:
                obj.append(args[0])
                return None
            if attr == "extend" and args and isinstance(args[0], (list, tuple)):
                obj.extend(args[0])
                return None
            if attr == "copy":
                return list(obj)
            return _UNKNOWN
        if isinstance(obj, dict):
            if attr == "pop" and args and isinstance(args[0], (str, int)):
                return obj.pop(args[0], args[1] if len(args) > 1 else _UNKNOWN)
            if attr == "get" and args and isinstance(args[0], (str, int)):
                return obj.get(args[0], args[1] if len(args) > 1 else None)
            if attr == "items":
                return [[k, v] for k, v in obj.items()]
            if attr == "keys":
                return list(obj.keys())
            if attr == "values":
                return list(obj.values())
            if attr == "update" and args and isinstance(args[0], dict):
                obj.update(args[0])
                return None
            if attr == "setdefault" and args and isinstance(args[0], (str, int)):
                return obj.setdefault(args[0], args[1] if len(args) > 1 else None)
            if attr == "copy":
                return dict(obj)
            return _UNKNOWN
        if isinstance(obj, str):
            if all(isinstance(a, str) for a in args) and attr in (
                    "replace", "lower", "upper", "strip", "removeprefix", "join"):
                if attr == "removeprefix":
                    return obj[len(args[0]):] if args and obj.startswith(args[0]) else obj
                if attr == "join":
                    return _UNKNOWN
                return getattr(obj, attr)(*args)
            return _UNKNOWN
        return _UNKNOWN

    def invoke(self, func, args, kwargs):
        if self.depth > 20:
            return _UNKNOWN
        node = func.node
        decorators = [_name_of(d) for d in node.decorator_list]
        frame = _Frame(func.path, cls=func.owner)
        params = list(node.args.args)
        if func.owner is not None and "staticmethod" not in decorators and params:
            first = params.pop(0)
            frame.env[first.arg] = func.bound_cls if "classmethod" in decorators else _UNKNOWN
        defaults = node.args.defaults
        offset = len(params) - len(defaults)
        for i, p in enumerate(params):
            if i < len(args):
                frame.env[p.arg] = args[i]
            elif p.arg in kwargs:
                frame.env[p.arg] = kwargs[p.arg]
            elif i >= offset:
                frame.env[p.arg] = self.eval(defaults[i - offset], _Frame(func.path))
            else:
                frame.env[p.arg] = _UNKNOWN
        for p, d in zip(node.args.kwonlyargs, node.args.kw_defaults):
            if p.arg in kwargs:
                frame.env[p.arg] = kwargs[p.arg]
            else:
                frame.env[p.arg] = self.eval(d, _Frame(func.path)) if d is not None else _UNKNOWN
        self.depth += 1
        try:
            self.run(node.body, frame)
        except _Return as r:
            return r.value
        finally:
            self.depth -= 1
        return None

    # -- get_kwargs reproduction
    def get_kwargs(self, cref):
        key = (cref.path, cref.node.name)
        if key not in self._kw_cache:
            table = {}
            for name, path, ann in _class_fields(self.index, cref):
                atoms = _hints(self.index, path, ann)
                table[name] = _field_kwargs(atoms, name, self.int_types)
                table[name]["_source"] = "%s.%s" % (cref.node.name, name)
            self._kw_cache[key] = table
        return json.loads(json.dumps(self._kw_cache[key]))  # a deep copy, like vLLM's get_kwargs

    # -- add_argument
    def register(self, args, kwargs):
        names = [a for a in args if isinstance(a, str)]
        if not names:
            return
        if not names[0].startswith("-"):
            self.positionals.append(names[0])
            return
        action = kwargs.get("action")
        if isinstance(action, _Symbol):
            action = action.name
        elif not isinstance(action, str):
            action = None
        nargs = kwargs.get("nargs")
        if not isinstance(nargs, (str, int)):
            nargs = None
        value_type, normalise, none_ok = _type_info(kwargs.get("type", "str"))
        if kwargs.get("none_ok"):
            none_ok = True
        choices = kwargs.get("choices")
        if isinstance(choices, (list, tuple)) and all(
                isinstance(c, (str, int, float, type(None))) for c in choices):
            choices = [_choice_str(c) for c in choices if c is not None]
        else:
            choices = None
        long_names = [n for n in names if n.startswith("--")]
        dest = kwargs.get("dest")
        if not isinstance(dest, str):
            dest = (long_names[0] if long_names else names[0]).lstrip("-").replace("-", "_")
        entry = {
            "choices": choices,
            "takes_value": True,
            "nargs": nargs,
            "type": value_type,
            "dest": dest,
            "aliases": list(names),
        }
        if normalise:
            entry["normalise"] = normalise
        if none_ok:
            entry["none_ok"] = True
        if kwargs.get("_literals"):
            entry["_literals"] = [_choice_str(v) for v in kwargs["_literals"]]
        if kwargs.get("_source"):
            entry["source"] = kwargs["_source"]
        if kwargs.get("_unknown_kwargs") and action is None and nargs is None:
            entry["uncertain"] = True  # its kwargs could not be read: value or not is unknown
        if action in _NO_VALUE_ACTIONS or action == _BOOL_OPTIONAL or nargs == 0:
            entry.update(takes_value=False, nargs=0, choices=None, type=None)
            entry.pop("normalise", None)
            entry.pop("none_ok", None)
        for n in names:
            self.flags[n] = entry
        if action == _BOOL_OPTIONAL:
            neg = dict(entry, aliases=["--no-" + n[2:] for n in long_names], negates=long_names[0]
                       if long_names else None)
            for n in long_names:
                self.flags["--no-" + n[2:]] = neg


def _type_info(t):
    """(value type, normaliser ops, none_ok) of an argparse `type=` as evaluated."""
    if isinstance(t, tuple) and len(t) == 2 and t[0] == "optional":
        vt, norm, _unused = _type_info(t[1])
        return vt, norm, True
    if isinstance(t, tuple) and len(t) == 2 and t[0] == "normalise":
        return "str", t[1], False
    if isinstance(t, _Symbol):
        t = t.name
    if isinstance(t, _FuncRef):
        t = t.node.name
    mapping = {
        "int": "int", "float": "float", "str": "str", "json": "json", "loads": "json",
        "human_int": "human_int", "human_int_or_auto": "human_int_or_auto",
        "human_readable_int": "human_int", "human_readable_int_or_auto": "human_int_or_auto",
    }
    return (mapping.get(t, "str") if isinstance(t, str) else "str"), None, False


def _lambda_ops(node):
    """`lambda s: s.lower().replace("-", "_")` -> [["lower"], ["replace", "-", "_"]]; None if other."""
    if len(node.args.args) != 1:
        return None
    param = node.args.args[0].arg
    ops = []
    expr = node.body
    while isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute):
        attr = expr.func.attr
        cargs = expr.args
        if attr in ("lower", "upper", "strip", "casefold") and not cargs:
            ops.append([attr])
        elif attr == "replace" and len(cargs) == 2 and all(
                isinstance(a, ast.Constant) and isinstance(a.value, str) for a in cargs):
            ops.append(["replace", cargs[0].value, cargs[1].value])
        else:
            return None
        expr = expr.func.value
    if not (isinstance(expr, ast.Name) and expr.id == param) or not ops:
        return None
    ops.reverse()
    return ops


def _apply_ops(value, ops):
    for op in ops or ():
        if op[0] == "lower":
            value = value.lower()
        elif op[0] == "upper":
            value = value.upper()
        elif op[0] == "casefold":
            value = value.casefold()
        elif op[0] == "strip":
            value = value.strip()
        elif op[0] == "replace":
            value = value.replace(op[1], op[2])
    return value


# ------------------------------------------------------------------------------------------- read

def _find_function(index, name, prefer=()):
    paths = list(prefer) + sorted(p for p in index.sources if p.endswith(".py"))
    for path in paths:
        tree = index.tree(path)
        if tree is None:
            continue
        for st in tree.body:
            if isinstance(st, ast.FunctionDef) and st.name == name:
                return _FuncRef(path, st)
    return None


def _read_version(index):
    tree = index.tree("_version.py")
    if tree is not None:
        for st in tree.body:
            if isinstance(st, ast.Assign) and isinstance(st.value, ast.Constant) and isinstance(
                    st.value.value, str):
                if any(isinstance(t, ast.Name) and t.id in ("__version__", "version") for t in st.targets):
                    return st.value.value
    text = index.sources.get("_version.py") or ""
    m = re.search(r"""__version__\s*=\s*(?:version\s*=\s*)?['"]([^'"]+)['"]""", text)
    return m.group(1) if m else None


def _enum_members(index, path, class_name):
    tree = index.tree(path)
    if tree is None:
        return []
    for st in tree.body:
        if isinstance(st, ast.ClassDef) and st.name == class_name:
            out = []
            for b in st.body:
                if isinstance(b, ast.Assign) and len(b.targets) == 1 and isinstance(b.targets[0], ast.Name):
                    name = b.targets[0].id
                    if not name.startswith("_") and name not in out:
                        out.append(name)
            return out
    return []


def _attention_name_rules(index):
    """(ignore_case, auto_ok) from AttentionConfig's `backend` validator."""
    tree = index.tree(_ATTENTION_CONFIG)
    if tree is None:
        return False, False
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef):
            continue
        for dec in node.decorator_list:
            if isinstance(dec, ast.Call) and _name_of(dec) == "field_validator" and any(
                    isinstance(a, ast.Constant) and a.value == "backend" for a in dec.args):
                calls = {n.func.attr for n in ast.walk(node)
                         if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)}
                consts = {n.value for n in ast.walk(node) if isinstance(n, ast.Constant)}
                return bool(calls & {"upper", "lower", "casefold"}), "auto" in consts
    return False, False


def _module_literal(index, path, name):
    found = index.resolve(path, name) if index.tree(path) is not None else None
    if not found or found[1] != "expr":
        return []
    return [_choice_str(v) for v in _literals_in(_hints(index, found[0], found[2]))]


def _module_list(interp, path, name):
    index = interp.index
    found = index.resolve(path, name) if index.tree(path) is not None else None
    if not found or found[1] != "expr":
        return []
    value = interp.eval(found[2], _Frame(found[0]))
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    return []


def _read_env(interp):
    index = interp.index
    tree = index.tree(_ENVS)
    if tree is None:
        return {}
    table = None
    for st in tree.body:
        target = None
        if isinstance(st, ast.Assign) and len(st.targets) == 1:
            target = st.targets[0]
        elif isinstance(st, ast.AnnAssign):
            target = st.target
        if isinstance(target, ast.Name) and target.id == "environment_variables" and isinstance(
                st.value, ast.Dict):
            table = st.value
    if table is None:
        return {}
    out = {}
    for k, v in zip(table.keys, table.values):
        if not (isinstance(k, ast.Constant) and isinstance(k.value, str)):
            continue
        spec = {"choices": None}
        if isinstance(v, ast.Call) and _name_of(v.func) in _ENV_CHOICE_FUNCS:
            argmap = {}
            for i, name in enumerate(("env_name", "default", "choices", "case_sensitive")):
                if i < len(v.args):
                    argmap[name] = v.args[i]
            for kw in v.keywords:
                if kw.arg:
                    argmap[kw.arg] = kw.value
            choices = None
            cnode = argmap.get("choices")
            if isinstance(cnode, ast.Lambda):
                cnode = cnode.body
            if cnode is not None:
                val = interp.eval(cnode, _Frame(_ENVS))
                if isinstance(val, list) and val and all(isinstance(c, str) for c in val):
                    choices = val
            spec["choices"] = choices
            cs = argmap.get("case_sensitive")
            spec["case_sensitive"] = not (isinstance(cs, ast.Constant) and cs.value is False)
            spec["list"] = _name_of(v.func) != "env_with_choices"
        out[k.value] = spec
    return out


def _read_removed_env(interp):
    """{name: migration hint} from envs.py's removed_environment_variables (setting one is an error)."""
    index = interp.index
    found = index.resolve(_ENVS, "removed_environment_variables") if index.tree(_ENVS) else None
    if not found or found[1] != "expr" or not isinstance(found[2], ast.Dict):
        return {}
    value = interp.eval(found[2], _Frame(_ENVS))
    if not isinstance(value, dict):
        return {}
    return {k: (v if isinstance(v, str) else "") for k, v in value.items() if isinstance(k, str)}


def read(sources):
    """Facts about one vLLM release from its source files ({path under vllm/: text or bytes}).

    Returns a JSON-serialisable dict:

    * version: from _version.py (None when absent).
    * flags: {option string: entry} for every `vllm serve` option, aliases ("-tp") and the `--no-x` forms of
      bool flags included. An entry has `choices` (list of str, or None when any value passes), `takes_value`,
      `nargs` (None: one value, "?"/"*"/"+"/N as argparse, 0: none), `type` (int, float, human_int,
      human_int_or_auto, json, str; None without a value), `dest` and `aliases`; where they apply also
      `normalise` (string operations vLLM applies before matching the choices), `ignore_case`, `none_ok`
      ("" and "None" mean None), `negates` (a --no-x form), `source` (Config.field it comes from) and
      `uncertain` (its argparse keywords could not be read).
    * positionals: ["model_tag"].
    * attention_backends, attention_backend_ignore_case, moe_backends, quantization_methods,
      deprecated_quantization_methods, kv_cache_dtypes: lists of names (empty when not found).
    * env: {name: {"choices": list or None, and for declared choices "case_sensitive" and "list"}}.
    * removed_env: {name: migration hint} (setting one is an error in that release).
    * model_must_be_first: whether the parser refuses --served-model-name before the positional model.
    """
    index = _Index(sources)
    interp = _Interpreter(index)
    parser = _Parser()
    maker = _find_function(index, "make_arg_parser",
                           prefer=[p for p in SOURCE_PATHS if p.startswith("entrypoints/")])
    if maker is not None:
        interp.invoke(maker, [parser], {})
    else:  # no frontend sources: the engine flags alone
        async_args = index.find_class(_ARG_UTILS, "AsyncEngineArgs") if index.tree(_ARG_UTILS) else None
        if async_args is not None:
            func = interp.class_attr(async_args, "add_cli_args", async_args)
            if isinstance(func, _FuncRef):
                interp.invoke(func, [parser], {})
    flags = interp.flags

    backends = _enum_members(index, _REGISTRY, "AttentionBackendEnum")
    ignore_case, auto_ok = _attention_name_rules(index)
    quant = _module_literal(index, _QUANT, "QuantizationMethods")
    deprecated_quant = _module_list(interp, _QUANT, "DEPRECATED_QUANTIZATION_METHODS")

    def entries(dest):
        seen = []
        for e in flags.values():
            if e.get("dest") == dest and not e.get("negates") and all(e is not s for s in seen):
                seen.append(e)
        return seen

    for e in entries("attention_backend"):
        if backends:
            e["choices"] = list(backends) + (["auto"] if auto_ok else [])
            e["ignore_case"] = ignore_case
    kv_dtypes = []
    for e in entries("kv_cache_dtype"):
        kv_dtypes = e.get("_literals") or e.get("choices") or []
        if kv_dtypes:
            e["choices"] = list(kv_dtypes)
    for e in entries("quantization"):
        if quant:
            e["choices"] = list(quant)
    moe = []
    for e in entries("moe_backend"):
        moe = list(e.get("choices") or e.get("_literals") or [])
    for e in flags.values():
        e.pop("_literals", None)

    text = index.sources.get(_ARGPARSE_UTILS, "")
    facts = {
        "version": _read_version(index),
        "flags": {name: flags[name] for name in sorted(flags)},
        "positionals": list(interp.positionals),
        "attention_backends": backends,
        "attention_backend_ignore_case": ignore_case,
        "moe_backends": moe,
        "quantization_methods": quant,
        "deprecated_quantization_methods": deprecated_quant,
        "kv_cache_dtypes": list(kv_dtypes),
        "env": _read_env(interp),
        "removed_env": _read_removed_env(interp),
        "model_must_be_first": "first positional argument" in text,
    }
    return json.loads(json.dumps(facts))


# ------------------------------------------------------------------------------------------ check

def _release(caps):
    return "vLLM %s" % (caps.get("version") or "(unknown release)")


def _closest(value, candidates, n=3, ignore_case=False):
    """difflib's closest candidates; case is ignored when asked or when an exact-case pass finds none."""
    if not ignore_case:
        hits = difflib.get_close_matches(value, list(candidates), n=n, cutoff=0.5)
        if hits:
            return hits
    lowered = {}
    for c in candidates:
        lowered.setdefault(c.lower(), c)
    hits = difflib.get_close_matches(value.lower(), list(lowered), n=n, cutoff=0.5)
    return [lowered[h] for h in hits]


def _closest_text(value, candidates, ignore_case=False):
    hits = _closest(value, candidates, ignore_case=ignore_case)
    return ", ".join(hits) if hits else "none close"


def _normalise_flag(arg):
    """vLLM's FlexibleArgumentParser: underscores -> dashes in the name, up to the first '.'."""
    if not arg.startswith("--"):
        return arg
    body = arg[2:]
    head, dot, tail = body.partition(".")
    return "--" + head.replace("_", "-") + dot + tail


def _looks_like_option(arg):
    """argparse's view: an option string, not a value (negative numbers and spaced strings are values)."""
    return arg.startswith("-") and arg != "-" and not _NEG_NUMBER.match(arg) and " " not in arg


def _value_ok(entry, value):
    """None if argparse (and vLLM's later validation) accepts `value` for this flag, else why not."""
    if entry.get("none_ok") and value in ("", "None"):
        return None
    vt = entry.get("type")
    v = value
    if vt == "int":
        try:
            v = str(int(value))
        except ValueError:
            return "is not an integer"
    elif vt == "float":
        try:
            float(value)
        except ValueError:
            return "is not a number"
    elif vt in ("human_int", "human_int_or_auto"):
        ok = bool(_HUMAN_INT.match(value))
        if vt == "human_int_or_auto" and value.strip().lower() in ("auto", "-1"):
            ok = True
        if not ok:
            try:
                int(value)
                ok = True
            except ValueError:
                ok = False
        if not ok:
            return "is not an integer (or a k/M/G-suffixed one)"
    choices = entry.get("choices")
    if choices:
        v = _apply_ops(v, entry.get("normalise"))
        if entry.get("ignore_case"):
            if v.lower() not in {c.lower() for c in choices}:
                return "choice"
        elif v not in choices:
            return "choice"
    return None


def check(argv, env, caps, allowed_env=()):
    """Problems (strings) that the release described by `caps` would have with this serve call."""
    problems = []
    release = _release(caps)
    flags = caps.get("flags") or {}
    args = [str(a) for a in (argv or [])]
    if args and (args[0] == "vllm" or args[0].endswith("/vllm")):
        args = args[1:]
    if args and args[0] == "serve":
        args = args[1:]
    if not flags:
        problems.append("no `vllm serve` flags were read for %s; cannot judge the command line" % release)
    else:
        problems.extend(_check_argv(args, flags, caps, release))
        for flag, key in (("--attention-backend", "attention_backends"), ("--moe-backend", "moe_backends"),
                          ("--quantization", "quantization_methods"), ("--kv-cache-dtype", "kv_cache_dtypes")):
            given = any(a == flag or a.startswith(flag + "=") or a.replace("_", "-") == flag for a in args)
            if given and not caps.get(key):
                problems.append("%s is set, but no list of its valid values was read from vLLM %s (the file that "
                                "declares them moved); cannot judge it" % (flag, release))
    problems.extend(_check_env(env or {}, caps, allowed_env, release))
    return problems


def _resolve_flag(name, flags):
    """(entry, canonical name, problem) with argparse's exact match, then unique-prefix abbreviation."""
    if name in flags:
        return flags[name], name, None
    if name.startswith("--"):
        matches = sorted(f for f in flags if f.startswith(name))
        if len(matches) == 1:
            return flags[matches[0]], matches[0], None
        if len(matches) > 1:
            return None, name, "ambiguous"
    return None, name, "unknown"


def _check_argv(args, flags, caps, release):
    problems = []
    long_flags = sorted(f for f in flags if f.startswith("--") and not f.startswith("--no-"))
    positionals = []
    i = 0
    only_positional = False
    has_opt_level = "--optimization-level" in flags
    while i < len(args):
        tok = args[i]
        i += 1
        if only_positional or not _looks_like_option(tok):
            positionals.append(tok)
            continue
        if tok == "--":
            only_positional = True
            continue
        if has_opt_level and tok.startswith("-O") and tok != "-O":
            tok = "--optimization-level=" + (tok[3:] if tok[2:3] == "=" else tok[2:])
        elif has_opt_level and tok == "-O" and i < len(args) and args[i] in ("0", "1", "2", "3"):
            tok = "--optimization-level"
        name, eq, value = tok.partition("=")
        explicit = value if eq else None
        name = _normalise_flag(name)
        if "." in name:  # --json-arg.key value: vLLM merges it into --json-arg '{"key": value}'
            base = name.split(".", 1)[0]
            entry, canon, why = _resolve_flag(base, flags)
            if entry is None:
                problems.append("%s is not a flag of %s serve (in %s); closest: %s" % (
                    base, release, name, _closest_text(base, long_flags)))
            if explicit is None:
                if i >= len(args):
                    problems.append("%s expects a value in %s but none was given" % (name, release))
                i += 1
            continue
        entry, canon, why = _resolve_flag(name, flags)
        if entry is None:
            if why == "ambiguous":
                options = sorted(f for f in flags if f.startswith(name))
                problems.append("%s is an ambiguous abbreviation in %s; it could be %s" % (
                    name, release, ", ".join(options)))
            else:
                problems.append("%s is not a flag of %s serve; closest: %s" % (
                    name, release, _closest_text(name, long_flags)))
            if explicit is None and i < len(args) and not _looks_like_option(args[i]):
                i += 1  # its value, most likely; do not count it as a positional
            continue
        shown = name if name == canon else "%s (%s)" % (name, canon)
        if not entry.get("takes_value"):
            if explicit is not None:
                problems.append("%s takes no value in %s, but was given %r" % (shown, release, explicit))
            continue
        nargs = entry.get("nargs")
        values = []
        if explicit is not None:
            values = [explicit]
        elif isinstance(nargs, int) and nargs > 1:
            while i < len(args) and len(values) < nargs and not _looks_like_option(args[i]):
                values.append(args[i])
                i += 1
            if len(values) < nargs:
                problems.append("%s expects %d values in %s but got %d" % (shown, nargs, release, len(values)))
                continue
        elif nargs in ("+", "*"):
            while i < len(args) and not _looks_like_option(args[i]):
                values.append(args[i])
                i += 1
        elif i < len(args) and not _looks_like_option(args[i]):
            values = [args[i]]
            i += 1
        if not values and nargs not in ("?", "*") and not entry.get("uncertain"):
            problems.append("%s expects a value in %s but none was given" % (shown, release))
            continue
        if entry.get("dest") == "model" and values and caps.get("model_must_be_first"):
            positionals.append(values[0])  # FlexibleArgumentParser moves `--model X` to the positional slot
        for v in values:
            why = _value_ok(entry, v)
            if why is None:
                continue
            if why == "choice":
                choices = entry.get("choices") or []
                problems.append("%s %s is not a choice of %s; closest: %s (all: %s)" % (
                    shown, v, release, _closest_text(_apply_ops(v, entry.get("normalise")), choices,
                                                     entry.get("ignore_case")), ", ".join(choices)))
            else:
                problems.append("%s %s %s in %s" % (shown, v, why, release))
        if entry.get("dest") == "quantization" and values:
            deprecated = caps.get("deprecated_quantization_methods") or []
            if values[-1] in deprecated and "allow_deprecated_quantization" not in _dests(args, flags):
                problems.append("--quantization %s is deprecated in %s and needs "
                                "--allow-deprecated-quantization" % (values[-1], release))
    allowed_positionals = len(caps.get("positionals") or ["model_tag"])
    if len(positionals) > allowed_positionals:
        problems.append("%s serve takes %d positional argument(s) (the model); unrecognised: %s" % (
            release, allowed_positionals, " ".join(positionals[allowed_positionals:])))
    if caps.get("model_must_be_first") and args and args[0].startswith("-"):
        names = [_normalise_flag(a.split("=", 1)[0]) for a in args if a.startswith("--")]
        if "--served-model-name" in names and "--config" not in names and "--model" not in names:
            problems.append("%s needs the model as the first argument after `serve` when "
                            "--served-model-name is given" % release)
    return problems


def _dests(args, flags):
    out = set()
    for a in args:
        if a.startswith("-"):
            entry = _resolve_flag(_normalise_flag(a.split("=", 1)[0]), flags)[0]
            if entry is not None and not entry.get("negates"):
                out.add(entry.get("dest"))
    return out


def _check_env(env, caps, allowed_env, release):
    problems = []
    known = caps.get("env") or {}
    removed = caps.get("removed_env") or {}
    allowed = set(allowed_env or ())
    for name in sorted(env):
        if not str(name).startswith("VLLM_"):
            continue
        value = env[name]
        value = "" if value is None else (("1" if value else "0") if isinstance(value, bool) else str(value))
        if name in removed:
            problems.append("%s has been removed in %s (setting it is an error): %s" % (
                name, release, removed[name] or "no hint given"))
            continue
        if name not in known:
            if name in allowed:
                continue
            if not known:
                problems.append("%s: no environment variables were read for %s; cannot judge it" % (
                    name, release))
                continue
            problems.append("%s is not an environment variable of %s; closest: %s" % (
                name, release, _closest_text(name, sorted(known))))
            continue
        spec = known[name] or {}
        choices = spec.get("choices")
        if not choices:
            continue
        case_sensitive = spec.get("case_sensitive", True)
        items = [v.strip() for v in value.split(",") if v.strip()] if spec.get("list") else [value]
        pool = set(choices) if case_sensitive else {c.lower() for c in choices}
        for item in items:
            probe = item if case_sensitive else item.lower()
            if probe not in pool:
                problems.append("%s=%s is not a choice of %s; closest: %s (all: %s)" % (
                    name, item, release, _closest_text(item, choices, not case_sensitive),
                    ", ".join(choices)))
    return problems
