# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""Offline wheels for the GPU tier: download on a networked machine, carry in pieces, install on the GPU host.

    python tests/gpu/wheels.py download   # networked machine: every wheel of tests/gpu/requirements.txt
    python tests/gpu/wheels.py pack       # tar them and split into pieces of at most --piece-mib MiB
    python tests/gpu/wheels.py stage      # GPU host: copy whichever pieces arrived into the stash, checked
    python tests/gpu/wheels.py install    # GPU host: reassemble, check, pip install into a private path

``tests/gpu/requirements.txt`` pins every wheel with its sha256 (``--require-hashes`` on both sides), and
says for each why it is carried. The pieces carry ``SHA256SUMS`` (each piece and the whole tar); ``stage``
accepts a piece only when its digest matches, so a GPU host that receives the pieces over several transfers
(64 MiB each, for the lent machine) holds only undamaged bytes, and ``install`` refuses an incomplete set.
``SHA256SUMS`` travels with the pieces and only catches damage; what vouches for the wheels is the lock of
the checkout on the GPU host: pip installs against it, and a tar packed from another lock is refused.
The install goes to ``STASH/site`` with ``--no-index --no-deps``: nothing is fetched, and the GPU host's
own torch, triton, transformers and CUDA libraries are the ones vLLM runs on.

Standard library only (it runs before anything is installed).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
REQUIREMENTS = os.path.join(HERE, "requirements.txt")
WORK = os.path.join(ROOT, ".gpu")
PIECES = os.path.join(WORK, "pieces")
STASH = os.environ.get("SPARKFLEET_GPU_STASH", "/var/tmp/sparkfleet-gpu")
TAR = "sparkfleet-gpu-wheels.tar"
LOCK_STAMP = ".sparkfleet-lock-sha256"  # in STASH/site: the lock it was installed from
# The GPU host's interpreter (the lent H200 runs CPython 3.12 with torch 2.11.0+cu130) and the manylinux
# tags its glibc accepts; pip matches --platform exactly, so every tag a pinned wheel uses is listed.
PYTHON_VERSION = "3.12"
PLATFORMS = ["manylinux_2_%d_x86_64" % n for n in (35, 34, 31, 28, 27, 26, 24, 17, 5)] + \
            ["manylinux2014_x86_64", "manylinux1_x86_64"]


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def requirements(path=REQUIREMENTS):
    """[(name, version, sha256)] of the pinned wheels."""
    out = []
    with open(path) as fh:
        for raw in fh:
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            spec, _unused, digest = line.partition("--hash=sha256:")
            name, _unused, version = spec.strip().partition("==")
            if not version or not digest:
                raise SystemExit("%s: every line must be NAME==VERSION --hash=sha256:DIGEST, not %r" % (path, line))
            out.append((name.strip(), version.strip(), digest.strip()))
    return out


def download(args):
    os.makedirs(args.wheels, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--require-hashes",
           "--python-version", PYTHON_VERSION, "--implementation", "cp", "-d", args.wheels, "-r", REQUIREMENTS]
    for platform in PLATFORMS:
        cmd += ["--platform", platform]
    subprocess.run(cmd, check=True)
    wanted = {digest for _unused, _unused, digest in requirements()}
    for name in os.listdir(args.wheels):  # wheels of an older lock would be packed too
        if name.endswith(".whl") and sha256(os.path.join(args.wheels, name)) not in wanted:
            os.remove(os.path.join(args.wheels, name))
    total = sum(os.path.getsize(os.path.join(args.wheels, n)) for n in os.listdir(args.wheels))
    print("%d wheels, %.1f MiB in %s" % (len(os.listdir(args.wheels)), total / 2**20, args.wheels))


def pack(args):
    if os.path.isdir(args.pieces):
        shutil.rmtree(args.pieces)
    os.makedirs(args.pieces)
    tar_path = os.path.join(WORK, TAR)
    with tarfile.open(tar_path, "w") as tar:  # wheels are zip files already: compressing again gains little
        tar.add(REQUIREMENTS, arcname="requirements.txt")
        for name in sorted(os.listdir(args.wheels)):
            tar.add(os.path.join(args.wheels, name), arcname="wheels/" + name)
    size, limit, sums = os.path.getsize(tar_path), args.piece_mib * 2**20, []
    with open(tar_path, "rb") as fh:
        for i in range(-(-size // limit)):
            name = "%s.%03d" % (TAR, i)
            with open(os.path.join(args.pieces, name), "wb") as out:
                out.write(fh.read(limit))
            sums.append((sha256(os.path.join(args.pieces, name)), name))
    sums.append((sha256(tar_path), TAR))
    os.remove(tar_path)
    with open(os.path.join(args.pieces, "SHA256SUMS"), "w") as fh:
        fh.writelines("%s  %s\n" % pair for pair in sums)
    print(json.dumps({"pieces": [n for _unused, n in sums[:-1]], "tar_mib": round(size / 2**20, 1),
                      "piece_mib": args.piece_mib}))


def read_sums(path):
    """{file name: sha256}; only the tar and its numbered pieces may be named (no paths)."""
    with open(path) as fh:
        sums = {name: digest for digest, name in (line.split() for line in fh if line.strip())}
    for name in sums:
        if name != TAR and not (name.startswith(TAR + ".") and name[len(TAR) + 1:].isdigit()):
            raise SystemExit("%s names %r, which is not a piece of %s" % (path, name, TAR))
    return sums


def stage(args):
    """Move the pieces that arrived (and match SHA256SUMS) into the stash; report what is still missing."""
    os.makedirs(os.path.join(args.stash, "pieces"), exist_ok=True)
    if not os.path.exists(os.path.join(args.pieces, "SHA256SUMS")):
        print(json.dumps({"staged_now": [], "note": "no pieces carried this time"}))
        return 0
    sums = read_sums(os.path.join(args.pieces, "SHA256SUMS"))
    shutil.copy(os.path.join(args.pieces, "SHA256SUMS"), os.path.join(args.stash, "pieces", "SHA256SUMS"))
    got, bad = [], []
    for name in sorted(sums):
        src = os.path.join(args.pieces, name)
        if name == TAR or not os.path.exists(src):
            continue
        if sha256(src) != sums[name]:
            bad.append(name)
            continue
        shutil.copy(src, os.path.join(args.stash, "pieces", name))
        got.append(name)
    have = [n for n in sorted(sums) if n != TAR and os.path.exists(os.path.join(args.stash, "pieces", n))
            and sha256(os.path.join(args.stash, "pieces", n)) == sums[n]]
    missing = [n for n in sorted(sums) if n != TAR and n not in have]
    print(json.dumps({"staged_now": got, "rejected": bad, "have": len(have), "missing": missing}))
    return 1 if bad else 0


def install(args):
    """Reassemble the staged pieces, check every digest, and pip-install the wheels into STASH/site."""
    pieces = os.path.join(args.stash, "pieces")
    sums = read_sums(os.path.join(pieces, "SHA256SUMS"))
    names = sorted(n for n in sums if n != TAR)
    missing = [n for n in names if not os.path.exists(os.path.join(pieces, n))]
    if missing:
        raise SystemExit("missing pieces %s: carry them and run `stage` first" % missing)
    damaged = [n for n in names if sha256(os.path.join(pieces, n)) != sums[n]]
    if damaged:
        raise SystemExit("staged pieces %s do not match SHA256SUMS: carry them again" % damaged)
    tar_path = os.path.join(args.stash, TAR)
    with open(tar_path, "wb") as out:
        for name in names:
            with open(os.path.join(pieces, name), "rb") as fh:
                shutil.copyfileobj(fh, out)
    if sha256(tar_path) != sums[TAR]:
        raise SystemExit("the reassembled %s does not match SHA256SUMS" % TAR)
    unpacked = os.path.join(args.stash, "unpacked")
    shutil.rmtree(unpacked, ignore_errors=True)
    with tarfile.open(tar_path) as tar:
        tar.extractall(unpacked, filter="data")
    os.remove(tar_path)
    with open(os.path.join(unpacked, "requirements.txt"), "rb") as packed, open(args.lock, "rb") as ours:
        if packed.read() != ours.read():
            raise SystemExit("the pieces were packed from another lock than %s: run `make gpu-wheels` again"
                             % args.lock)
    site = os.path.join(args.stash, "site")
    shutil.rmtree(site, ignore_errors=True)
    wheels = sorted(os.path.join(unpacked, "wheels", n) for n in os.listdir(os.path.join(unpacked, "wheels")))
    # --require-hashes checks every wheel against this checkout's lock, not against anything that travelled.
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                    "--no-cache-dir", "--require-hashes", "--target", site, "-r", args.lock,
                    "--find-links", os.path.join(unpacked, "wheels")], check=True)
    with open(os.path.join(site, LOCK_STAMP), "w") as fh:
        fh.write(sha256(args.lock))
    print(json.dumps({"site": site, "wheels": len(wheels)}))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    ap.add_argument("command", choices=["download", "pack", "stage", "install"])
    ap.add_argument("--wheels", default=os.path.join(WORK, "wheels"))
    ap.add_argument("--pieces", default=PIECES)
    ap.add_argument("--stash", default=STASH)
    ap.add_argument("--lock", default=REQUIREMENTS)
    ap.add_argument("--piece-mib", type=int, default=56,
                    help="largest piece (the lent GPU machine takes 64 MiB per transfer, tree included)")
    args = ap.parse_args(argv)
    return {"download": download, "pack": pack, "stage": stage, "install": install}[args.command](args) or 0


if __name__ == "__main__":
    sys.exit(main())
