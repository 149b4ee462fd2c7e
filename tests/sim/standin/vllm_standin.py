"""TEST DOUBLE for `vllm serve`: stands in for GPU inference on the simulated Spark cluster.

It is not vLLM and nothing the collection ships depends on it. What it does for real:
  * is as strict as the vLLM release in its image: it builds `vllm serve`'s parser from that release's own
    source files (read, never imported: see VllmSource) and refuses what the release refuses, the way it
    refuses it: an unknown flag or a value outside a flag's choices ends with argparse's
    `vllm serve: error: ...` and exit code 2; a value that the release's config validators reject (an
    attention backend missing from its registry, a KV cache dtype it does not know, a quantization method it
    does not have), an unknown VLLM_* variable under --fail-on-environ-validation, or a VLLM_* value outside
    its declared choices ends the start with the release's own message and exit code 1;
  * requires a GPU as vLLM does, through NVML (libnvidia-ml.so.1): without one, the API server and every Ray
    worker fail as the release fails when it detects no platform;
  * joins the Ray cluster, reserves one {GPU: 1} bundle per TP x PP rank in a placement group, and places
    one long-lived worker actor per bundle, as vLLM's Ray executor does;
  * on each bundle's node, opens and reads every shard that the index lists (the default loader makes
    every rank read every shard); a missing or corrupt shard fails the load as vLLM's would;
  * prints vLLM-shaped startup log lines for the vLLM version found in the image;
  * serves /health, /v1/models, /v1/completions, /v1/chat/completions and /metrics, with canned,
    coherent answers to known probe prompts.

Like real inference on GB10, its answers and its kernel log lines depend on the vLLM source files in the
image (the files the collection's patches rewrite). That is EMULATION, in gb10.py: it reads the structure of
the release's files (which branch runs on CUDA, which dict maps a requested backend, which loader splits a
fused tensor), never the names of the collection's patch functions, and gives the outcome the field saw:
a MiMo checkpoint answers seed 004's garbage until the MXFP8 dispatch, the scale name and the qkv split are
right ("あるい", then "ייך", then "*\0"), or fails to load where the release's qkv loader refuses the plain
layout; a Kimi checkpoint bound to the Marlin WNA16 MoE kernel answers "foss foss foss" (seed 000); a
release that refuses --moe-backend triton for WNA16 MoE fails its start with the release's message. Tests
that rely on the emulation say so in their names or docstrings.

MISBEHAVIOUR is set only by these switches, in SPARKFLEET_SIM_FAULT (comma separated), which tests turn on
through the serve container's environment:
  degenerate       completions collapse into "foss foss foss ..."
  script_soup      completions are a soup of scripts ("あるい ייך ...")
  wrong_backend    the MoE backend in the logs (and in use) is another than the release would bind
  crash_on_load    the last rank dies while loading weights
  slow_load=S      every rank spends S seconds more loading its shards, S/n before each of n shards
"""

from __future__ import annotations

import argparse
import ast
import builtins
import collections
import collections.abc
import copy
import ctypes
import dataclasses
import enum
import functools
import hashlib
import importlib.util
import itertools
import json
import math
import operator
import os
import re
import ssl
import string
import sys
import textwrap
import threading
import time
import types
import typing
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import metadata
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gb10  # the GB10 emulation, beside this file

PID = os.getpid()


def vllm_version() -> str:
    try:
        return metadata.version("vllm")
    except metadata.PackageNotFoundError:
        return os.environ.get("SPARKFLEET_SIM_VLLM_VERSION", "0.21.0")


VERSION = vllm_version()
VTUPLE = tuple(int(x) for x in re.findall(r"\d+", VERSION)[:2])


def log(msg: str, proc: str = "APIServer", level: str = "INFO", where: str = "api_server.py:1") -> None:
    stamp = datetime.now().strftime("%m-%d %H:%M:%S")
    print(f"({proc} pid={PID}) {level} {stamp} [{where}] {msg}", flush=True)


def uvicorn(msg: str) -> None:
    print(f"INFO:     {msg}", flush=True)


def faults() -> dict[str, str]:
    out = {}
    for item in filter(None, (x.strip() for x in os.environ.get("SPARKFLEET_SIM_FAULT", "").split(","))):
        key, _unused, val = item.partition("=")
        out[key] = val
    return out


# ------------------------------------------------------------- the release's own rules, read from its source
# vLLM builds `vllm serve`'s parser from its config dataclasses (EngineArgs.add_cli_args -> get_kwargs(Config)
# -> one --kebab-case flag per field, typed by the field's annotation) and validates values while it builds its
# engine config (pydantic field validators, DeviceConfig, envs.py). The reader below does the same from the
# source files of the vllm package in this image, without importing vllm (its imports need torch and CUDA):
# it walks the syntax trees of those files with a small interpreter for the subset of Python they use. What it
# cannot know from the source alone (an import from outside the image, a runtime value) is UNKNOWN, and an
# UNKNOWN never rejects anything. It holds no list of valid names of its own.


class _Unknown:
    """A value the reader cannot know from the image's source alone."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<unknown>"


UNKNOWN = _Unknown()
_MISSING = object()
_NONE_ATOM = ("none",)
_ELLIPSIS = ("ellipsis",)


class _Return(BaseException):
    def __init__(self, value) -> None:
        self.value = value


class _Break(BaseException):
    pass


class _Continue(BaseException):
    pass


class _Opaque(Exception):
    """The release raises something here that the reader cannot construct."""


def release_raised(exc: BaseException) -> bool:
    """Whether `exc` comes from a `raise` statement of the release's own source (not from the reader)."""
    return bool(getattr(exc, "_vllm_raised", False))


class _Logger:
    """vllm.logger.init_logger(name), printing in vLLM's format (DEBUG stays quiet, as by default)."""

    def __init__(self, reader: VllmSource, name: str) -> None:
        self.reader, self.name = reader, name

    def _emit(self, level: str, msg, *args) -> None:
        try:
            text = str(msg) % args if args else str(msg)
        except (TypeError, ValueError):
            text = " ".join(str(a) for a in (msg, *args))
        where = f"{self.name.rsplit('.', 1)[-1]}.py:{self.reader.interp.line}"
        log(text, self.reader.proc, level, where)

    def debug(self, *a, **k) -> None:
        pass

    debug_once = debug

    def info(self, msg, *args, **k) -> None:
        self._emit("INFO", msg, *args)

    info_once = info

    def warning(self, msg, *args, **k) -> None:
        self._emit("WARNING", msg, *args)

    warning_once = warn = warning

    def error(self, msg, *args, **k) -> None:
        self._emit("ERROR", msg, *args)

    exception = error


class _Platform:
    """vllm.platforms.current_platform: what vLLM detects through NVML (device_type "" when no GPU)."""

    def __init__(self) -> None:
        self.device_type = "cuda"
        self.device_name = "cuda"


class _SysView:
    def __init__(self, argv: list[str]) -> None:
        self.argv = ["vllm", *argv]
        self.version_info = sys.version_info
        self.modules: dict = {}


class _OsView:
    """The read-only part of `os` that vLLM's env and config code reads."""

    def __init__(self) -> None:
        self.environ = dict(os.environ)
        self.path = os.path
        self.sep = os.sep

    def getenv(self, key, default=None):
        return self.environ.get(key, default)


def _hook(fn):
    """Mark a callable of the reader's own as one that the interpreter may hand unknown values to."""

    def hooked(*args, **kwargs):
        return fn(*args, **kwargs)

    hooked._reader_hook = True
    return hooked


class _ModuleRef:
    def __init__(self, module: _Module) -> None:
        self.module = module

    def __repr__(self) -> str:
        return f"<module {self.module.name}>"


class _Module:
    """One source file of the image's vllm package (or a package directory whose __init__.py is absent)."""

    def __init__(self, reader: VllmSource, name: str, path: Path | None, is_pkg: bool) -> None:
        self.reader, self.name, self.path, self.is_pkg = reader, name, path, is_pkg
        self.tree = ast.Module(body=[], type_ignores=[])
        if path is not None:
            try:
                self.tree = ast.parse(path.read_text(), str(path))
            except (SyntaxError, UnicodeDecodeError) as exc:  # newer syntax than this Python: unknown
                reader.notes.append(f"{path}: {exc}")
        self.values: dict[str, object] = {}
        self.frame = _Frame({}, None, self)
        self._starring = False

    def find(self, name: str):
        """The first statement of the module that binds `name` (searching if/else and try blocks too)."""

        def search(body):
            for st in body:
                if isinstance(st, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and st.name == name:
                    return st, None
                if isinstance(st, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in st.targets):
                    return st, None
                if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) and st.target.id == name \
                        and st.value is not None:
                    return st, None
                if isinstance(st, (ast.Import, ast.ImportFrom)):
                    for alias in st.names:
                        bound = alias.asname or (alias.name.split(".")[0] if isinstance(st, ast.Import) else alias.name)
                        if bound == name:
                            return st, alias
                blocks = []
                if isinstance(st, ast.If):
                    blocks = [st.body, st.orelse]
                elif isinstance(st, ast.Try):
                    blocks = [st.body, *(h.body for h in st.handlers), st.orelse, st.finalbody]
                for block in blocks:
                    found = search(block)
                    if found:
                        return found
            return None

        return search(self.tree.body)

    def binding(self, name: str):
        """Follow `name` to what binds it: ("node", stmt, module), ("native", obj), ("module", _Module) or None."""
        hook = self.reader.hook(self.name, name)
        if hook is not _MISSING:
            return ("native", hook)
        if name == "__name__":
            return ("native", self.name)
        found = self.find(name)
        if found is None:
            if self.is_pkg:
                sub = self.reader.module(f"{self.name}.{name}")
                if sub is not None:
                    return ("module", sub)
            return self.star_binding(name)
        st, alias = found
        if isinstance(st, ast.Import):
            target = alias.name if alias.asname else alias.name.split(".")[0]
            return self.reader.import_module(target)
        if isinstance(st, ast.ImportFrom):
            return self.reader.import_from(self.resolve_relative(st), alias.name)
        return ("node", st, self)

    def star_binding(self, name: str):
        """`name` from a `from .x import *` of this module (the release's packages re-export that way)."""
        if self._starring:
            return None
        self._starring = True
        try:
            for st in self.tree.body:
                if isinstance(st, ast.ImportFrom) and any(a.name == "*" for a in st.names):
                    target = self.reader.module(self.resolve_relative(st))
                    found = target.binding(name) if target is not None else None
                    if found is not None:
                        return found
        finally:
            self._starring = False
        return None

    def resolve_relative(self, st: ast.ImportFrom) -> str:
        if not st.level:
            return st.module or ""
        parts = self.name.split(".")
        if not self.is_pkg:
            parts = parts[:-1]
        parts = parts[: len(parts) - (st.level - 1)]
        return ".".join(parts + ([st.module] if st.module else []))

    def lookup(self, name: str, default=UNKNOWN):
        if name in self.values:
            return self.values[name]
        self.values[name] = UNKNOWN  # a cycle reads as unknown
        value = self.reader.value_of(self.binding(name), name, default)
        self.values[name] = value
        return value


class _Frame:
    __slots__ = ("module", "owner", "parent", "self_arg", "vars")

    def __init__(self, vars_: dict, parent: _Frame | None, module: _Module, owner=None, self_arg=_MISSING) -> None:
        self.vars, self.parent, self.module, self.owner, self.self_arg = vars_, parent, module, owner, self_arg

    def lookup(self, name: str):
        f = self
        while f is not None:
            if name in f.vars:
                return f.vars[name]
            f = f.parent
        return self.module.lookup(name)

    def context(self):
        f = self
        while f is not None:
            if f.owner is not None:
                return f.owner, f.self_arg
            f = f.parent
        return None, _MISSING


class _Function:
    """A def or lambda of the release, run by the reader's interpreter (callable, e.g. as an argparse type)."""

    def __init__(self, reader: VllmSource, module: _Module, node, closure: _Frame | None, owner=None,
                 bound=_MISSING) -> None:
        self.reader, self.module, self.node, self.closure, self.owner, self.bound = (
            reader, module, node, closure, owner, bound)
        self.__name__ = "<lambda>" if isinstance(node, ast.Lambda) else node.name
        self.__qualname__ = self.__name__

    def __repr__(self) -> str:
        return f"<function {self.__name__}>"

    def bind(self, first) -> _Function:
        return _Function(self.reader, self.module, self.node, self.closure, self.owner, first)

    def decorators(self) -> set[str]:
        return _decorator_names(self.node)

    def __call__(self, *args, **kwargs):
        return self.reader.interp.call_function(self, args, kwargs)


def _decorator_names(node) -> set[str]:
    names = set()
    for deco in getattr(node, "decorator_list", []):
        d = deco.func if isinstance(deco, ast.Call) else deco
        if isinstance(d, ast.Name):
            names.add(d.id)
        elif isinstance(d, ast.Attribute):
            names.add(d.attr)
    return names


class _Instance:
    def __init__(self, cls: _Class, attrs: dict | None = None) -> None:
        self.cls, self.attrs = cls, dict(attrs or {})

    def __repr__(self) -> str:
        return f"<{self.cls.name} instance>"


class _ArgsView:
    """`self` of a config class, as far as the parsed command line tells (the rest is unknown)."""

    def __init__(self, cls: _Class, values: dict) -> None:
        self.cls, self.values = cls, values


class _EnumMember:
    def __init__(self, cls: _Class, name: str) -> None:
        self.cls, self.name = cls, name

    def __repr__(self) -> str:
        return f"<{self.cls.name}.{self.name}>"


class _Super:
    def __init__(self, owner: _Class, first) -> None:
        self.owner, self.first = owner, first


class _Class:
    """A class of the release (a config dataclass, an enum, the CLI's frontend args...)."""

    def __init__(self, reader: VllmSource, module: _Module, node: ast.ClassDef) -> None:
        self.reader, self.module, self.node, self.name = reader, module, node, node.name
        self._bases = None

    def __repr__(self) -> str:
        return f"<class {self.name}>"

    def __eq__(self, other) -> bool:
        return isinstance(other, _Class) and other.node is self.node

    def __hash__(self) -> int:
        return id(self.node)

    def bases(self) -> list:
        if self._bases is None:
            self._bases = [self.reader.interp.eval(b, self.module.frame) for b in self.node.bases]
        return self._bases

    def mro(self) -> list:
        out: list = []

        def walk(c) -> None:
            if c in out:
                return
            out.append(c)
            if isinstance(c, _Class):
                for b in c.bases():
                    walk(b)

        walk(self)
        return out

    def own(self, name: str):
        for st in self.node.body:
            if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)) and st.name == name:
                return st
            if isinstance(st, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in st.targets):
                return st
            if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) and st.target.id == name:
                return st
        return None

    def is_dataclass(self) -> bool:
        return bool(_decorator_names(self.node) & {"dataclass", "config"})

    def is_enum(self) -> bool:
        for c in self.mro()[1:]:
            if isinstance(c, type) and issubclass(c, enum.Enum):
                return True
            if isinstance(c, _Class) and c.is_enum():
                return True
        return False

    def is_dict_subclass(self) -> bool:
        return any(isinstance(b, type) and issubclass(b, dict) for b in self.bases()) or any(
            isinstance(b, ast.Subscript) and isinstance(b.value, ast.Name) and b.value.id == "dict"
            for b in self.node.bases)

    def metaclass(self):
        for kw in self.node.keywords:
            if kw.arg == "metaclass":
                return self.reader.interp.eval(kw.value, self.module.frame)
        return None

    def members(self) -> dict:
        out = {}
        for st in self.node.body:
            if isinstance(st, ast.Assign):
                for t in st.targets:
                    if isinstance(t, ast.Name) and not t.id.startswith("_"):
                        out[t.id] = _EnumMember(self, t.id)
        return out

    def fields(self) -> dict:
        """The dataclass fields, bases first, as dataclasses.fields() orders them: name -> (stmt, class)."""
        out: dict = {}
        for c in reversed(self.mro()):
            if not isinstance(c, _Class):
                continue
            for st in c.node.body:
                if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name):
                    ann = ast.unparse(st.annotation)
                    if ann.startswith(("ClassVar", "typing.ClassVar", "InitVar", "KW_ONLY")):
                        continue
                    out[st.target.id] = (st, c)
        return out

    def field_default(self, name: str):
        st, c = self.fields()[name]
        return c.default_of(st)

    def default_of(self, st):
        interp, frame = self.reader.interp, self.module.frame
        value = st.value
        if value is None:
            return None
        if isinstance(value, ast.Call):
            callee = value.func.attr if isinstance(value.func, ast.Attribute) else getattr(value.func, "id", "")
            if callee in ("field", "Field"):
                for kw in value.keywords:
                    if kw.arg == "default":
                        return interp.eval(kw.value, frame)
                    if kw.arg == "default_factory":
                        factory = interp.eval(kw.value, frame)
                        return interp.call(factory, [], {}) if callable(factory) else UNKNOWN
                return None if callee == "field" else UNKNOWN
        return interp.eval(value, frame)

    def attr(self, name: str, instance=_MISSING, start_after=None):
        if name == "__name__":
            return self.name
        if name == "__doc__":
            return ast.get_docstring(self.node)
        if name == "__members__" and self.is_enum():
            return self.members()
        mro = self.mro()
        if start_after is not None and start_after in mro:
            mro = mro[mro.index(start_after) + 1:]
        for c in mro:
            if isinstance(c, type):
                return getattr(c, name, UNKNOWN)
            if not isinstance(c, _Class):
                return UNKNOWN
            st = c.own(name)
            if st is None:
                continue
            if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)):
                fn = _Function(self.reader, c.module, st, c.module.frame, owner=c)
                decos = fn.decorators()
                if "staticmethod" in decos:
                    return fn
                if decos & {"classmethod", "field_validator", "model_validator", "validator"}:
                    first = instance.cls if isinstance(instance, _Instance) else (
                        instance if isinstance(instance, _Class) else self)
                    return fn.bind(first)
                if "property" in decos and instance is not _MISSING:
                    return fn.bind(instance)()
                return fn.bind(instance) if instance is not _MISSING else fn
            if c.is_enum() and isinstance(st, ast.Assign):
                return _EnumMember(c, name)
            return c.default_of(st)
        return UNKNOWN

    def field_validators(self, field: str) -> list[tuple[str, _Function]]:
        """pydantic @field_validator(field, mode=...) methods of the class (and its bases), as (mode, fn)."""
        out = []
        for c in self.mro():
            if not isinstance(c, _Class):
                continue
            for st in c.node.body:
                if not isinstance(st, ast.FunctionDef):
                    continue
                for d in st.decorator_list:
                    if not (isinstance(d, ast.Call) and getattr(d.func, "id", getattr(d.func, "attr", "")) ==
                            "field_validator"):
                        continue
                    names = [a.value for a in d.args if isinstance(a, ast.Constant)]
                    mode = next((kw.value.value for kw in d.keywords if kw.arg == "mode"
                                 and isinstance(kw.value, ast.Constant)), "after")
                    if field in names or "*" in names:
                        out.append((mode, self.attr(st.name)))
        return out


_SAFE_BUILTINS = {name: getattr(builtins, name) for name in (
    "abs", "all", "any", "bool", "callable", "dict", "isinstance", "issubclass", "getattr", "hasattr",
    "enumerate", "filter", "float", "frozenset", "int", "iter", "len", "list", "map", "max", "min", "next",
    "object", "range", "repr", "reversed", "round", "set", "sorted", "str", "sum", "tuple", "zip", "slice",
    "bytes", "Ellipsis", "NotImplemented", "BaseException", "Exception", "ValueError", "TypeError", "KeyError",
    "RuntimeError", "NotImplementedError", "AssertionError", "AttributeError", "IndexError", "ImportError",
    "ModuleNotFoundError", "OSError", "FileNotFoundError", "LookupError", "StopIteration", "ZeroDivisionError",
    "ArithmeticError", "UserWarning", "DeprecationWarning", "Warning", "FutureWarning")}
_NATIVE_MODULES = {"argparse": argparse, "json": json, "re": re, "regex": re, "itertools": itertools,
                   "functools": functools, "typing": typing, "typing_extensions": typing, "copy": copy,
                   "collections": collections, "collections.abc": collections.abc, "dataclasses": dataclasses,
                   "enum": enum, "textwrap": textwrap, "string": string, "math": math, "ssl": ssl,
                   "operator": operator}
_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
           ast.BitOr: operator.or_, ast.BitAnd: operator.and_, ast.BitXor: operator.xor,
           ast.LShift: operator.lshift, ast.RShift: operator.rshift}
_CMPOPS = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
           ast.Gt: operator.gt, ast.GtE: operator.ge}
_READER_TYPES = (_Class, _Instance, _ModuleRef, _ArgsView, _EnumMember, _Super, _Unknown)


class _Interp:
    """Runs the subset of Python that vLLM's CLI and config code is written in, over its syntax trees."""

    def __init__(self, reader: VllmSource) -> None:
        self.reader = reader
        self.line = 0
        self.lenient = False  # building the parser: a statement that fails is skipped, and noted
        self.handling: list[BaseException] = []

    # ---------------------------------------------------------------------------------------- statements
    def run_block(self, body: list, frame: _Frame) -> None:
        for st in body:
            self.line = getattr(st, "lineno", self.line)
            if not self.lenient:
                self.run_stmt(st, frame)
                continue
            try:
                self.run_stmt(st, frame)
            except (_Return, _Break, _Continue):
                raise
            except Exception as exc:  # noqa: BLE001 (a statement the reader cannot follow is skipped)
                self.reader.notes.append(f"{frame.module.name}:{self.line}: {type(exc).__name__}: {exc}")

    def run_stmt(self, st, frame: _Frame) -> None:
        if isinstance(st, ast.Expr):
            self.eval(st.value, frame)
        elif isinstance(st, ast.Assign):
            value = self.eval(st.value, frame)
            for target in st.targets:
                self.assign(target, value, frame)
        elif isinstance(st, ast.AnnAssign):
            if st.value is not None:
                self.assign(st.target, self.eval(st.value, frame), frame)
        elif isinstance(st, ast.AugAssign):
            current = self.eval(st.target, frame)
            value = self.eval(st.value, frame)
            op = getattr(operator, "i" + _BINOPS[type(st.op)].__name__.rstrip("_"), None)
            result = UNKNOWN if UNKNOWN in (current, value) or op is None else op(current, value)
            self.assign(st.target, result, frame)
        elif isinstance(st, ast.Delete):
            for target in st.targets:
                if isinstance(target, ast.Subscript):
                    obj = self.eval(target.value, frame)
                    key = self.eval(target.slice, frame)
                    if isinstance(obj, (dict, list)) and key is not UNKNOWN:
                        del obj[key]
        elif isinstance(st, ast.If):
            test = self.truth(self.eval(st.test, frame))
            if test is not UNKNOWN:
                self.run_block(st.body if test else st.orelse, frame)
        elif isinstance(st, ast.For):
            self.run_for(st, frame)
        elif isinstance(st, ast.Return):
            raise _Return(self.eval(st.value, frame) if st.value is not None else None)
        elif isinstance(st, ast.Raise):
            self.run_raise(st, frame)
        elif isinstance(st, ast.Try):
            self.run_try(st, frame)
        elif isinstance(st, (ast.With, ast.AsyncWith)):
            self.run_block(st.body, frame)
        elif isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)):
            frame.vars[st.name] = _Function(self.reader, frame.module, st, frame, owner=frame.context()[0])
        elif isinstance(st, (ast.Import, ast.ImportFrom)):
            for alias in st.names:
                if isinstance(st, ast.Import):
                    bound = alias.asname or alias.name.split(".")[0]
                    b = self.reader.import_module(alias.name if alias.asname else alias.name.split(".")[0])
                else:
                    bound = alias.asname or alias.name
                    b = self.reader.import_from(frame.module.resolve_relative(st), alias.name)
                frame.vars[bound] = self.reader.value_of(b, bound)
        elif isinstance(st, ast.Break):
            raise _Break
        elif isinstance(st, ast.Continue):
            raise _Continue
        # pass, assert, global, nonlocal, while, class definitions inside functions: nothing to follow

    def run_for(self, st: ast.For, frame: _Frame) -> None:
        items = self.eval(st.iter, frame)
        if items is UNKNOWN:
            return
        for item in list(items):
            self.assign(st.target, item, frame)
            try:
                self.run_block(st.body, frame)
            except _Break:
                return
            except _Continue:
                continue
        self.run_block(st.orelse, frame)

    def run_raise(self, st: ast.Raise, frame: _Frame) -> None:
        if st.exc is None:
            if self.handling:
                raise self.handling[-1]
            raise _Opaque("bare raise")
        exc = self.eval(st.exc, frame)
        if isinstance(exc, type) and issubclass(exc, BaseException):
            exc = exc()
        if not isinstance(exc, BaseException):
            raise _Opaque(ast.unparse(st.exc))
        exc._vllm_raised = True
        exc._vllm_where = f"{frame.module.name}:{getattr(st, 'lineno', 0)}"
        raise exc

    def run_try(self, st: ast.Try, frame: _Frame) -> None:
        try:
            try:
                self.run_block(st.body, frame)
            except (_Return, _Break, _Continue):
                raise
            except Exception as exc:
                for handler in st.handlers:
                    if handler.type is not None:
                        kind = self.eval(handler.type, frame)
                        kinds = kind if isinstance(kind, tuple) else (kind,)
                        if not all(isinstance(k, type) and issubclass(k, BaseException) for k in kinds):
                            continue
                        if not isinstance(exc, kinds):
                            continue
                    if handler.name:
                        frame.vars[handler.name] = exc
                    self.handling.append(exc)
                    try:
                        self.run_block(handler.body, frame)
                    finally:
                        self.handling.pop()
                    return
                raise
            self.run_block(st.orelse, frame)
        finally:
            self.run_block(st.finalbody, frame)

    def assign(self, target, value, frame: _Frame) -> None:
        if isinstance(target, ast.Name):
            frame.vars[target.id] = value
        elif isinstance(target, ast.Subscript):
            obj = self.eval(target.value, frame)
            key = self.eval(target.slice, frame)
            if isinstance(obj, (dict, list)) and key is not UNKNOWN:
                obj[key] = value
        elif isinstance(target, ast.Attribute):
            obj = self.eval(target.value, frame)
            if isinstance(obj, _Instance):
                obj.attrs[target.attr] = value
            elif isinstance(obj, _ArgsView):
                obj.values[target.attr] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            items = [UNKNOWN] * len(target.elts) if value is UNKNOWN else list(value)
            for t, v in zip(target.elts, items):
                self.assign(t, v, frame)

    # --------------------------------------------------------------------------------------- expressions
    def truth(self, value):
        if value is UNKNOWN:
            return UNKNOWN
        return bool(value)

    def eval(self, node, frame: _Frame):
        method = getattr(self, "eval_" + type(node).__name__.lower(), None)
        return UNKNOWN if method is None else method(node, frame)

    def eval_constant(self, node, frame):
        return node.value

    def eval_name(self, node, frame):
        return frame.lookup(node.id)

    def eval_attribute(self, node, frame):
        return self.get_attr(self.eval(node.value, frame), node.attr)

    def eval_subscript(self, node, frame):
        return self.get_item(self.eval(node.value, frame), self.eval(node.slice, frame))

    def eval_slice(self, node, frame):
        parts = [None if p is None else self.eval(p, frame) for p in (node.lower, node.upper, node.step)]
        return UNKNOWN if UNKNOWN in parts else slice(*parts)

    def eval_index(self, node, frame):  # Python < 3.9 trees
        return self.eval(node.value, frame)

    def _elements(self, elts, frame) -> list:
        out = []
        for e in elts:
            if isinstance(e, ast.Starred):
                value = self.eval(e.value, frame)
                if value is UNKNOWN:
                    return UNKNOWN
                out.extend(value)
            else:
                out.append(self.eval(e, frame))
        return out

    def eval_list(self, node, frame):
        return self._elements(node.elts, frame)

    def eval_tuple(self, node, frame):
        items = self._elements(node.elts, frame)
        return UNKNOWN if items is UNKNOWN else tuple(items)

    def eval_set(self, node, frame):
        items = self._elements(node.elts, frame)
        return UNKNOWN if items is UNKNOWN or UNKNOWN in items else set(items)

    def eval_dict(self, node, frame):
        out = {}
        for k, v in zip(node.keys, node.values):
            if k is None:
                merged = self.eval(v, frame)
                if not isinstance(merged, dict):
                    return UNKNOWN
                out.update(merged)
                continue
            key = self.eval(k, frame)
            if key is UNKNOWN:
                return UNKNOWN
            try:
                out[key] = self.eval(v, frame)
            except Exception:  # noqa: BLE001 (one entry the reader cannot follow leaves the others)
                out[key] = UNKNOWN
        return out

    def eval_joinedstr(self, node, frame):
        parts = []
        for v in node.values:
            value = self.eval(v, frame)
            if value is UNKNOWN:
                return UNKNOWN
            parts.append(str(value))
        return "".join(parts)

    def eval_formattedvalue(self, node, frame):
        value = self.eval(node.value, frame)
        if value is UNKNOWN or isinstance(value, _READER_TYPES):
            return UNKNOWN
        if node.conversion == ord("r"):
            value = repr(value)
        elif node.conversion == ord("s"):
            value = str(value)
        elif node.conversion == ord("a"):
            value = ascii(value)
        spec = self.eval(node.format_spec, frame) if node.format_spec is not None else ""
        return UNKNOWN if spec is UNKNOWN else format(value, spec)

    def eval_binop(self, node, frame):
        left, right = self.eval(node.left, frame), self.eval(node.right, frame)
        if UNKNOWN in (left, right) or isinstance(left, _READER_TYPES) or isinstance(right, _READER_TYPES):
            return UNKNOWN
        return _BINOPS[type(node.op)](left, right)

    def eval_unaryop(self, node, frame):
        value = self.eval(node.operand, frame)
        if value is UNKNOWN:
            return UNKNOWN
        if isinstance(node.op, ast.Not):
            return not value
        if isinstance(value, _READER_TYPES):
            return UNKNOWN
        return {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Invert: operator.invert}[type(node.op)](value)

    def eval_boolop(self, node, frame):
        is_and = isinstance(node.op, ast.And)
        value = None
        for v in node.values:
            value = self.eval(v, frame)
            truth = self.truth(value)
            if truth is UNKNOWN:
                return UNKNOWN
            if truth != is_and:
                return value
        return value

    def eval_compare(self, node, frame):
        left = self.eval(node.left, frame)
        for op, comp in zip(node.ops, node.comparators):
            right = self.eval(comp, frame)
            result = self.compare(op, left, right)
            if result is UNKNOWN or not result:
                return result
            left = right
        return True

    def compare(self, op, left, right):
        if isinstance(op, (ast.Is, ast.IsNot)):
            if UNKNOWN in (left, right):
                return UNKNOWN
            return (left is right) == isinstance(op, ast.Is)
        if isinstance(op, (ast.In, ast.NotIn)):
            if left is UNKNOWN or right is UNKNOWN or isinstance(right, _READER_TYPES):
                return UNKNOWN
            found = left in right
            if not found and isinstance(right, (list, tuple, set)) and any(r is UNKNOWN for r in right):
                return UNKNOWN
            return found == isinstance(op, ast.In)
        if UNKNOWN in (left, right):
            return UNKNOWN
        if isinstance(left, _EnumMember) or isinstance(right, _EnumMember):
            if isinstance(op, (ast.Eq, ast.NotEq)):
                same = isinstance(left, _EnumMember) and isinstance(right, _EnumMember) and (
                    left.cls is right.cls and left.name == right.name)
                return same == isinstance(op, ast.Eq)
            return UNKNOWN
        if isinstance(left, _READER_TYPES) or isinstance(right, _READER_TYPES):
            return UNKNOWN
        return _CMPOPS[type(op)](left, right)

    def eval_ifexp(self, node, frame):
        test = self.truth(self.eval(node.test, frame))
        if test is UNKNOWN:
            return UNKNOWN
        return self.eval(node.body if test else node.orelse, frame)

    def eval_namedexpr(self, node, frame):
        value = self.eval(node.value, frame)
        self.assign(node.target, value, frame)
        return value

    def eval_lambda(self, node, frame):
        return _Function(self.reader, frame.module, node, frame, owner=frame.context()[0])

    def _comprehension(self, node, frame, make):
        results = []

        def loop(i: int, scope: _Frame) -> bool:
            if i == len(node.generators):
                results.append(make(scope))
                return True
            gen = node.generators[i]
            items = self.eval(gen.iter, scope)
            if items is UNKNOWN:
                return False
            for item in list(items):
                inner = _Frame({}, scope, scope.module)
                self.assign(gen.target, item, inner)
                tests = [self.truth(self.eval(c, inner)) for c in gen.ifs]
                if UNKNOWN in tests:
                    return False
                if all(tests) and not loop(i + 1, inner):
                    return False
            return True

        return results if loop(0, _Frame({}, frame, frame.module)) else UNKNOWN

    def eval_listcomp(self, node, frame):
        return self._comprehension(node, frame, lambda scope: self.eval(node.elt, scope))

    eval_generatorexp = eval_listcomp

    def eval_setcomp(self, node, frame):
        items = self._comprehension(node, frame, lambda scope: self.eval(node.elt, scope))
        return UNKNOWN if items is UNKNOWN or UNKNOWN in items else set(items)

    def eval_dictcomp(self, node, frame):
        pairs = self._comprehension(node, frame, lambda s: (self.eval(node.key, s), self.eval(node.value, s)))
        return UNKNOWN if pairs is UNKNOWN or any(k is UNKNOWN for k, _unused in pairs) else dict(pairs)

    def eval_call(self, node, frame):
        if isinstance(node.func, ast.Name) and node.func.id == "super" and not node.args:
            owner, first = frame.context()
            return UNKNOWN if owner is None else _Super(owner, first)
        func = self.eval(node.func, frame)
        args = self._elements(node.args, frame)
        if args is UNKNOWN:
            return UNKNOWN
        kwargs = {}
        for kw in node.keywords:
            value = self.eval(kw.value, frame)
            if kw.arg is None:
                if not isinstance(value, dict):
                    return UNKNOWN
                kwargs.update(value)
            else:
                kwargs[kw.arg] = value
        return self.call(func, args, kwargs)

    # ---------------------------------------------------------------------------------- objects, calls
    def get_attr(self, obj, name: str):
        if obj is UNKNOWN:
            return UNKNOWN
        if isinstance(obj, _ModuleRef):
            return obj.module.lookup(name)
        if isinstance(obj, _Class):
            return obj.attr(name)
        if isinstance(obj, _Instance):
            if name in obj.attrs:
                return obj.attrs[name]
            return obj.cls.attr(name, instance=obj)
        if isinstance(obj, _ArgsView):
            if name in obj.values:
                return obj.values[name]
            value = obj.cls.attr(name, instance=_Instance(obj.cls, obj.values))
            return value if isinstance(value, _Function) else UNKNOWN
        if isinstance(obj, _Super):
            if isinstance(obj.first, _EnumClassAsInstance) and name == "__getitem__":
                return _hook(obj.first.member)  # EnumMeta.__getitem__: the member, or KeyError
            return obj.owner.attr(name, instance=obj.first, start_after=obj.owner)
        if isinstance(obj, _EnumMember):
            return {"name": obj.name}.get(name, UNKNOWN)
        if isinstance(obj, _Function):
            return {"__name__": obj.__name__}.get(name, UNKNOWN)
        if name.startswith("_") and name not in ("__name__", "__doc__"):
            return UNKNOWN
        try:
            return getattr(obj, name)
        except AttributeError:
            return UNKNOWN

    def get_item(self, obj, key):
        if obj is UNKNOWN or key is UNKNOWN:
            return UNKNOWN
        if isinstance(obj, _Class):
            return self.class_item(obj, key)
        if isinstance(obj, _READER_TYPES):
            return UNKNOWN
        if isinstance(obj, dict) and key not in obj:
            raise KeyError(key)
        return obj[key]

    def class_item(self, cls: _Class, key):
        """Enum[name]: the member, or the release's own error for an unknown name (its metaclass's, if any)."""
        if not cls.is_enum() or not isinstance(key, str):
            return UNKNOWN
        members = cls.members()
        if key in members:
            return members[key]
        meta = cls.metaclass()
        if isinstance(meta, _Class) and meta.own("__getitem__") is not None:
            return self.call(meta.attr("__getitem__", instance=_EnumClassAsInstance(cls)), [key], {})
        raise KeyError(key)

    def call(self, func, args: list, kwargs: dict):
        if func is UNKNOWN:
            return UNKNOWN
        if isinstance(func, _Function):
            return func(*args, **kwargs)
        if isinstance(func, _Class):
            return _Instance(func)
        if isinstance(func, _READER_TYPES):
            return UNKNOWN
        if func is getattr or func is hasattr:
            value = self.get_attr(args[0], args[1]) if len(args) > 1 and isinstance(args[1], str) else UNKNOWN
            if func is hasattr:
                return UNKNOWN if value is UNKNOWN else True
            return args[2] if value is UNKNOWN and len(args) > 2 else value
        if func is isinstance or func is issubclass:
            if any(isinstance(a, _READER_TYPES) for a in args):
                return UNKNOWN
            kinds = args[1] if len(args) > 1 else ()
            if any(isinstance(k, _READER_TYPES) for k in (kinds if isinstance(kinds, tuple) else (kinds,))):
                return UNKNOWN
            return func(*args)
        hooked = getattr(func, "_reader_hook", False) or isinstance(getattr(func, "__self__", None), (
            _ParserProxy, list, dict, _Logger))
        values = list(args) + list(kwargs.values())
        if not hooked and any(v is UNKNOWN or isinstance(v, _READER_TYPES) for v in values):
            return UNKNOWN
        return func(*args, **kwargs)

    def call_function(self, fn: _Function, args, kwargs):
        node = fn.node
        frame = _Frame({}, fn.closure, fn.module, owner=fn.owner, self_arg=fn.bound)
        if fn.bound is not _MISSING:
            args = (fn.bound, *args)
        self.bind_params(node.args, frame, list(args), dict(kwargs), fn)
        if isinstance(node, ast.Lambda):
            return self.eval(node.body, frame)
        saved = self.line
        try:
            self.run_block(node.body, frame)
        except _Return as r:
            return r.value
        finally:
            self.line = saved
        return None

    def bind_params(self, a: ast.arguments, frame: _Frame, args: list, kwargs: dict, fn: _Function) -> None:
        positional = [*a.posonlyargs, *a.args]
        defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
        def_frame = fn.closure or fn.module.frame
        for i, (param, default) in enumerate(zip(positional, defaults)):
            if i < len(args):
                frame.vars[param.arg] = args[i]
            elif param.arg in kwargs:
                frame.vars[param.arg] = kwargs.pop(param.arg)
            elif default is not None:
                frame.vars[param.arg] = self.eval(default, def_frame)
            else:
                frame.vars[param.arg] = UNKNOWN
        if a.vararg is not None:
            frame.vars[a.vararg.arg] = tuple(args[len(positional):])
        for param, default in zip(a.kwonlyargs, a.kw_defaults):
            if param.arg in kwargs:
                frame.vars[param.arg] = kwargs.pop(param.arg)
            else:
                frame.vars[param.arg] = self.eval(default, def_frame) if default is not None else UNKNOWN
        if a.kwarg is not None:
            frame.vars[a.kwarg.arg] = kwargs


class _EnumClassAsInstance(_Instance):
    """An enum class as the `cls` of its metaclass's methods: cls.__members__ and super().__getitem__ work."""

    def __init__(self, enum_cls: _Class) -> None:
        super().__init__(enum_cls)
        self.attrs["__members__"] = enum_cls.members()

    def member(self, name):
        members = self.attrs["__members__"]
        if name not in members:
            raise KeyError(name)
        return members[name]


class _ParserProxy:
    """The real argparse parser (vLLM's own FlexibleArgumentParser), fed only what the reader knows."""

    def __init__(self, reader: VllmSource, real) -> None:
        self.reader, self.real = reader, real

    def add_argument(self, *flags, **kwargs):
        if any(not isinstance(f, str) for f in flags):
            self.reader.notes.append(f"flags not known: {flags!r}")
            return UNKNOWN
        origin = kwargs.pop("_origin", None)
        kwargs.pop("help", None)
        kwargs.pop("metavar", None)
        for key in [k for k, v in kwargs.items() if v is UNKNOWN or (isinstance(v, list) and UNKNOWN in v)]:
            del kwargs[key]
        if isinstance(kwargs.get("default"), _READER_TYPES):
            kwargs["default"] = None
        action = kwargs.get("action")
        if action is not None and not (isinstance(action, str) or (
                isinstance(action, type) and issubclass(action, argparse.Action))):
            del kwargs["action"]  # the release's own Action class: parse as a plain value
        if isinstance(kwargs.get("type"), _READER_TYPES):
            del kwargs["type"]
        try:
            try:
                act = self.real.add_argument(*flags, **kwargs)
            except TypeError:
                if "deprecated" not in kwargs:
                    raise
                kwargs.pop("deprecated")
                act = self.real.add_argument(*flags, **kwargs)
        except (ValueError, TypeError, argparse.ArgumentError) as exc:
            self.reader.notes.append(f"add_argument{flags!r}: {exc}")
            return UNKNOWN
        if origin is not None:
            self.reader.origins[act.dest] = origin
        return act

    def add_argument_group(self, *args, **kwargs):
        names = dict(zip(("title", "description"), args), **kwargs)
        known = {k: v if isinstance(v, str) else "" for k, v in names.items() if k in ("title", "description")}
        return _ParserProxy(self.reader, self.real.add_argument_group(**known))

    def add_mutually_exclusive_group(self, *args, **kwargs):
        return _ParserProxy(self.reader, self.real.add_mutually_exclusive_group())

    def add_parser(self, name, **kwargs):
        keep = {k: v for k, v in kwargs.items() if k in ("usage", "aliases") and v is not UNKNOWN}
        return _ParserProxy(self.reader, self.real.add_parser(name, **keep))

    def set_defaults(self, **kwargs):
        return None

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        return UNKNOWN


def _exec_native_module(source: str, path: Path, reader: VllmSource) -> types.ModuleType | None:
    """vllm/utils/argparse_utils.py is self-contained: run it as is (its FlexibleArgumentParser is what
    turns --some_flag into --some-flag, pairs --enable-x with --disable-x, reads --config and -O3)."""
    logger_module = types.ModuleType("vllm.logger")
    logger_module.init_logger = lambda name: _Logger(reader, name)
    mapping = {"regex": re, "vllm.logger": logger_module}
    try:
        import yaml  # noqa: F401 (Ray brings PyYAML; vLLM reads --config files with it)
    except ImportError:
        stub = types.ModuleType("yaml")

        def safe_load(_stream):
            raise ImportError("PyYAML is not installed in this image: --config cannot be read")

        stub.safe_load = safe_load
        mapping["yaml"] = stub

    def guarded_import(name, globals_=None, locals_=None, fromlist=(), level=0):
        if name in mapping:
            return mapping[name]
        if name.split(".")[0] in sys.stdlib_module_names or name == "yaml":
            return __import__(name, globals_, locals_, fromlist, level)
        raise ImportError(f"{name} is not in the stand-in's reach")

    module = types.ModuleType("vllm.utils.argparse_utils")
    module.__file__ = str(path)
    module.__dict__["__builtins__"] = {**builtins.__dict__, "__import__": guarded_import}
    try:
        exec(compile(source, str(path), "exec"), module.__dict__)  # noqa: S102 (the image's own vLLM file)
    except Exception as exc:  # noqa: BLE001 (then the reader falls back to plain argparse)
        reader.notes.append(f"{path}: {type(exc).__name__}: {exc}")
        return None
    return module


class VllmSource:
    """The vllm package of this image, read from its .py files (never imported)."""

    def __init__(self, root: Path, argv: list[str] | None = None) -> None:
        self.root = root
        self.interp = _Interp(self)
        self.modules: dict[str, _Module | None] = {}
        self.natives: dict[str, types.ModuleType | None] = {}
        self.platform = _Platform()
        self.sys = _SysView(argv or [])
        self.os = _OsView()
        self.origins: dict[str, tuple] = {}
        self.notes: list[str] = []
        self.proc = "APIServer"
        self._int_types: dict | None = None

    @classmethod
    def of_image(cls, argv: list[str] | None = None) -> VllmSource | None:
        spec = importlib.util.find_spec("vllm")
        if spec is None or not spec.submodule_search_locations:
            return None
        return cls(Path(next(iter(spec.submodule_search_locations))), argv)

    # ------------------------------------------------------------------------------------------ modules
    def module(self, name: str) -> _Module | None:
        if name in self.modules:
            return self.modules[name]
        rel = name.split(".")[1:] if name.startswith("vllm") else None
        found = None
        if rel is not None:
            base = self.root.joinpath(*rel) if rel else self.root
            if base.with_suffix(".py").is_file() and rel:
                found = _Module(self, name, base.with_suffix(".py"), False)
            elif (base / "__init__.py").is_file():
                found = _Module(self, name, base / "__init__.py", True)
            elif base.is_dir():
                found = _Module(self, name, None, True)
        self.modules[name] = found
        return found

    def native_module(self, name: str) -> types.ModuleType | None:
        if name not in self.natives:
            path = self.root.joinpath(*name.split(".")[1:]).with_suffix(".py")
            self.natives[name] = _exec_native_module(path.read_text(), path, self) if path.is_file() else None
        return self.natives[name]

    def hook(self, modname: str, name: str):
        if modname == "vllm.engine.arg_utils" and name == "get_kwargs":
            return self.get_kwargs
        if modname == "vllm.logger" and name == "init_logger":
            return _hook(lambda n: _Logger(self, n))
        if modname == "vllm.platforms" and name == "current_platform":
            return self.platform
        if modname == "vllm.plugins" and name == "load_general_plugins":
            return _hook(lambda: None)
        if modname == "vllm.utils.argparse_utils":
            native = self.native_module(modname)
            return getattr(native, name, UNKNOWN) if native is not None else UNKNOWN
        return _MISSING

    def import_module(self, dotted: str):
        if dotted == "logging":  # vllm.* loggers print in vLLM's format
            return ("native", types.SimpleNamespace(getLogger=_hook(lambda name="vllm": _Logger(self, name))))
        if dotted == "sys":
            return ("native", self.sys)
        if dotted == "os":
            return ("native", self.os)
        if dotted == "vllm" or dotted.startswith("vllm."):
            m = self.module(dotted)
            return ("module", m) if m is not None else None
        native = _NATIVE_MODULES.get(dotted)
        return ("native", native) if native is not None else None

    def import_from(self, modname: str, name: str):
        if modname == "vllm" or modname.startswith("vllm."):
            hook = self.hook(modname, name)
            if hook is not _MISSING:
                return ("native", hook)
            m = self.module(modname)
            if m is not None:
                found = m.binding(name)
                if found is not None:
                    return found
            sub = self.module(f"{modname}.{name}")
            return ("module", sub) if sub is not None else None
        if modname == "os":
            return ("native", getattr(self.os, name, UNKNOWN))
        native = _NATIVE_MODULES.get(modname)
        if native is None:
            return None
        value = getattr(native, name, _MISSING)
        return None if value is _MISSING else ("native", value)

    def value_of(self, binding, name: str, default=UNKNOWN):
        if binding is None:
            return _SAFE_BUILTINS.get(name, default)
        kind = binding[0]
        if kind == "native":
            return binding[1]
        if kind == "module":
            return _ModuleRef(binding[1])
        st, module = binding[1], binding[2]
        if isinstance(st, ast.ClassDef):
            return _Class(self, module, st)
        if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return _Function(self, module, st, module.frame)
        return self.interp.eval(st.value, module.frame)

    # --------------------------------------------------------------------------------- types -> flags
    def type_atoms(self, node, module: _Module, depth: int = 0) -> frozenset:
        """A field annotation as the set of types vLLM's get_type_hints() yields (unions flattened)."""
        other = frozenset({("other", ast.unparse(node) if isinstance(node, ast.AST) else str(node))})
        if depth > 25 or node is None:
            return other
        if isinstance(node, ast.Constant):
            if node.value is None:
                return frozenset({_NONE_ATOM})
            if isinstance(node.value, str):
                try:
                    return self.type_atoms(ast.parse(node.value, mode="eval").body, module, depth + 1)
                except SyntaxError:
                    return other
            return other
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return self.type_atoms(node.left, module, depth + 1) | self.type_atoms(node.right, module, depth + 1)
        if isinstance(node, ast.Subscript):
            base = self.type_binding(node.value, module)
            elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            tag = self.type_tag(base)
            if tag == "Literal":
                values = [self.interp.eval(e, module.frame) for e in elts]
                return other if UNKNOWN in values else frozenset({("literal", tuple(values))})
            if tag in ("Annotated", "SkipValidation"):
                return self.type_atoms(elts[0], module, depth + 1)
            if tag == "Optional":
                return self.type_atoms(elts[0], module, depth + 1) | {_NONE_ATOM}
            if tag == "Union":
                out: frozenset = frozenset()
                for e in elts:
                    out |= self.type_atoms(e, module, depth + 1)
                return out
            if tag in ("list", "tuple", "set", "dict", "type", "frozenset"):
                args = tuple(_ELLIPSIS if isinstance(e, ast.Constant) and e.value is Ellipsis
                             else self.type_atoms(e, module, depth + 1) for e in elts)
                return frozenset({("generic", tag, args)})
            return other
        if isinstance(node, (ast.Name, ast.Attribute)):
            base = self.type_binding(node, module)
            tag = self.type_tag(base)
            if tag in ("str", "int", "float", "bool", "dict", "list", "tuple", "set", "bytes", "type", "object",
                       "frozenset"):
                return frozenset({("builtin", tag)})
            if tag == "None":
                return frozenset({_NONE_ATOM})
            if isinstance(base, tuple) and base[0] == "node":
                st, where = base[1], base[2]
                if isinstance(st, ast.ClassDef):
                    cls = _Class(self, where, st)
                    if cls.is_dataclass():
                        return frozenset({("dataclass", cls)})
                    if cls.is_dict_subclass():
                        return frozenset({("dictsub", st.name)})
                    return frozenset({("other", st.name)})
                if isinstance(st, (ast.Assign, ast.AnnAssign)):
                    return self.type_atoms(st.value, where, depth + 1)
            return other
        return other

    def type_binding(self, node, module: _Module):
        if isinstance(node, ast.Name):
            found = module.binding(node.id)
            if found is None and hasattr(builtins, node.id):
                return ("native", getattr(builtins, node.id))
            return found
        if isinstance(node, ast.Attribute):
            owner = self.interp.eval(node.value, module.frame)
            if isinstance(owner, _ModuleRef):
                return owner.module.binding(node.attr)
            if owner is not UNKNOWN and not isinstance(owner, _READER_TYPES):
                value = getattr(owner, node.attr, _MISSING)
                return None if value is _MISSING else ("native", value)
        return None

    @staticmethod
    def type_tag(binding) -> str | None:
        if binding is None or binding[0] != "native":
            return None
        obj = binding[1]
        if obj is None or obj is type(None):
            return "None"
        if isinstance(obj, type) and obj.__module__ == "builtins":
            return obj.__name__
        if obj in (typing.List, typing.Tuple, typing.Set, typing.Dict, typing.FrozenSet, typing.Type):  # noqa: UP006
            return obj._name.lower()
        for tag in ("Literal", "Annotated", "Optional", "Union"):
            if obj is getattr(typing, tag):
                return tag
        if getattr(obj, "__name__", "") == "SkipValidation":
            return "SkipValidation"
        return None

    def arg_utils(self) -> _Module:
        m = self.module("vllm.engine.arg_utils")
        if m is None:
            raise FileNotFoundError(f"{self.root}/engine/arg_utils.py is not in this image")
        return m

    def int_types(self) -> dict:
        """What vLLM's _compute_kwargs itself decides beyond the type: the int fields given a human-readable
        parser (max_model_len, max_num_batched_tokens...), the choice appended for None, dict subclasses."""
        if self._int_types is not None:
            return self._int_types
        m = self.arg_utils()
        found = m.find("_compute_kwargs")
        fn = found[0] if found else ast.FunctionDef(name="", body=[], decorator_list=[])
        bound = {t.id: st.value for st in ast.walk(fn) if isinstance(st, ast.Assign)
                 for t in st.targets if isinstance(t, ast.Name)}
        out: dict = {"<none choice>": "None", "<dict subclass>": "is_dict_subclass" in ast.unparse(fn)}
        for node in ast.walk(fn):
            if isinstance(node, ast.If) and isinstance(node.test, ast.Compare) and isinstance(
                    node.test.left, ast.Name) and node.test.left.id == "name":
                comp = node.test.comparators[0]
                names = self.interp.eval(bound.get(getattr(comp, "id", ""), comp), m.frame)
                names = [names] if isinstance(names, str) else names
                setter = next((st for st in node.body if isinstance(st, ast.Assign)
                               and ast.unparse(st.targets[0]).replace('"', "'") == "kwargs[name]['type']"), None)
                if setter is not None and isinstance(names, (list, tuple, set)):
                    parser = self.interp.eval(setter.value, m.frame)
                    for n in names:
                        out.setdefault(n, parser)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "append" \
                    and "choices" in ast.unparse(node.func.value) and node.args \
                    and isinstance(node.args[0], ast.Constant):
                out["<none choice>"] = node.args[0].value
        self._int_types = out
        return out

    def field_kwargs(self, name: str, atoms: frozenset, default) -> dict:
        """argparse kwargs for one config field, as vLLM's _compute_kwargs derives them from its type."""
        m = self.arg_utils()
        fn = m.lookup
        kw: dict = {"default": None if default is UNKNOWN else default, "help": ""}
        if self.int_types().get("<dict subclass>"):
            atoms = frozenset(("builtin", "dict") if a[0] == "dictsub" else a for a in atoms)

        def builtin(t: str) -> bool:
            return any(a == ("builtin", t) or (a[0] == "generic" and a[1] == t) for a in atoms)

        def literal_kwargs(values: tuple, with_str: bool) -> dict:
            try:
                return {"type": type(values[0]), "metavar" if with_str else "choices": sorted(values)}
            except (TypeError, IndexError):
                return {"type": str}

        literal = next((a for a in atoms if a[0] == "literal"), None)
        dataclass_atom = next((a for a in atoms if a[0] == "dataclass"), None)
        non_builtin = any(a[0] in ("literal", "dataclass", "other", "dictsub") for a in atoms)
        if dataclass_atom is not None:
            kw["type"] = self.dataclass_parser(dataclass_atom[1])
        elif atoms == frozenset({("builtin", "bool"), ("builtin", "str"), _NONE_ATOM}):
            kw.update(type=str, nargs="?", const=True)
        elif builtin("bool"):
            kw["action"] = argparse.BooleanOptionalAction
        elif literal is not None:
            kw.update(literal_kwargs(literal[1], builtin("str")))
        elif builtin("tuple") or builtin("list") or builtin("set"):
            kind = next(k for k in ("tuple", "list", "set") if builtin(k))
            generic = next((a for a in atoms if a[0] == "generic" and a[1] == kind), None)
            args = generic[2] if generic else ()
            elem = args[0] if args else frozenset({("builtin", "str")})
            kw["nargs"] = "+" if kind != "tuple" or _ELLIPSIS in args or not args else len(args)
            if elem is _ELLIPSIS or len(elem) != 1:
                kw["type"] = str
            else:
                (e,) = elem
                if e[0] == "literal":
                    kw.update(literal_kwargs(e[1], False))
                elif e[0] == "builtin" and e[1] in ("int", "float", "str"):
                    kw["type"] = {"int": int, "float": float, "str": str}[e[1]]
                else:
                    kw["type"] = str
        elif builtin("int"):
            kw["type"] = self.int_types().get(name, int)
        elif builtin("float"):
            kw["type"] = float
        elif builtin("dict") and (builtin("str") or non_builtin):
            kw["type"] = fn("union_dict_and_str")
        elif builtin("dict"):
            kw["type"] = self.interp.call(fn("parse_type"), [json.loads], {})
        else:
            kw["type"] = str
        if _NONE_ATOM in atoms and not builtin("bool"):
            kw["type"] = self.interp.call(fn("optional_type"), [kw["type"]], {})
            if kw.get("choices"):
                kw["choices"].append(self.int_types().get("<none choice>"))
        return kw

    def dataclass_parser(self, cls: _Class):
        """The argparse type of a config-dataclass flag (--compilation-config, --attention-config...): vLLM
        validates the JSON with pydantic right there, so a bad key or value is an argparse error."""
        expand = self.arg_utils().lookup("_expand_json_human_readable_numbers")

        def parse_dataclass(val: str):
            text = expand(val) if isinstance(expand, _Function) else val
            try:
                value = json.loads(text if isinstance(text, str) else val)
            except ValueError as exc:
                raise argparse.ArgumentTypeError(
                    f"1 validation error for {cls.name}\n  Invalid JSON: {exc} [type=json_invalid, "
                    f"input_value={val!r}, input_type=str]") from exc
            if not isinstance(value, dict):
                raise argparse.ArgumentTypeError(
                    f"1 validation error for {cls.name}\n  Input should be a dictionary or an instance of "
                    f"{cls.name} [type=dataclass_type, input_value={value!r}, input_type={type(value).__name__}]")
            problem = self.dataclass_problem(cls, value)
            if problem:
                raise argparse.ArgumentTypeError(f"1 validation error for {cls.name}\n{problem}")
            return value

        return parse_dataclass

    def dataclass_problem(self, cls: _Class, value: dict) -> str | None:
        """What pydantic says of a config dataclass built from `value`: an extra key (vLLM's @config forbids
        them), a value outside a Literal field, or a field validator's error. None when it passes."""
        fields = cls.fields()
        forbid = "config" in _decorator_names(cls.node) and not any(
            re.search(r"extra\s*=\s*['\"](allow|ignore)", ast.unparse(d)) for d in cls.node.decorator_list)
        for key, item in value.items():
            shown = f"input_value={item!r}, input_type={type(item).__name__}"
            if key not in fields:
                if forbid:
                    return f"{key}\n  Unexpected keyword argument [type=unexpected_keyword_argument, {shown}]"
                continue
            st, owner = fields[key]
            atoms = self.type_atoms(st.annotation, owner.module)
            literals = [v for a in atoms if a[0] == "literal" for v in a[1]]
            if literals and all(a[0] == "literal" or a == _NONE_ATOM for a in atoms) and item not in literals \
                    and not (item is None and _NONE_ATOM in atoms):
                allowed = ", ".join(repr(v) for v in literals[:-1]) + f" or {literals[-1]!r}" if len(
                    literals) > 1 else repr(literals[0])
                return f"{key}\n  Input should be {allowed} [type=literal_error, {shown}]"
            try:
                self.run_validators(cls, key, item)
            except Exception as exc:  # noqa: BLE001 (the release's own raise: see run_validators)
                return f"{key}\n  Value error, {exc} [type=value_error, {shown}]"
        return None

    def run_validators(self, cls: _Class, field: str, value):
        """The class's pydantic field validators for `field` over `value` (before, then after); returns the
        value they make of it. Only an error that the release's own source raises escapes."""
        validators = cls.field_validators(field)
        for mode in ("before", "after", "plain"):
            for m, fn in validators:
                if m == mode and value is not UNKNOWN:
                    value = self.replay(fn, [value])
        return value

    def get_kwargs(self, cls):
        """vllm.engine.arg_utils.get_kwargs(cls): argparse kwargs for every field of a config dataclass."""
        if not isinstance(cls, _Class):
            return UNKNOWN
        out = {}
        for name, (st, owner) in cls.fields().items():
            kw = self.field_kwargs(name, self.type_atoms(st.annotation, owner.module), owner.default_of(st))
            kw["_origin"] = (cls, name)
            out[name] = kw
        return out

    get_kwargs._reader_hook = True  # type: ignore[attr-defined]

    # ----------------------------------------------------------------------------------- the CLI itself
    def build_cli(self):
        """(top-level parser, serve parser): `vllm` and its `serve` subcommand as the release defines them."""
        native = self.native_module("vllm.utils.argparse_utils")
        parser_cls = getattr(native, "FlexibleArgumentParser", argparse.ArgumentParser)
        top = parser_cls(prog="vllm", description="vLLM CLI")
        top.add_argument("-v", "--version", action="version", version=VERSION)
        subparsers = top.add_subparsers(required=False, dest="subparser")
        serve_module = self.module("vllm.entrypoints.cli.serve")
        if serve_module is None:
            raise FileNotFoundError(f"{self.root}/entrypoints/cli/serve.py is not in this image")
        command = next((_Class(self, serve_module, st) for st in serve_module.tree.body if isinstance(
            st, ast.ClassDef) and any(isinstance(s, ast.FunctionDef) and s.name == "subparser_init"
                                      for s in st.body)), None)
        if command is None:
            raise LookupError("no `serve` subcommand class in vllm/entrypoints/cli/serve.py")
        self.interp.lenient = True
        try:
            init = command.attr("subparser_init", instance=_Instance(command))
            proxy = self.interp.call(init, [_ParserProxy(self, subparsers)], {})
        finally:
            self.interp.lenient = False
        if not isinstance(proxy, _ParserProxy):
            raise LookupError("the serve subcommand's parser could not be built from the source")
        return top, proxy.real

    # ------------------------------------------------------------------------- what create_engine_config does
    def create_engine_config_source(self) -> str:
        m = self.arg_utils()
        found = m.find("EngineArgs")
        cls = found[0] if found else None
        for st in getattr(cls, "body", []):
            if isinstance(st, ast.FunctionDef) and st.name == "create_engine_config":
                return ast.unparse(st)
        return ""

    def device_error(self) -> tuple[str, str] | None:
        """(type, message) that DeviceConfig.__post_init__ raises when the platform has no device type."""
        m = self.module("vllm.config.device")
        cls = m.lookup("DeviceConfig") if m is not None else UNKNOWN
        if not isinstance(cls, _Class):
            return None
        saved, self.platform.device_type = self.platform.device_type, ""
        try:
            self.interp.call(cls.attr("__post_init__", instance=_Instance(cls, {"device": "auto"})), [], {})
        except Exception as exc:  # noqa: BLE001 (only the release's own raise counts)
            if release_raised(exc):
                return type(exc).__name__, str(exc)
        finally:
            self.platform.device_type = saved
        return None

    def validate_environ(self, hard_fail: bool) -> None:
        """Replay the validate_environ() that create_engine_config calls (envs.py, or the platform's)."""
        src = self.create_engine_config_source()
        if "current_platform.validate_environ" in src:
            m = self.module("vllm.platforms.interface")
            owner = m.lookup("Platform") if m is not None else UNKNOWN
            fn = owner.attr("validate_environ") if isinstance(owner, _Class) else UNKNOWN
        else:
            m = self.module("vllm.envs")
            fn = m.lookup("validate_environ") if m is not None else UNKNOWN
        self.replay(fn, [hard_fail])

    def check_env_choices(self) -> None:
        """Read every set VLLM_* variable that envs.py declares with choices, as vLLM's env cache does."""
        m = self.module("vllm.envs")
        found = m.find("environment_variables") if m is not None else None
        table = getattr(found[0], "value", None) if found else None
        if not isinstance(table, ast.Dict):
            return
        for key, value in zip(table.keys, table.values):
            name = key.value if isinstance(key, ast.Constant) else None
            if name not in self.os.environ or not isinstance(value, ast.Call):
                continue
            callee = value.func.attr if isinstance(value.func, ast.Attribute) else getattr(value.func, "id", "")
            if callee.endswith("with_choices"):
                self.replay(self.interp.eval(value, m.frame), [])

    def replay(self, fn, args: list, instance=None):
        """Call a function of the release; only the release's own `raise` escapes."""
        if not isinstance(fn, _Function):
            return UNKNOWN
        try:
            return self.interp.call(fn, args, {})
        except Exception as exc:
            if release_raised(exc):
                raise
            self.notes.append(f"{fn.__name__}: {type(exc).__name__}: {exc}")
            return UNKNOWN

    def check_config_values(self, ns: argparse.Namespace, parser) -> None:
        """The config dataclasses' pydantic field validators (and `_verify_<field>`) over the values given,
        in the order create_engine_config builds those configs."""
        src = self.create_engine_config_source()
        whole = self.arg_utils().path.read_text()
        start = max(whole.find("def create_model_config"), 0)

        def order(cls: _Class) -> int:
            m = re.search(rf"\b{cls.name}\s*[.(]", whole[start:])
            return m.start() if m else len(whole)

        defaults = {a.dest: a.default for a in parser._actions}
        checks = []
        for dest, (cls, field) in self.origins.items():
            value = getattr(ns, dest, None)
            if value is not None and value != defaults.get(dest):
                checks.append((order(cls), cls, field, value))
        for _unused, cls, field, value in sorted(checks, key=lambda c: c[0]):
            self.check_field(cls, field, value, src, ns)

    def check_field(self, cls: _Class, field: str, value, src: str, ns: argparse.Namespace) -> None:
        try:
            value = self.run_validators(cls, field, value)
        except Exception as exc:
            # EngineArgs calls some validators itself (AttentionConfig.validate_backend_before): then the
            # error is the validator's own; otherwise pydantic wraps it while building the config.
            direct = any(f".{fn.__name__}(" in src for _unused, fn in cls.field_validators(field))
            raise StartupError.from_validator(cls, field, value, exc, direct) from exc
        verify = cls.attr(f"_verify_{field}")
        if isinstance(verify, _Function) and value is not UNKNOWN:
            values = {k: getattr(ns, k) for k in cls.fields() if hasattr(ns, k)}
            values[field] = value
            try:
                self.replay(verify.bind(_ArgsView(cls, values)), [])
            except Exception as exc:
                raise StartupError.from_validator(cls, None, value, exc, False) from exc


class StartupError(Exception):
    """An error the API server process of the release would end with while building its engine config."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind, self.message = kind, message

    @classmethod
    def from_validator(cls, owner: _Class, field: str | None, value, exc: BaseException, direct: bool):
        if direct:
            return cls(type(exc).__name__, str(exc))
        loc = f"{field}\n" if field else ""
        detail = f" [type=value_error, input_value={value!r}, input_type={type(value).__name__}]" if field else ""
        return cls("pydantic_core._pydantic_core.ValidationError",
                   f"1 validation error for {owner.name}\n{loc}  Value error, {exc}{detail}")


# ------------------------------------------------------------------------------------------------- GPU
def nvml_gpu_count() -> int:
    """GPUs that NVML reports, as vLLM's CUDA platform detection asks it (0 without the library or a GPU).

    The simulated NVIDIA container runtime injects libnvidia-ml.so.1 only into containers that request the
    GPU (docker --gpus / device_requests), as the real toolkit mounts the driver's library.
    """
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return 0
    try:
        if nvml.nvmlInit_v2() != 0:
            return 0
        try:
            count = ctypes.c_uint(0)
            if nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0:
                return 0
            return int(count.value)
        finally:
            nvml.nvmlShutdown()
    except AttributeError:  # a library without NVML's entry points
        return 0


def worker_device_check(rank: int, node_ip: str, device_error: tuple[str, str]) -> None:
    """What a RayWorkerProc does first on its node: vLLM's platform detection, through NVML."""
    if nvml_gpu_count() > 0:
        return
    kind, message = device_error
    text = f"{message} (RayWorkerProc rank={rank} on node {node_ip}: NVML finds no GPU in this container)"
    # Ray prefixes what its actor prints with "(RayWorkerProc pid=N, ip=IP)" on the way to the driver's log.
    stamp = datetime.now().strftime("%m-%d %H:%M:%S")
    print(f"ERROR {stamp} [ray_executor.py:1] RayWorkerProc failed: {kind}: {text}", flush=True)
    raise RuntimeError(text)


# ------------------------------------------------------------------------------------------------- CLI
def create_engine_config(args: argparse.Namespace, parser, source: VllmSource, device_error: tuple[str, str]) -> None:
    """What the release checks while it builds its engine config in the API server process, in its order:
    the platform (NVML), the VLLM_* environment, the model, then the values its config validators refuse."""
    if nvml_gpu_count() == 0:
        raise StartupError(*device_error)
    try:
        source.validate_environ(bool(getattr(args, "fail_on_environ_validation", False)))
    except Exception as exc:
        if not release_raised(exc):
            raise
        raise StartupError(type(exc).__name__, str(exc)) from exc
    model = Path(args.model)
    if not (model / "config.json").exists():
        raise StartupError("pydantic_core._pydantic_core.ValidationError",
                           "1 validation error for ModelConfig\n  Value error, Invalid repository ID or local "
                           f"directory specified: '{args.model}'.\nPlease verify the following requirements:\n"
                           "1. Provide a valid Hugging Face repository ID.\n2. Specify a local directory that "
                           "contains a recognized configuration file.\n   - For Hugging Face models: ensure the "
                           "presence of a 'config.json'.")
    source.check_config_values(args, parser)
    check_model_files(args, model)
    # ModelConfig.verify_with_parallel_config: every TP rank takes a whole share of the attention heads.
    heads = int(json.loads((model / "config.json").read_text()).get("num_attention_heads") or 0)
    tp = int(args.tensor_parallel_size or 1)
    if heads and heads % tp:
        raise StartupError("ValueError", f"Total number of attention heads ({heads}) must be divisible by tensor "
                                         f"parallel size ({tp}).")


def check_model_files(args: argparse.Namespace, model: Path) -> None:
    """What transformers reads from the model directory while vLLM builds its config and its tokenizer, in
    the API server process on the head: the remote code that config.json's auto_map names (with
    --trust-remote-code), then the tokenizer. A file missing, or a link to nowhere, ends the server as it
    ends vLLM's."""
    config = json.loads((model / "config.json").read_text())
    if getattr(args, "trust_remote_code", False):
        for entry in sorted(set((config.get("auto_map") or {}).values())):
            module = entry.split(".")[0] + ".py"
            if not (model / module).is_file():
                raise StartupError("OSError", f"{model} does not appear to have a file named {module}. Checkout "
                                              f"'https://huggingface.co/{model}/tree/None' for available files.")
    tokenizer = [name for name in ("tokenizer.json", "tokenizer_config.json") if not (model / name).is_file()]
    try:
        if not tokenizer:
            json.loads((model / "tokenizer.json").read_text())
    except ValueError:
        tokenizer = ["tokenizer.json"]
    if tokenizer:
        raise StartupError("OSError", f"Can't load tokenizer for '{model}'. If you were trying to load it from "
                                      "'https://huggingface.co/models', make sure you don't have a local directory "
                                      f"with the same name. Otherwise, make sure '{model}' is the correct path to a "
                                      "directory containing all relevant files for a PreTrainedTokenizerFast "
                                      "tokenizer.")


def api_server_failure(exc: StartupError, source: VllmSource) -> None:
    """How the API server process ends on an error raised while it builds the engine config: a traceback."""
    where = source.root / "engine" / "arg_utils.py"
    lines = ["Traceback (most recent call last):", f'  File "{where}", in create_engine_config',
             *f"{exc.kind}: {exc.message}".splitlines()]
    for line in lines:
        print(f"(APIServer pid={PID}) {line}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------- what the image's vLLM does
def resolved_quantization(quant: dict, release: gb10.Release) -> str:
    """The method name vLLM resolves for the checkpoint: ModelOpt's mixed-precision checkpoints get the
    mixed config where the release has one."""
    method = str(quant.get("quant_method", "None"))
    modelopt = release.root / "model_executor/layers/quantization/modelopt.py"
    if method == "modelopt" and quant.get("quant_algo") == "MIXED_PRECISION" and modelopt.is_file() and \
            '"modelopt_mixed"' in modelopt.read_text():
        return "modelopt_mixed"
    return method


def engine_config_text(args: argparse.Namespace, quant: dict, tp: int, pp: int, release: gb10.Release) -> str:
    """The part of VllmConfig's text the checks read; kv_cache_dtype only where the release prints it."""
    text = (f"model='{args.model}', quantization={resolved_quantization(quant, release)}, "
            f"tensor_parallel_size={tp}, pipeline_parallel_size={pp}, enforce_eager={args.enforce_eager}")
    config_py = release.root / "config" / "vllm.py"
    if config_py.is_file() and "kv_cache_dtype={" in config_py.read_text():
        text += f", kv_cache_dtype={getattr(args, 'kv_cache_dtype', None) or 'auto'}"
    return text


def attention_lines(config: dict, args: argparse.Namespace, release: gb10.Release) -> list[str]:
    """The attention and KV-cache lines, in the release's own words: a quantized KV cache is announced by the
    cache config; MiMo's model file logs its DiffKV choice; other models log the platform's choice (an
    explicit --attention-backend as the enum; nothing here when none was requested)."""
    lines = []
    kv_dtype = str(getattr(args, "kv_cache_dtype", None) or "auto")
    if kv_dtype.startswith("fp8"):
        line = release.log_line(["config/cache.py"], r"data type to store kv cache.*Meanwhile", kv_dtype)
        lines += [line] if line else []
    requested = getattr(args, "attention_backend", None)
    requested = getattr(requested, "name", requested)
    arch = (config.get("architectures") or [""])[0]
    if arch.startswith("MiMoV2"):
        files = [f for f in gb10.MIMO_FILES if (release.root / f).is_file()]
        line = release.log_line(files, r"for attention\.$", str(requested or "TRITON_ATTN_DIFFKV"))
        lines += [line] if line else []
    elif requested:
        line = release.log_line(["platforms/cuda.py"], r"^Using %s backend\.$", f"AttentionBackendEnum.{requested}")
        lines += [line] if line else []
    return lines


def kernel_choice(quant: dict, requested: str, fault: dict, release: gb10.Release) -> tuple[list[str], str | None]:
    """(log lines, emulated garbage or None): the kernels this release binds on GB10 for the checkpoint, as
    gb10.py judges them from the release's source, with the lines the release itself logs for them. The
    `wrong_backend` fault is the only switch here; everything else follows the release."""
    method = quant.get("quant_method", "")
    lines: list[str] = []
    garbage = None
    if method == "compressed-tensors":
        backend, lines = gb10.wna16(release, requested)  # raises gb10.ReleaseError where the release refuses
        if "wrong_backend" in fault:  # what the release binds for the other request, in its own lines
            backend, lines = gb10.wna16(release, "marlin" if requested == "triton" else "triton")
        if backend == "MARLIN":
            garbage = " " + " ".join(["foss"] * 64)  # seed 000: the Marlin WNA16 MoE kernel on GB10
    elif method == "modelopt":
        detected = release.log_line([gb10.MODELOPT], r"^Detected ModelOpt NVFP4 checkpoint", "MIXED_PRECISION")
        lines += [detected] if detected else []  # 0.30 dropped this warning
        if gb10.mxfp8_linear_dispatch(release):
            files = release.files("model_executor/kernels/**/*.py") + release.files(
                "model_executor/layers/quantization/**/*.py")
            line = release.log_line(files, r"^Using %s for MXFP8 GEMM", "FlashInferCutlassMxfp8LinearKernel") or \
                release.log_line(files, r"^Using %s backend for MXFP8 GEMM", "flashinfer-cutlass")  # <= 0.19
            lines += [line] if line else []
        chosen = "MARLIN" if requested in ("marlin", "auto") else requested.upper()
        if "wrong_backend" in fault:
            chosen = "FLASHINFER_CUTLASS" if chosen == "MARLIN" else "MARLIN"
        moe_line = gb10.nvfp4_moe_line(release, chosen)
        lines += [moe_line] if moe_line else []
        if chosen == "MARLIN":
            warning = release.log_line(["model_executor/layers/quantization/utils/marlin_utils_fp4.py"],
                                       r"Weight-only FP4 compression will be used")
            lines += [warning] if warning else []
        garbage, _why = gb10.mimo_outcome(release)  # raises gb10.ReleaseError where the loader refuses
    return lines, garbage


# ----------------------------------------------------------------------------------------- weights
def shard_files(model: Path) -> list[str]:
    index = model / "model.safetensors.index.json"
    if index.exists():
        return sorted(set(json.loads(index.read_text())["weight_map"].values()))
    single = model / "model.safetensors"
    if single.exists():
        return ["model.safetensors"]
    raise RuntimeError(f"Cannot find any model weights with `{model}`")


def load_shards(model_dir: str, files: list[str], rank: int, world: int, fault: dict) -> dict:
    """What one rank does on its own node: open and read every shard (vLLM's default loader)."""
    from safetensors import safe_open  # imported here: this runs inside the Ray worker process

    if "crash_on_load" in fault and rank == world - 1:
        os._exit(1)  # the worker process dies, as a CUDA fault or the OOM killer would
    start = time.monotonic()
    h = hashlib.sha256()
    nbytes = 0
    slow = float(fault["slow_load"] or 30) if "slow_load" in fault else 0.0
    for done, name in enumerate(files, 1):
        if slow:  # a slow disk: the time is spent shard by shard, as vLLM's loader spends it
            time.sleep(slow / len(files))
        path = Path(model_dir) / name
        with safe_open(str(path), framework="numpy") as f:  # validates header framing and buffer length
            n_tensors = len(list(f.keys()))
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 20):
                h.update(chunk)
                nbytes += len(chunk)
        if n_tensors == 0:
            raise RuntimeError(f"{path}: no tensors")
        if rank == 0:  # vLLM's tqdm bar, printed by rank 0 and forwarded by Ray with the worker's prefix
            took = time.monotonic() - start
            print(f"Loading safetensors checkpoint shards: {100 * done // len(files):3d}% Completed | "
                  f"{done}/{len(files)} [00:{int(took):02d}<00:00]", file=sys.stderr, flush=True)
    return {"rank": rank, "bytes": nbytes, "sha256": h.hexdigest(), "seconds": time.monotonic() - start}


# vllm/ray/ray_env.py: the driver's variables that vLLM's Ray executor copies to every worker (through
# update_environment_variables): these prefixes and PYTHONHASHSEED, less the names listed in
# $VLLM_CONFIG_ROOT/ray_non_carry_over_env_vars.json and the worker-specific ones.
RAY_ENV_PREFIXES = ("VLLM_", "LMCACHE_", "NCCL_", "UCX_", "HF_", "HUGGING_FACE_")
WORKER_SPECIFIC_ENV_VARS = {"VLLM_HOST_IP", "VLLM_HOST_PORT", "LOCAL_RANK", "CUDA_VISIBLE_DEVICES"}


def env_vars_to_copy() -> dict[str, str]:
    # Where the exclusion list is read: VLLM_CONFIG_ROOT as the release's own envs.py computes it (its
    # default follows XDG_CONFIG_HOME), so a wrapper that writes the list elsewhere is caught here.
    source = VllmSource.of_image()
    envs = source.native_module("vllm.envs") if source is not None else None
    if envs is None:
        raise RuntimeError("the image has no vllm/envs.py to read VLLM_CONFIG_ROOT from")
    path = os.path.join(envs.environment_variables["VLLM_CONFIG_ROOT"](), "ray_non_carry_over_env_vars.json")
    excluded: set[str] = set()
    if os.path.exists(path):
        try:
            with open(path) as fh:
                excluded = set(json.load(fh))
        except json.JSONDecodeError:
            log(f"Failed to parse {path}. Using an empty set for non-carry-over env vars.", "EngineCore_DP0",
                "WARNING", "ray_env.py:1")
    names = {n for n in os.environ if n.startswith(RAY_ENV_PREFIXES)} | {"PYTHONHASHSEED"}
    names -= excluded | WORKER_SPECIFIC_ENV_VARS
    log(f"Env var prefixes to copy: {sorted(RAY_ENV_PREFIXES)}", "EngineCore_DP0", where="ray_env.py:2")
    log(f"Copying the following environment variables to workers: {sorted(n for n in names if n in os.environ)}",
        "EngineCore_DP0", where="ray_env.py:3")
    if excluded:
        log(f"RAY_NON_CARRY_OVER_ENV_VARS from config: {excluded}", "EngineCore_DP0", where="ray_env.py:4")
    return {n: os.environ[n] for n in names if n in os.environ}


class Engine:
    """Ray placement + the rank workers. Keeps the bundles reserved while the server runs."""

    def __init__(self, args: argparse.Namespace, model: Path, files: list[str], fault: dict,
                 device_error: tuple[str, str]) -> None:
        import ray
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        self.ray = ray
        self.world = args.tensor_parallel_size * args.pipeline_parallel_size
        ray.init(address=os.environ.get("RAY_ADDRESS", "auto"), logging_level="ERROR",
                 log_to_driver=True, runtime_env={"env_vars": {"SPARKFLEET_SIM_FAULT":
                                                               os.environ.get("SPARKFLEET_SIM_FAULT", "")}})
        log("Ray is already initialized. Skipping Ray initialization.", "EngineCore_DP0", where="ray_utils.py:1")
        log("No current placement group found. Creating a new placement group.", "EngineCore_DP0",
            where="ray_utils.py:2")
        gpus = int(ray.cluster_resources().get("GPU", 0))
        if self.world > gpus:
            log(f"Tensor parallel size ({self.world}) exceeds available GPUs ({gpus}). This may result in Ray "
                "placement group allocation failures.", "EngineCore_DP0", "WARNING", "ray_utils.py:3")
        specs = [{"GPU": 1.0, "CPU": 0.0}] * self.world
        strategy = json.loads(os.environ.get("VLLM_DISTRIBUTED_EXECUTOR_CONFIG", "{}")).get(
            "placement_group_strategy", "PACK")
        self.pg = placement_group(specs, strategy=strategy)
        waited, limit = 0, float(os.environ.get("SPARKFLEET_SIM_PG_TIMEOUT_S", "1800"))
        while not self.pg.wait(10):
            waited += 10
            log(f"Waiting for creating a placement group of specs for {waited} seconds. specs={specs}. Check "
                "`ray status` and `ray list nodes` to see if you have enough resources, and make sure the IP "
                "addresses used by ray cluster are the same as VLLM_HOST_IP environment variable specified in "
                "each node if you are running on a multi-node.", "EngineCore_DP0", where="ray_utils.py:4")
            if waited >= limit:
                raise ValueError("Cannot provide a placement group of "
                                 f"{specs=} within {limit} seconds.")
        log("Using the existing placement group", "EngineCore_DP0", where="ray_utils.py:5")
        if self.world > 1:
            log(f"tensor_parallel_size={self.world} is bigger than a reserved number of GPUs (1 GPUs) in a node "
                "ip. Tensor parallel workers can be spread out to 2+ nodes which can degrade the performance "
                "unless you have fast interconnect across nodes, like Infiniband.", "EngineCore_DP0", "WARNING",
                "ray_utils.py:6")

        @ray.remote(num_gpus=1, num_cpus=0, max_restarts=0)
        class RayWorkerProc:
            def node_ip(self) -> str:
                return ray.util.get_node_ip_address()

            def load(self, model_dir, files, rank, world, fault, device_error):
                worker_device_check(rank, ray.util.get_node_ip_address(), device_error)
                return load_shards(model_dir, files, rank, world, fault)

            def ping(self) -> bool:
                return True

            def update_environment_variables(self, env: dict) -> list:
                os.environ.update(env)
                return sorted(env)

        self.workers = [
            RayWorkerProc.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
                placement_group=self.pg, placement_group_bundle_index=i)).remote()
            for i in range(self.world)
        ]
        self.ips = ray.get([w.node_ip.remote() for w in self.workers])
        copied = env_vars_to_copy()
        ray.get([w.update_environment_variables.remote(copied) for w in self.workers])
        tp = args.tensor_parallel_size
        for rank, ip in enumerate(self.ips):
            log(f"rank {rank} in world size {self.world} is assigned as DP rank 0, PP rank {rank // tp}, "
                f"PCP rank 0, TP rank {rank % tp}, EP rank {rank % tp}, EPLB rank 0",
                f"RayWorkerProc pid={PID}, ip={ip}", where="parallel_state.py:1")
        log("vLLM is using nccl==2.27.7", "EngineCore_DP0", where="pynccl.py:1")
        self.model, self.files, self.fault, self.device_error = str(model), files, fault, device_error

    def load_weights(self) -> list[dict]:
        refs = [w.load.remote(self.model, self.files, r, self.world, self.fault, self.device_error)
                for r, w in enumerate(self.workers)]
        results = []
        for rank, ref in enumerate(refs):
            try:
                results.append(self.ray.get(ref))
            except self.ray.exceptions.RayTaskError as exc:  # the worker raised (no GPU on its node...)
                cause = getattr(exc, "cause", None) or exc
                log(f"RayWorkerProc rank={rank} on {self.ips[rank]} failed: {type(cause).__name__}: {cause}",
                    "EngineCore_DP0", "ERROR", "ray_executor.py:2")
                raise (cause if isinstance(cause, Exception) else RuntimeError(str(cause))) from None
            except self.ray.exceptions.RayActorError:
                log(f"RayWorkerProc rank={rank} died unexpectedly, shutting down executor.", "EngineCore_DP0",
                    "ERROR", "ray_executor.py:1")
                raise
        return results

    def watch(self, on_death) -> None:
        def loop() -> None:
            while True:
                time.sleep(5)
                for rank, w in enumerate(self.workers):
                    try:
                        self.ray.get(w.ping.remote(), timeout=60)
                    except Exception:  # noqa: BLE001 (any failure of a rank ends the engine, as in vLLM)
                        log(f"RayWorkerProc rank={rank} died unexpectedly, shutting down executor.",
                            "EngineCore_DP0", "ERROR", "ray_executor.py:1")
                        on_death()
                        return

        threading.Thread(target=loop, daemon=True).start()


# --------------------------------------------------------------------------------------------- answers
CANNED = [
    (re.compile(r"capital of france", re.I), " Paris. It is the largest city in France and sits on the Seine."),
    (re.compile(r"12\s*[x×*]\s*7", re.I), " 12 × 7 = 84."),
    (re.compile(r"say hello", re.I), "Hey there! 👋 How's it going?"),
    (re.compile(r"法国的首都"), "法国的首都是巴黎。巴黎也是法国最大的城市，位于塞纳河畔。"),
    (re.compile(r"def fibonacci\(n\):"),
     "\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n"),
]
GENERIC = " That is a good question. Here is a short, clear answer based on what I know."
SOUP = " あるい ייך *\0 あるい ייך ꧁ ḁ あるい ייך"


def answer(prompt: str, max_tokens: int, fault: dict, emulated: str | None) -> str:
    """The completion: a fault switch first, then what GB10 would compute (gb10.py), then the canned answer."""
    if "degenerate" in fault:
        return " " + " ".join(["foss"] * max(1, max_tokens))
    if "script_soup" in fault:
        return SOUP
    if emulated:
        return "".join(re.findall(r"\s*\S+", emulated)[: max(1, max_tokens)])
    text = next((canned for pattern, canned in CANNED if pattern.search(prompt)), GENERIC)
    words = re.findall(r"\s*\S+", text)
    return "".join(words[: max(1, max_tokens)])


class Api(BaseHTTPRequestHandler):
    server_version = "uvicorn"
    state: typing.ClassVar[dict] = {}

    def log_message(self, fmt: str, *args) -> None:
        uvicorn(f'{self.client_address[0]}:{self.client_address[1]} - "{self.requestline}" {args[1]}')

    def reply(self, code: int, body: dict | str | None = None, ctype: str = "application/json") -> None:
        data = b"" if body is None else (body if isinstance(body, str) else json.dumps(body)).encode()
        self.send_response(code)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def authorised(self) -> bool:
        keys = self.state["api_keys"]
        if not keys or not self.path.startswith("/v1"):
            return True
        if self.headers.get("Authorization", "") in {f"Bearer {key}" for key in keys}:
            return True
        self.reply(401, {"error": "Unauthorized"})
        return False

    def do_GET(self) -> None:
        if self.path == "/health":
            return self.reply(200)
        if not self.authorised():
            return None
        if self.path == "/v1/models":
            s = self.state
            return self.reply(200, {"object": "list", "data": [
                {"id": s["served"], "object": "model", "owned_by": "vllm", "root": s["model"],
                 "max_model_len": s["max_model_len"], "created": int(s["started"])}]})
        if self.path == "/metrics":
            s = self.state
            text = (f'vllm:num_requests_running{{model_name="{s["served"]}"}} 0.0\n'
                    f'vllm:request_success_total{{model_name="{s["served"]}"}} {s["requests"]}.0\n')
            return self.reply(200, text, "text/plain; version=0.0.4")
        return self.reply(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        if not self.authorised():
            return None
        try:
            req = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))) or b"{}")
        except json.JSONDecodeError as exc:
            return self.reply(400, {"error": {"message": f"invalid JSON: {exc}", "type": "BadRequestError"}})
        s = self.state
        if req.get("model") not in (s["served"], s["model"]):
            return self.reply(404, {"error": {"message": f"The model `{req.get('model')}` does not exist.",
                                              "type": "NotFoundError", "code": 404}})
        max_tokens = int(req.get("max_tokens") or 16)
        s["requests"] += 1
        created = int(time.time())
        if self.path == "/v1/completions":
            text = answer(str(req.get("prompt", "")), max_tokens, s["fault"], s["emulated"])
            return self.reply(200, {"id": f"cmpl-{s['requests']}", "object": "text_completion",
                                    "created": created, "model": s["served"],
                                    "choices": [{"index": 0, "text": text, "finish_reason": "length"}]})
        if self.path == "/v1/chat/completions":
            msgs = req.get("messages") or [{}]
            text = answer(str(msgs[-1].get("content", "")), max_tokens, s["fault"], s["emulated"]).strip()
            return self.reply(200, {"id": f"chatcmpl-{s['requests']}", "object": "chat.completion",
                                    "created": created, "model": s["served"],
                                    "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                                 "finish_reason": "stop"}]})
        return self.reply(404, {"detail": "Not Found"})


def serve(args: argparse.Namespace, parser, source: VllmSource) -> int:
    fault = faults()
    if getattr(args, "model_tag", None):
        args.model = args.model_tag
    served = (args.served_model_name or [args.model])[0]
    tp = int(args.tensor_parallel_size or 1)
    pp = int(args.pipeline_parallel_size or 1)
    max_model_len = args.max_model_len if isinstance(args.max_model_len, int) and args.max_model_len > 0 else 32768
    host = args.host or "0.0.0.0"  # noqa: S104 (vLLM binds every interface without --host)
    log(f"vLLM server version {VERSION}, serving model {args.model}", where="utils.py:1")
    non_default = {k: v for k, v in vars(args).items()
                   if k not in ("subparser", "dispatch_function") and v != parser.get_default(k)}
    log(f"non-default args: {non_default}", where="utils.py:2")
    device_error = source.device_error() or ("RuntimeError", "Failed to infer device type")
    create_engine_config(args, parser, source, device_error)
    model = Path(args.model)
    config = json.loads((model / "config.json").read_text())
    quant = config.get("quantization_config", {})
    log(f"Resolved architecture: {config.get('architectures', ['?'])[0]}", where="model.py:1")
    log(f"Using max model len {max_model_len}", where="model.py:2")
    release = gb10.Release(source.root)
    log(f"Initializing a V1 LLM engine (v{VERSION}) with config: {engine_config_text(args, quant, tp, pp, release)}",
        "EngineCore_DP0", where="core.py:1")
    source.proc = "EngineCore_DP0"
    source.check_env_choices()  # the engine core reads its VLLM_* variables (envs.enable_envs_cache)
    backend_lines, emulated = kernel_choice(quant, args.moe_backend or "auto", fault, release)
    backend_lines += attention_lines(config, args, release)
    for line in backend_lines:
        log(line, "EngineCore_DP0", where="quantization.py:1")
    if args.distributed_executor_backend != "ray" and tp * pp > 1:
        raise ValueError("stand-in: multi-node runs need --distributed-executor-backend ray")
    files = shard_files(model)
    args.tensor_parallel_size, args.pipeline_parallel_size = tp, pp
    engine = Engine(args, model, files, fault, device_error)
    start = time.monotonic()
    log(f"Starting to load model {args.model}...", "EngineCore_DP0", where="gpu_model_runner.py:1")
    results = engine.load_weights()
    took = time.monotonic() - start
    n = len(files)
    log(f"Loading safetensors checkpoint shards: 100% Completed | {n}/{n} [00:{int(took):02d}<00:00]",
        "EngineCore_DP0", where="default_loader.py:1")
    log(f"Loading weights took {took:.2f} seconds", "EngineCore_DP0", where="default_loader.py:2")
    gib = results[0]["bytes"] / 2**30
    log(f"Model loading took {gib:.4f} GiB memory and {took:.6f} seconds", "EngineCore_DP0",
        where="gpu_model_runner.py:2")
    digests = {r["sha256"] for r in results}
    if len(digests) != 1:
        raise RuntimeError(f"ranks read different weights: {sorted(digests)}")
    log("Available KV cache memory: 85.31 GiB", "EngineCore_DP0", where="gpu_worker.py:1")
    tokens = f"{1234567:,}"
    if VTUPLE >= (0, 30):
        log(f"GPU KV cache size: {tokens} tokens", "EngineCore_DP0", where="kv_cache_utils.py:1")
    else:
        log(f"GPU KV cache size: {tokens} tokens", "EngineCore_DP0", where="kv_cache_utils.py:1")
        log(f"Maximum concurrency for {max_model_len:,} tokens per request: 37.68x", "EngineCore_DP0",
            where="kv_cache_utils.py:2")
    log(f"init engine (profile, create kv cache, warmup model) took {time.monotonic() - start:.2f} s",
        "EngineCore_DP0", where="core.py:2")

    api_keys = args.api_key or ([os.environ["VLLM_API_KEY"]] if os.environ.get("VLLM_API_KEY") else [])
    Api.state = {"served": served, "model": args.model, "max_model_len": max_model_len,
                 "started": time.time(), "requests": 0, "fault": fault, "emulated": emulated,
                 "api_keys": [api_keys] if isinstance(api_keys, str) else list(api_keys)}
    httpd = ThreadingHTTPServer((host, args.port), Api)
    engine.watch(lambda: os._exit(1))
    log(f"Starting vLLM server on http://{host}:{args.port}", where="api_server.py:2")
    log("Available routes are:", where="launcher.py:1")
    for route in ("/health", "/v1/models", "/v1/completions", "/v1/chat/completions", "/metrics"):
        log(f"Route: {route}, Methods: {'POST' if 'completions' in route else 'GET'}", where="launcher.py:2")
    uvicorn(f"Started server process [{PID}]")
    uvicorn("Waiting for application startup.")
    uvicorn("Application startup complete.")
    uvicorn(f"Uvicorn running on http://{host}:{args.port} (Press CTRL+C to quit)")
    httpd.serve_forever()
    return 0


def read_cli(argv: list[str], root: Path | None = None):
    """(namespace, serve parser, source): `vllm ARGV` parsed as the image's release parses it. An argparse
    error exits with code 2 and vLLM's message, as `vllm` itself does."""
    source = VllmSource(root, argv) if root is not None else VllmSource.of_image(argv)
    if source is None or source.module("vllm.engine.arg_utils") is None:
        print("stand-in: no vLLM source in this image (vllm/engine/arg_utils.py): cannot judge a command line "
              "as its release would", file=sys.stderr, flush=True)
        raise SystemExit(1)
    top, serve_parser = source.build_cli()
    args = top.parse_args(argv)
    if getattr(args, "subparser", None) != "serve":
        top.print_help()
        raise SystemExit(0)
    return args, serve_parser, source


def main(argv: list[str]) -> int:
    if argv[:1] in (["--version"], ["-v"]):
        print(VERSION)
        return 0
    args, parser, source = read_cli(argv)
    try:
        return serve(args, parser, source)
    except StartupError as exc:
        api_server_failure(exc, source)
        return 1
    except gb10.ReleaseError as exc:  # the release refuses the configuration while it builds the model
        log(f"EngineCore failed to start. ValueError: {exc}", "EngineCore_DP0", "ERROR", "core.py:3")
        log("RuntimeError: Engine core initialization failed. See root cause above.", level="ERROR",
            where="api_server.py:3")
        return 1
    except Exception as exc:  # noqa: BLE001 (reported the way vLLM's engine reports a failed start)
        log(f"EngineCore failed to start. {type(exc).__name__}: {exc}", "EngineCore_DP0", "ERROR", "core.py:3")
        log("RuntimeError: Engine core initialization failed. See root cause above.", level="ERROR",
            where="api_server.py:3")
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
