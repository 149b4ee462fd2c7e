"""TEST DOUBLE, emulation part: what a GB10 (CUDA, SM 12.1) would compute with the vLLM source in this image.

The stand-in cannot run kernels, so it judges the release's (possibly patched) Python source the way the
hardware would exercise it, and reports the outcome the field observed for each path (FIELD-NOTES §2,
seeds 000 and 004). Every rule here reads the STRUCTURE of the release's files: which branch runs when
`current_platform.is_rocm()` is False, which same-file function a condition calls and what it returns,
which dict maps a requested backend, which function splits a fused tensor. None of them looks for the
names that the collection's patches give their own functions or markers, and none imports the collection:
an upstream fix and our patch are judged by the same rules, and a patch that is present but wrong is
judged wrong.

The GB10 facts the rules assume (the hardware, not the release):
  * the platform is CUDA: is_cuda()/is_cuda_alike() are True; is_rocm/is_xpu/is_cpu/is_tpu are False;
  * Marlin supports Kimi-K2.5's WNA16 MoE layers (check_moe_marlin_supports_layer is True), and the
    FLASHINFER_TRTLLM WNA16 kernel does not run on SM 12.1, so a release that picks by priority binds
    MARLIN;
  * the Marlin WNA16 MoE kernel answers "foss foss foss" on GB10 (seed 000); the Triton one is coherent;
  * MXFP8 attention that falls through to UnquantizedLinearMethod answers "あるい…"; MXFP8 scales that
    never land (the checkpoint's `weight_scale_inv` unmatched) answer "ייך…"; a fused [Q|K|V] tensor chunked
    naively across TP ranks answers "*\\0…" (seed 004's three stages).

Log lines come from the release's own logger format strings (found in its source and rendered), so a
release that logs nothing for a fact prints nothing for it here either.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

CT_MOE = "model_executor/layers/quantization/compressed_tensors"
WNA16_ORACLE = "model_executor/layers/fused_moe/oracle/int_wna16.py"
ORACLE_BASE = "model_executor/layers/fused_moe/oracle/base.py"
MODELOPT = "model_executor/layers/quantization/modelopt.py"
MIMO_FILES = ("model_executor/models/mimo_v2.py", "model_executor/models/mimo_v2_flash.py")

PLATFORM = {"is_rocm": False, "is_xpu": False, "is_cpu": False, "is_tpu": False, "is_hpu": False,
            "is_neuron": False, "is_cuda": True, "is_cuda_alike": True}
GB10_TRUE_CALLS = {"check_moe_marlin_supports_layer"}
UNKNOWN = object()


class ReleaseError(Exception):
    """The release itself refuses the configuration (the message is the release's own)."""


class Release:
    """The vllm package directory of one image, parsed lazily."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._trees: dict[str, ast.Module | None] = {}

    def tree(self, rel: str) -> ast.Module | None:
        if rel not in self._trees:
            path = self.root / rel
            try:
                self._trees[rel] = ast.parse(path.read_text()) if path.is_file() else None
            except SyntaxError:
                self._trees[rel] = None
        return self._trees[rel]

    def files(self, pattern: str) -> list[str]:
        return sorted(str(p.relative_to(self.root)) for p in self.root.glob(pattern))

    # ---------------------------------------------------------------------------------- log formats
    def log_format(self, rels, anchor: re.Pattern) -> ast.AST | None:
        """The first logger call's format (a literal or an f-string) in these files that matches anchor."""
        for rel in rels:
            tree = self.tree(rel)
            for node in ast.walk(tree) if tree else ():
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args and \
                        node.func.attr.split("_")[0] in ("info", "warning", "debug") and \
                        anchor.search(template(node.args[0]) or ""):
                    return node.args[0]
                if isinstance(node, (ast.JoinedStr, ast.Constant)) and anchor.search(template(node) or ""):
                    return node
        return None

    def log_line(self, rels, anchor: str, *values) -> str | None:
        fmt = self.log_format(rels, re.compile(anchor))
        if fmt is None:
            return None
        return render(fmt, values[0] if len(values) == 1 and isinstance(values[0], dict) else values)


def template(node) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    return None


def render(node, values) -> str:
    """Fill a format: the %-placeholders of a literal from a tuple; the fields of an f-string in order from a
    tuple, or by their source text from a dict ({"backend.value": "TRITON"})."""
    if isinstance(node, ast.JoinedStr):
        it = iter(values if not isinstance(values, dict) else ())
        return "".join(v.value if isinstance(v, ast.Constant) else str(
            values.get(ast.unparse(v.value), "") if isinstance(values, dict) else next(it, ""))
            for v in node.values)
    text = node.value
    try:
        return text % tuple(values) if values else text
    except (TypeError, ValueError):  # a literal without placeholders ("Using fp8 data type ...")
        return text


# --------------------------------------------------------------------------------- a tiny evaluator
def _functions(tree) -> dict:
    return {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def _assignments(fn) -> dict:
    out = {}
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            out.setdefault(node.targets[0].id, node.value)
    return out


def _returned(fn):
    """The expression a simple function returns: the first return, looking into try bodies."""
    for st in fn.body:
        if isinstance(st, ast.Try):
            for inner in st.body:
                if isinstance(inner, ast.Return):
                    return inner.value
        if isinstance(st, ast.Return):
            return st.value
    return None


class Evaluator:
    """Evaluates a branch condition under the GB10 facts and the requested --moe-backend. Anything it cannot
    know is UNKNOWN; same-file helper functions are followed into."""

    def __init__(self, tree, fn, requested: str) -> None:
        self.funcs, self.locals, self.requested, self.depth = _functions(tree), _assignments(fn), requested, 0

    def ev(self, node):
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.BoolOp):
            vals = [self.ev(v) for v in node.values]
            if isinstance(node.op, ast.Or):
                if any(v is not UNKNOWN and v for v in vals):
                    return next(v for v in vals if v is not UNKNOWN and v)
                return UNKNOWN if UNKNOWN in vals else vals[-1]
            if any(v is not UNKNOWN and not v for v in vals):
                return False
            return UNKNOWN if UNKNOWN in vals else vals[-1]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            v = self.ev(node.operand)
            return UNKNOWN if v is UNKNOWN else not v
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            a, b = self.ev(node.left), self.ev(node.comparators[0])
            if a is UNKNOWN or b is UNKNOWN:
                return UNKNOWN
            op = node.ops[0]
            table = {ast.Eq: lambda: a == b, ast.NotEq: lambda: a != b, ast.In: lambda: a in b,
                     ast.NotIn: lambda: a not in b, ast.Is: lambda: a is b, ast.IsNot: lambda: a is not b}
            return table[type(op)]() if type(op) in table else UNKNOWN
        if isinstance(node, ast.Attribute):
            if node.attr == "moe_backend":
                return self.requested
            return UNKNOWN
        if isinstance(node, ast.Name):
            if node.id in self.locals and self.depth < 8:
                self.depth += 1
                try:
                    return self.ev(self.locals[node.id])
                finally:
                    self.depth -= 1
            return UNKNOWN
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            vals = [self.ev(e) for e in node.elts]
            return UNKNOWN if UNKNOWN in vals else tuple(vals)
        if isinstance(node, ast.Call):
            return self.call(node)
        return UNKNOWN

    def call(self, node):
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr in PLATFORM:
            return PLATFORM[f.attr]
        if isinstance(f, ast.Attribute) and f.attr in ("lower", "upper", "strip"):
            v = self.ev(f.value)
            return getattr(v, f.attr)() if isinstance(v, str) else UNKNOWN
        if isinstance(f, ast.Name):
            if f.id in GB10_TRUE_CALLS:
                return True
            if f.id == "str" and node.args:
                v = self.ev(node.args[0])
                return UNKNOWN if v is UNKNOWN else str(v)
            fn = self.funcs.get(f.id)
            if fn is not None and self.depth < 8:
                expr = _returned(fn)
                if expr is None:
                    return UNKNOWN
                saved, self.locals = self.locals, _assignments(fn)
                self.depth += 1
                try:
                    return self.ev(expr)
                finally:
                    self.locals, self.depth = saved, self.depth - 1
        return UNKNOWN


# ------------------------------------------------------------------------ compressed-tensors WNA16 MoE
def _returns_call_to(stmts, suffix: str) -> bool:
    for st in stmts:
        for node in ast.walk(st):
            if isinstance(node, ast.Return) and isinstance(node.value, ast.Call) and \
                    isinstance(node.value.func, ast.Name) and node.value.func.id.endswith(suffix):
                return True
    return False


def _literal_logs(stmts) -> list[str]:
    out = []
    for st in stmts:
        for node in ast.walk(st):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                    node.func.attr.startswith("info") and node.args and isinstance(node.args[0], ast.Constant) \
                    and isinstance(node.args[0].value, str) and node.args[0].value.startswith("Using "):
                out.append(node.args[0].value)
    return out


def wna16_method(rel: Release, requested: str) -> tuple[str, list[str]]:
    """("marlin" | "wna16", log lines): the MoE method the release binds on CUDA for a WNA16 checkpoint."""
    for path in rel.files(CT_MOE + "/**/*.py") + rel.files(CT_MOE + "/*.py"):
        tree = rel.tree(path)
        if tree is None:
            continue
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if not isinstance(node, ast.If):
                    continue
                marlin_else = _returns_call_to(node.orelse, "WNA16MarlinMoEMethod") and \
                    _returns_call_to(node.body, "WNA16MoEMethod")
                marlin_body = _returns_call_to(node.body, "WNA16MarlinMoEMethod") and \
                    _returns_call_to(node.orelse, "WNA16MoEMethod")
                if not (marlin_else or marlin_body):
                    continue
                taken = Evaluator(tree, fn, requested).ev(node.test)
                if taken is UNKNOWN:
                    taken = marlin_body  # the release's default on a platform Marlin supports
                marlin = bool(taken) == marlin_body
                return ("marlin" if marlin else "wna16"), _literal_logs(node.body if taken else node.orelse)
    # No Marlin method to choose (0.27 on): the one WNA16 method, and its own line where the release logs it.
    line = rel.log_line(rel.files(CT_MOE + "/**/*.py") + rel.files(CT_MOE + "/*.py"),
                        r"^Using CompressedTensorsWNA16MoEMethod$")
    return "wna16", [line] if line else []


def _oracle_mapping(tree) -> dict[str, str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict) and node.keys and all(
                isinstance(k, ast.Constant) and isinstance(k.value, str) for k in node.keys) and all(
                isinstance(v, ast.Attribute) for v in node.values):
            return {k.value: v.attr for k, v in zip(node.keys, node.values)}
    return {}


def _reads_request(fn) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr == "moe_backend" for n in ast.walk(fn))


def wna16_backend(rel: Release, method: str, requested: str) -> tuple[str, list[str]]:
    """(backend, log lines) of the chosen method. Raises ReleaseError where the release refuses the request."""
    tree = rel.tree(WNA16_ORACLE)
    method_files = rel.files(CT_MOE + "/**/*.py") + rel.files(CT_MOE + "/*.py")
    cls = re.compile(r"^class \w*WNA16%sMoEMethod\b" % ("Marlin" if method == "marlin" else ""), re.M)
    defining = [p for p in method_files if cls.search((rel.root / p).read_text())]
    uses_oracle = tree is not None and any("select_wna16_moe_backend(" in (rel.root / p).read_text()
                                           for p in defining)
    if not uses_oracle:
        if method == "marlin":
            line = rel.log_line(method_files, r"backend for WNA16 MoE", "Marlin", 32, 4)
            return "MARLIN", [line] if line else []
        return "TRITON", []
    select = _functions(tree).get("select_wna16_moe_backend")
    mapping = _oracle_mapping(tree)
    if requested != "auto" and select is not None and _reads_request(select) and mapping:
        if requested not in mapping:
            fmt = rel.log_format([WNA16_ORACLE], re.compile(r"is not supported for WNA16 MoE"))
            msg = render(fmt, (requested, list(mapping))) if fmt is not None else \
                f"moe_backend={requested!r} is not supported for WNA16 MoE"
            raise ReleaseError(msg)
        backend = mapping[requested]
    else:
        backend = "MARLIN"  # GB10: the first of the priority list that runs on SM 12.1
    line = rel.log_line([WNA16_ORACLE], r"WNA16 MoE backend\.$", {"backend.value": backend})
    if line is None:  # 0.34: one message for every oracle, in its base class
        fields = {"backend.value": backend, "self.name": "WNA16", "lora": "", "available": ""}
        line = rel.log_line([ORACLE_BASE], r"^Using \{\} \{\} MoE \{\}backend\{\}\.$", fields)
    return backend, [line] if line else []


def wna16(rel: Release, requested: str) -> tuple[str, list[str]]:
    """(backend, log lines) for a compressed-tensors WNA16 MoE checkpoint on GB10."""
    method, lines = wna16_method(rel, requested)
    backend, more = wna16_backend(rel, method, requested)
    return backend, lines + more


# ------------------------------------------------------------------------------------ ModelOpt MiMo
NVFP4_ORACLE = "model_executor/layers/fused_moe/oracle/nvfp4.py"
NVFP4_BACKENDS = ["FLASHINFER_TRTLLM", "FLASHINFER_CUTLASS", "CUTLASS", "MARLIN"]


def nvfp4_moe_line(rel: Release, backend: str) -> str | None:
    """The NvFp4 MoE backend line in the release's words: the oracle's own message (0.17-0.33), or the one
    message every oracle shares (0.34)."""
    line = rel.log_line([NVFP4_ORACLE], r"NvFp4 MoE backend out of potential backends",
                        {"backend.value": backend, "available_backend_strs": NVFP4_BACKENDS})
    if line is None:
        fields = {"backend.value": backend, "self.name": "NvFp4", "lora": "",
                  "available": " out of potential backends: %s" % NVFP4_BACKENDS}
        line = rel.log_line([ORACLE_BASE], r"^Using \{\} \{\} MoE \{\}backend\{\}\.$", fields)
    return line  # None: this release logs no NvFp4 MoE backend line


def mxfp8_linear_dispatch(rel: Release) -> bool:
    """Does the mixed-precision config give MXFP8 linear layers a quantized method?"""
    tree = rel.tree(MODELOPT)
    if tree is None:
        return False
    tables = set()
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else (
            node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None)
        if isinstance(target, ast.Name) and isinstance(node.value, ast.Dict) and any(
                isinstance(k, ast.Constant) and k.value == "MXFP8" for k in node.value.keys):
            tables.add(target.id)
    for cls in tree.body:
        if not (isinstance(cls, ast.ClassDef) and "MixedPrecision" in cls.name):
            continue
        for node in ast.walk(cls):
            if isinstance(node, ast.Compare) and any(
                    isinstance(c, ast.Constant) and c.value == "MXFP8" for c in [node.left, *node.comparators]):
                return True
            if isinstance(node, ast.Name) and node.id in tables:
                return True
    return False


def _mimo_tree(rel: Release):
    for rel_path in MIMO_FILES:
        tree = rel.tree(rel_path)
        if tree is not None:
            return rel_path, tree
    return None, None


def _load_loop(tree):
    """(class, load_weights, the `for name, loaded_weight in weights` loop) of the model class."""
    for cls in tree.body:
        if not isinstance(cls, ast.ClassDef):
            continue
        fn = _functions(cls).get("load_weights")
        if fn is None:
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.For) and isinstance(node.target, ast.Tuple) and \
                    [getattr(e, "id", None) for e in node.target.elts][:1] == ["name"]:
                return cls, fn, node
    return None, None, None


def _mentions(fn, needle: str) -> bool:
    return any(isinstance(n, ast.Constant) and isinstance(n.value, str) and needle in n.value for n in ast.walk(fn))


def scale_inv_lands(rel: Release) -> bool:
    """Does MiMo's loader rebind a checkpoint name ending in `weight_scale_inv` before it matches params?"""
    _unused, tree = _mimo_tree(rel)
    if tree is None:
        return False
    _unused, _unused, loop = _load_loop(tree)
    if loop is None:
        return False
    funcs = _functions(tree)
    for st in loop.body:
        if isinstance(st, ast.Assign) and [getattr(t, "id", None) for t in st.targets] == ["name"]:
            if _mentions(st.value, "_inv"):
                return True
            call = st.value
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in funcs and \
                    _mentions(funcs[call.func.id], "_inv"):
                return True
    return False


def _splits_qkv(fn) -> bool:
    """A function that cuts one tensor into Q, K and V parts and hands each to the shard loader."""
    shard_ids = any(isinstance(n, ast.Tuple) and [getattr(e, "value", None) for e in n.elts] == ["q", "k", "v"]
                    for n in ast.walk(fn))
    loads = any(isinstance(n, ast.Call) and getattr(n.func, "attr", getattr(n.func, "id", "")) == "weight_loader"
                for n in ast.walk(fn))
    cuts = any(isinstance(n, ast.Call) and getattr(n.func, "attr", "") in ("split", "narrow") for n in ast.walk(fn))
    return shard_ids and loads and cuts


def qkv_outcome(rel: Release) -> str:
    """How a plain [Q|K|V] fused qkv_proj lands on the ranks: "split", "naive" or "refused"."""
    _unused, tree = _mimo_tree(rel)
    if tree is None:
        return "naive"
    cls, _unused, loop = _load_loop(tree)
    if loop is None:
        return "naive"
    methods = {**_functions(tree), **_functions(cls)}
    seen: set[str] = set()

    def visit(node) -> str | None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Call):
                name = getattr(child.func, "attr", getattr(child.func, "id", None))
                fn = methods.get(name)
                if fn is not None and name not in seen:
                    seen.add(name)
                    if _splits_qkv(fn):
                        return "split"
                    inner = visit(fn)
                    if inner == "naive" and any(isinstance(n, ast.Raise) for n in ast.walk(fn)):
                        return "refused"  # a layout-aware loader that raises on a layout it does not expect
                    if inner:
                        return inner
            if isinstance(child, ast.Subscript) and isinstance(child.value, ast.Call) and \
                    getattr(child.value.func, "attr", "") == "chunk":
                return "naive"
            found = visit(child)
            if found:
                return found
        return None

    return visit(loop) or "naive"


def mimo_outcome(rel: Release) -> tuple[str | None, str]:
    """(garbage or None, what decided it) for festr2's MiMo-V2.5-Pro checkpoint on GB10."""
    if not mxfp8_linear_dispatch(rel):
        return " あるいあるい あるい 。あるい", "MXFP8 attention falls through to UnquantizedLinearMethod"
    if not scale_inv_lands(rel):
        return " ייך ייך ייךייך", "the checkpoint's weight_scale_inv never lands: zero MXFP8 scales"
    outcome = qkv_outcome(rel)
    if outcome == "refused":
        raise ReleaseError("the fused qkv_proj loader assumes the interleaved layout and refuses festr2's plain "
                           "[Q|K|V] MXFP8 scales")
    if outcome == "naive":
        return " *\0*\0*\0*\0", "qkv_proj chunked naively: Q rows pose as K and V on 7 of 8 ranks"
    return None, "coherent"
