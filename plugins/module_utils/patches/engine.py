# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""The vLLM source patch engine: each patch knows how to find its target, whether upstream fixed it, and
how to prove its own result.

Verdicts, per patch and vLLM version:
  applied                    the buggy shape was found and rewritten; the result compiles and passes the
                             patch's post-condition
  already applied            our marker is present and the post-condition holds (applying twice changes nothing)
  fixed upstream (skipped)   the release carries the fix; the file is left alone
  anchor not found           neither the bug nor the fix is recognisable: the file moved or changed shape

Standard library only, with relative imports: the same files run inside an image build, where the
collection is not installed.
"""

from __future__ import annotations

import ast
import inspect
import os
import re

APPLIED = "applied"
ALREADY = "already applied"
FIXED = "fixed upstream (skipped)"
NOT_FOUND = "anchor not found"


class PatchError(Exception):
    """A required patch cannot be applied, or a patch produced code that fails its own check."""


class Patch:
    id = ""
    title = ""
    target = ""  # path relative to the vllm package directory
    opt_in = False
    env = ()  # VLLM_* variables the patched code reads (vLLM's own envs.py does not know them)

    @property
    def marker(self):
        return "# sparkfleet-patch: %s" % self.id

    # Each patch implements these four.
    def fixed_upstream(self, src, tree):
        """Return a reason when this release already carries the fix, else None."""
        raise NotImplementedError

    def locate(self, src, tree):
        """Return whatever transform() needs when the buggy shape is present, else None."""
        raise NotImplementedError

    looked_for = ""

    def transform(self, src, anchor):
        raise NotImplementedError

    def postcondition(self, src):
        """Problems with patched source (empty when the new code is present and the buggy shape gone)."""
        raise NotImplementedError


# ------------------------------------------------------------------------------------------ AST helpers
def find_def(tree, qualname):
    """Find a function or class by dotted path (``Class.method``, ``outer.inner``)."""
    nodes = [tree]
    found = None
    for part in qualname.split("."):
        found = None
        for parent in nodes:
            for node in ast.walk(parent):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == part:
                    found = node
                    break
            if found:
                break
        if found is None:
            return None
        nodes = [found]
    return found


def segment(src, node):
    """(start, end) character offsets of a node's whole lines."""
    lines = src.splitlines(keepends=True)
    start = sum(len(x) for x in lines[: node.lineno - 1])
    end = sum(len(x) for x in lines[: node.end_lineno])
    return start, end


def indent_of(src, pos):
    line_start = src.rfind("\n", 0, pos) + 1
    return re.match(r"[ \t]*", src[line_start:]).group(0)


def insert_function(src, func):
    """Put the verbatim source of a tested pure function before the module's first class."""
    first_class = re.search(r"\n(?:@.*\n)*class ", src)
    at = first_class.start() if first_class else len(src)
    return src[:at] + "\n\n%s\n" % inspect.getsource(func).rstrip() + src[at:]


def has_def(tree, name):
    return any(isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == name for n in ast.walk(tree))


# ------------------------------------------------------------------------------------------- running
def evaluate(patch, src):
    """Return (verdict, new_source_or_None, detail)."""
    if patch.marker in src:
        problems = patch.postcondition(src)
        if problems:
            raise PatchError("%s: marker present but %s" % (patch.id, "; ".join(problems)))
        return ALREADY, None, "marker found"
    try:
        tree = ast.parse(src)
    except SyntaxError as exc:
        raise PatchError("%s: %s does not parse: %s" % (patch.id, patch.target, exc)) from exc
    reason = patch.fixed_upstream(src, tree)
    if reason:
        return FIXED, None, reason
    anchor = patch.locate(src, tree)
    if anchor is None:
        return NOT_FOUND, None, "looked for " + patch.looked_for
    new = patch.transform(src, anchor)
    try:
        compile(new, patch.target, "exec")
    except SyntaxError as exc:
        raise PatchError("%s: the patched %s does not compile: %s" % (patch.id, patch.target, exc)) from exc
    problems = patch.postcondition(new)
    if problems or patch.marker not in new:
        raise PatchError("%s: post-condition failed: %s" % (patch.id, "; ".join(problems) or "no marker"))
    return APPLIED, new, "rewrote %s" % patch.target


def vllm_version(vllm_dir):
    path = os.path.join(vllm_dir, "_version.py")
    try:
        with open(path) as fh:
            m = re.search(r"""(?:__version__|version)\s*(?::\s*str)?\s*=\s*['"]([^'"]+)['"]""", fh.read())
        return m.group(1) if m else "unknown"
    except OSError:
        return "unknown"


def run(vllm_dir, patches, required=(), write=True):
    """Evaluate (and apply, when ``write``) each patch. Returns the report; raises PatchError when a
    required patch ends in ``anchor not found``, naming the patch, the file, the version and the anchor."""
    version = vllm_version(vllm_dir)
    report = []
    for patch in patches:
        path = os.path.join(vllm_dir, patch.target)
        if not os.path.exists(path):
            verdict, new, detail = NOT_FOUND, None, "%s does not exist" % patch.target
        else:
            with open(path) as fh:
                src = fh.read()
            verdict, new, detail = evaluate(patch, src)
            if new is not None and write:
                tmp = path + ".sparkfleet-tmp"
                with open(tmp, "w") as fh:
                    fh.write(new)
                os.replace(tmp, path)
        report.append({"id": patch.id, "target": patch.target, "verdict": verdict, "detail": detail,
                       "vllm_version": version})
    missing = [r for r in report if r["verdict"] == NOT_FOUND and r["id"] in required]
    if missing:
        raise PatchError("; ".join(
            "required patch %s cannot be applied to vLLM %s: %s (%s)" % (r["id"], version, r["target"], r["detail"])
            for r in missing))
    return report
