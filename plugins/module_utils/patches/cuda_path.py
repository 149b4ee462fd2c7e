# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""Which code runs on a DGX Spark: the GB10 facts, and a walker that follows only the branches they allow.

The patch detectors judge structure, not text. A release can mention the right name in a branch that never
runs on CUDA (vLLM 0.24 reads ``kernel_config.moe_backend`` only under ``current_platform.is_rocm()``), so
each detector finds its function, walks its if/elif/else tree under these facts and looks only at what is
reached:

  * the platform is CUDA: ``is_cuda()`` and ``is_cuda_alike()`` are True; ``is_rocm()``, ``is_xpu()``,
    ``is_cpu()``, ``is_tpu()`` (and the other platforms) are False;
  * the device capability is 12.1: ``has_device_capability(100)`` is True, ``is_device_capability(100)``
    is False, ``is_device_capability_family(120)`` is True (vLLM compares ``major * 10 + minor``);
  * anything else a detector knows (``check_moe_marlin_supports_layer`` is True for the layers we serve,
    the ``quant_algo`` of a layer, the ``--moe-backend`` asked for) comes in through ``Facts``.

What cannot be known (a local computed from the checkpoint, an imported helper) is UNKNOWN, and the walker
follows both branches of a test it cannot decide. Standard library only, Python 3.9.
"""

from __future__ import annotations

import ast
from collections import namedtuple

GB10_CAPABILITY = (12, 1)
PLATFORM = {"is_rocm": False, "is_cuda": True, "is_cuda_alike": True, "is_xpu": False, "is_cpu": False,
            "is_tpu": False, "is_hpu": False, "is_neuron": False, "is_out_of_tree": False, "is_zen_cpu": False}
CAPABILITY_TESTS = ("has_device_capability", "is_device_capability", "is_device_capability_family")


class _Unknown:
    def __repr__(self):
        return "UNKNOWN"


UNKNOWN = _Unknown()

# A way out of the walked statements: kind is "return", "raise", "continue" or "break"; path is the
# decisions taken on the way, as (If node, "body" or "orelse", decided) with decided False when the test
# could not be evaluated.
Exit = namedtuple("Exit", "kind node path facts")


class Facts:
    """What is known while walking: the GB10 platform, local names, and the values of some calls.

    ``calls`` maps a callee's name (``f`` in ``f(...)`` or ``x.f(...)``) to its value, or to a function
    ``(call_node, facts) -> value``. ``isinstance_true`` names the classes the object under test is an
    instance of (``isinstance(layer, (LinearBase, X))`` is True when one of them is named)."""

    def __init__(self, module=None, env=None, calls=None, isinstance_true=()):
        self.module = module
        self.env = dict(env or {})
        self.calls = dict(calls or {})
        self.isinstance_true = frozenset(isinstance_true)

    def copy(self):
        return Facts(self.module, self.env, self.calls, self.isinstance_true)


# ------------------------------------------------------------------------------------------ evaluating
def _capability(value):
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, tuple) and len(value) == 2 and all(isinstance(v, int) for v in value):
        return value[0] * 10 + value[1]
    return None


def _is_platform(node):
    return (isinstance(node, ast.Name) and node.id == "current_platform") or (
        isinstance(node, ast.Attribute) and node.attr == "current_platform")


def callee(call):
    """The name a call is made by: ``f`` for ``f(...)``, ``m`` for ``x.m(...)``; None otherwise."""
    if isinstance(call.func, ast.Name):
        return call.func.id
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    return None


def module_constant(module, name):
    """The literal value of a module-level ``NAME = <literal>`` (a dict with literal keys keeps its keys)."""
    for node in getattr(module, "body", ()):
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets = [node.target]
        else:
            continue
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            try:
                return ast.literal_eval(node.value)
            except ValueError:
                if isinstance(node.value, ast.Dict) and all(
                        isinstance(k, ast.Constant) for k in node.value.keys):
                    return {k.value: UNKNOWN for k in node.value.keys}
                return UNKNOWN
    return UNKNOWN


def _compare(op, a, b):
    table = {ast.Eq: lambda: a == b, ast.NotEq: lambda: a != b, ast.Is: lambda: a is b,
             ast.IsNot: lambda: a is not b, ast.In: lambda: a in b, ast.NotIn: lambda: a not in b,
             ast.Lt: lambda: a < b, ast.LtE: lambda: a <= b, ast.Gt: lambda: a > b, ast.GtE: lambda: a >= b}
    try:
        return table[type(op)]() if type(op) in table else UNKNOWN
    except TypeError:
        return UNKNOWN


def value(node, facts):
    """The value of an expression under the facts, or UNKNOWN."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in facts.env:
            return facts.env[node.id]
        return module_constant(facts.module, node.id)
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        items = [value(e, facts) for e in node.elts]
        return UNKNOWN if any(i is UNKNOWN for i in items) else tuple(items)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        v = value(node.operand, facts)
        return UNKNOWN if v is UNKNOWN else not v
    if isinstance(node, ast.BoolOp):
        is_or = isinstance(node.op, ast.Or)
        seen_unknown = False
        v = UNKNOWN
        for operand in node.values:
            v = value(operand, facts)
            if v is UNKNOWN:
                seen_unknown = True
            elif bool(v) == is_or:
                return v  # short-circuit: a known True in an `or`, a known False in an `and`
        return UNKNOWN if seen_unknown else v
    if isinstance(node, ast.Compare):
        left = value(node.left, facts)
        result = True
        for op, right_node in zip(node.ops, node.comparators):
            right = value(right_node, facts)
            if left is UNKNOWN or right is UNKNOWN:
                return UNKNOWN
            r = _compare(op, left, right)
            if r is UNKNOWN or not r:
                return r
            left = right
        return result
    if isinstance(node, ast.IfExp):
        t = value(node.test, facts)
        if t is UNKNOWN:
            return UNKNOWN
        return value(node.body if t else node.orelse, facts)
    if isinstance(node, ast.Call):
        return _call_value(node, facts)
    return UNKNOWN


def _call_value(node, facts):
    name = callee(node)
    if isinstance(node.func, ast.Attribute) and _is_platform(node.func.value):
        if name in PLATFORM:
            return PLATFORM[name]
        if name in CAPABILITY_TESTS and node.args:
            want = _capability(value(node.args[0], facts))
            if want is None:
                return UNKNOWN
            have = _capability(GB10_CAPABILITY)
            if name == "has_device_capability":
                return have >= want
            if name == "is_device_capability":
                return have == want
            return have // 10 == want // 10
        return UNKNOWN
    if isinstance(node.func, ast.Attribute) and name in ("lower", "upper", "strip") and not node.args:
        v = value(node.func.value, facts)
        return getattr(v, name)() if isinstance(v, str) else UNKNOWN
    if name in facts.calls:
        known = facts.calls[name]
        return known(node, facts) if callable(known) else known
    if name == "isinstance" and len(node.args) == 2:
        kinds = node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]]
        names = {k.id if isinstance(k, ast.Name) else getattr(k, "attr", None) for k in kinds}
        return bool(names & facts.isinstance_true)
    return UNKNOWN


# --------------------------------------------------------------------------------------------- walking
MAX_PATHS = 256


def _merge(states):
    """One state standing for many: names that differ become UNKNOWN, the path is the common prefix."""
    facts = states[0][0].copy()
    for other, _unused in states[1:]:
        for key in set(facts.env) | set(other.env):
            if facts.env.get(key, UNKNOWN) is not other.env.get(key, UNKNOWN) and \
                    facts.env.get(key, UNKNOWN) != other.env.get(key, UNKNOWN):
                facts.env[key] = UNKNOWN
    path = states[0][1]
    for _unused, p in states[1:]:
        n = 0
        while n < min(len(path), len(p)) and path[n] == p[n]:
            n += 1
        path = path[:n]
    return [(facts, path)]


def _assigned_names(stmts):
    out = set()
    for st in stmts:
        for node in ast.walk(st):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                out.add(node.id)
    return out


def walk(stmts, facts, path=()):
    """Follow ``stmts`` under ``facts``. Returns (exits, open_ends): the Exit records reached, and the
    (facts, path) states that run past the last statement."""
    states = [(facts, tuple(path))]
    exits = []
    for st in stmts:
        following = []
        for f, p in states:
            more_exits, ends = _step(st, f, p)
            exits.extend(more_exits)
            following.extend(ends)
        states = _merge(following) if len(following) > MAX_PATHS else following
        if not states:
            break
    return exits, states


def _step(st, facts, path):
    if isinstance(st, ast.If):
        decided = value(st.test, facts)
        exits, ends = [], []
        for branch, stmts, runs in (("body", st.body, decided is UNKNOWN or bool(decided)),
                                    ("orelse", st.orelse, decided is UNKNOWN or not decided)):
            if runs:
                e, o = walk(stmts, facts.copy(), path + ((st, branch, decided is not UNKNOWN),))
                exits.extend(e)
                ends.extend(o)
        return exits, ends
    if isinstance(st, ast.Return):
        return [Exit("return", st, path, facts)], []
    if isinstance(st, ast.Raise):
        return [Exit("raise", st, path, facts)], []
    if isinstance(st, ast.Continue):
        return [Exit("continue", st, path, facts)], []
    if isinstance(st, ast.Break):
        return [Exit("break", st, path, facts)], []
    if isinstance(st, (ast.For, ast.AsyncFor, ast.While)):
        inside = facts.copy()
        for name in _assigned_names(st.body) | _assigned_names([st.target] if hasattr(st, "target") else []):
            inside.env[name] = UNKNOWN
        e, _unused = walk(st.body, inside, path)
        after = inside.copy()
        return [x for x in e if x.kind in ("return", "raise")], [(after, path)]
    if isinstance(st, (ast.With, ast.AsyncWith)):
        return walk(st.body, facts, path)
    if isinstance(st, ast.Try):
        exits, ends = walk(st.body + st.orelse, facts.copy(), path)
        for handler in st.handlers:
            e, o = walk(handler.body, facts.copy(), path)
            exits.extend(e)
            ends.extend(o)
        if st.finalbody and ends:
            finals = []
            for f, p in ends:
                e, o = walk(st.finalbody, f, p)
                exits.extend(e)
                finals.extend(o)
            ends = finals
        return exits, ends
    facts = facts.copy()
    if isinstance(st, ast.Assign):
        v = value(st.value, facts) if len(st.targets) == 1 and isinstance(st.targets[0], ast.Name) else UNKNOWN
        for name in _assigned_names(st.targets):
            facts.env[name] = v
    elif isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name):
        facts.env[st.target.id] = value(st.value, facts) if st.value is not None else UNKNOWN
    elif isinstance(st, (ast.AugAssign, ast.Delete, ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef)):
        for name in _assigned_names([st]):
            facts.env[name] = UNKNOWN
    return [], [(facts, path)]


def live_statements(stmts, facts):
    """Every statement (nested ones too) that is not inside a branch the facts rule out."""
    for st in stmts:
        yield st
        if isinstance(st, ast.If):
            decided = value(st.test, facts)
            if decided is UNKNOWN or decided:
                yield from live_statements(st.body, facts)
            if decided is UNKNOWN or not decided:
                yield from live_statements(st.orelse, facts)
        elif isinstance(st, ast.Try):
            for block in (st.body, st.orelse, st.finalbody, *(h.body for h in st.handlers)):
                yield from live_statements(block, facts)
        elif isinstance(st, (ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith)):
            yield from live_statements(st.body, facts)
            yield from live_statements(getattr(st, "orelse", []), facts)


def live_nodes(stmts, facts):
    """Every node of the live statements, not descending into nested function or class bodies."""
    for st in live_statements(stmts, facts):
        if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        todo = [c for c in ast.iter_child_nodes(st) if not isinstance(c, ast.stmt)]
        while todo:
            node = todo.pop()
            yield node
            todo.extend(ast.iter_child_nodes(node))


# ---------------------------------------------------------------------------------------- finding code
def functions(scope):
    """{name: def} of the functions defined directly in a module, class or function body."""
    return {n.name: n for n in getattr(scope, "body", ()) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def classes(module):
    return {n.name: n for n in module.body if isinstance(n, ast.ClassDef)}


def method(module, class_name, name):
    cls = classes(module).get(class_name)
    return functions(cls).get(name) if cls is not None else None


def bind(call, fn, facts):
    """Facts for walking ``fn`` called by ``call``: its parameters bound to the values of the arguments."""
    inner = Facts(facts.module, {}, facts.calls, facts.isinstance_true)
    params = [a.arg for a in fn.args.args]
    if params and params[0] in ("self", "cls"):
        params = params[1:]
    for name in params + [a.arg for a in fn.args.kwonlyargs]:
        inner.env[name] = UNKNOWN
    for name, arg in zip(params, call.args):
        inner.env[name] = value(arg, facts)
    for kw in call.keywords:
        if kw.arg is not None:
            inner.env[kw.arg] = value(kw.value, facts)
    return inner


def returned_call(exit_):
    """The name of what a ``return f(...)`` exit calls (the class it constructs), else None."""
    v = exit_.node.value if exit_.kind == "return" else None
    return callee(v) if isinstance(v, ast.Call) else None


def returns_none(exit_):
    v = exit_.node.value if exit_.kind == "return" else None
    return v is None or (isinstance(v, ast.Constant) and v.value is None)
