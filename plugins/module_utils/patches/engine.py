# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""The vLLM source patch engine: each patch knows where its target may live, judges from the target's
structure what runs on a GB10 (cuda_path.py), and proves its own result.

Verdicts, per patch and vLLM version:
  applied                    the buggy behaviour is on the CUDA path and the patch rewrote it; the result
                             compiles and passes the patch's post-condition
  already applied            our marker is present and the post-condition holds (applying twice changes nothing)
  fixed upstream (skipped)   the CUDA path of this release already behaves right; the file is left alone
  anchor not found           the patch is needed or cannot be judged, but its target shape is not there (the
                             file does not exist, moved, or changed shape); the detail says what was missing

A patch may know several target paths (``targets``, the newest layout first): the engine uses the first one
that exists in the tree and reports which.

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

# What a patch's judge() returns: (NEEDED, anchor for transform(), what is wrong on the CUDA path),
# (UPSTREAM, reason) or (ABSENT, detail).
NEEDED = "needed"
UPSTREAM = "upstream"
ABSENT = "absent"


class PatchError(Exception):
    """A required patch cannot be applied, or a patch produced code that fails its own check."""


class Patch:
    id = ""
    title = ""
    targets = ()  # candidate paths relative to the vllm package directory, in the order they are tried
    opt_in = False
    looked_for = ""  # the shape the patch needs, in words (reported with "anchor not found")
    env = ()  # VLLM_* variables the patched code reads (vLLM's own envs.py does not know them)

    @property
    def target(self):
        """The first candidate path (the one callers name when none exists)."""
        return self.targets[0]

    @property
    def marker(self):
        return "# sparkfleet-patch: %s" % self.id

    # Each patch implements these three.
    def judge(self, src, tree):
        """Judge the CUDA path of this release: (NEEDED, anchor, why), (UPSTREAM, reason) or (ABSENT, detail)."""
        raise NotImplementedError

    def transform(self, src, anchor):
        raise NotImplementedError

    def postcondition(self, src):
        """Problems with patched source (empty when the new code is present and the buggy behaviour gone)."""
        raise NotImplementedError


# ------------------------------------------------------------------------------------------ AST helpers
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


# ------------------------------------------------------------------------------------------- running
def evaluate(patch, src, path=None):
    """Return (verdict, new_source_or_None, detail) for the source of one target file."""
    path = path or patch.target
    if patch.marker in src:
        problems = patch.postcondition(src)
        if problems:
            raise PatchError("%s: marker present but %s" % (patch.id, "; ".join(problems)))
        return ALREADY, None, "marker found"
    try:
        tree = ast.parse(src)
    except SyntaxError as exc:
        raise PatchError("%s: %s does not parse: %s" % (patch.id, path, exc)) from exc
    kind, what, why = (patch.judge(src, tree) + ("",))[:3]
    if kind == UPSTREAM:
        return FIXED, None, what
    if kind == ABSENT:
        return NOT_FOUND, None, "%s; looked for %s" % (what, patch.looked_for) if patch.looked_for else what
    new = patch.transform(src, what)
    try:
        compile(new, path, "exec")
    except SyntaxError as exc:
        raise PatchError("%s: the patched %s does not compile: %s" % (patch.id, path, exc)) from exc
    problems = patch.postcondition(new)
    if problems or patch.marker not in new:
        raise PatchError("%s: post-condition failed: %s" % (patch.id, "; ".join(problems) or "no marker"))
    return APPLIED, new, "rewrote %s%s" % (path, ": " + why if why else "")


def find_target(vllm_dir, patch):
    """The first of the patch's candidate paths that exists in the tree, else None."""
    for rel in patch.targets:
        if os.path.isfile(os.path.join(vllm_dir, rel)):
            return rel
    return None


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
        rel = find_target(vllm_dir, patch)
        if rel is None:
            rel = patch.target
            verdict, new = NOT_FOUND, None
            detail = "%s does not exist" % patch.targets[0] + (
                " (nor %s)" % ", ".join(patch.targets[1:]) if patch.targets[1:] else "")
        else:
            path = os.path.join(vllm_dir, rel)
            with open(path) as fh:
                src = fh.read()
            verdict, new, detail = evaluate(patch, src, rel)
            if verdict == APPLIED and not write:
                detail = "would rewrite" + detail[len("rewrote"):] + " (dry run: nothing written)"
            if new is not None and write:
                tmp = path + ".sparkfleet-tmp"
                with open(tmp, "w") as fh:
                    fh.write(new)
                os.replace(tmp, path)
        report.append({"id": patch.id, "target": rel, "verdict": verdict, "detail": detail,
                       "vllm_version": version})
    missing = [r for r in report if r["verdict"] == NOT_FOUND and r["id"] in required]
    if missing:
        raise PatchError("; ".join(
            "required patch %s cannot be applied to vLLM %s: %s (%s)" % (r["id"], version, r["target"], r["detail"])
            for r in missing))
    return report
