# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""The GPU tier: real vLLM on a real NVIDIA GPU, patched by our engine, judged by our own verify checks.

    make gpu-check OUT=DIR            (after `make gpu-wheels` elsewhere and `make gpu-stage` here)

On a GPU host without network, with the offline wheels staged (tests/gpu/wheels.py):

1. installs the pinned vLLM release and what the host lacks into a private path (``STASH/site``);
2. copies its ``vllm`` package and applies the Kimi-K2.5 recipe's patches with the same runner the image build
   uses (``image_build.APPLY_PATCHES`` over ``image_build.patch_sources``), recording every verdict;
3. generates tiny Qwen3-MoE checkpoints in compressed-tensors formats (tests/gpu/tiny_moe.py): W4A16
   pack-quantized (Kimi-K2.5's expert layout) that has learned the recipe's probe answers, the same left
   random, and a W8A8 FP8 one that has learned the answers;
4. serves them with ``vllm serve`` and the recipe's serve flags (``--moe-backend triton``, TP=1):
   ``unpatched`` (the release as published), ``patched``, ``random`` (patched, random weights) and ``fp8``
   (patched, the FP8 checkpoint);
5. runs the collection's ``vllm_check`` module against each server (health, models, the recipe's probes, the
   text verdict, and the kernels its startup log states) with the parameters the verify role derives from
   the recipe, reading the log from its file;
6. writes to OUT: each server's log, the module's result, the patch verdicts, the GPU facts, and which of
   the carried distributions some process really imported (a ``sitecustomize`` records ``sys.modules``
   of every process, and each module is credited to the distribution whose files hold it).

It fails (exit 1) only when something could not run; the verdicts themselves are results, recorded as
they came, whatever they are. Standard library, plus the host's torch stack for the model generator.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
STASH = os.environ.get("SPARKFLEET_GPU_STASH", "/var/tmp/sparkfleet-gpu")
RECIPE = os.path.join(ROOT, "recipes", "kimi-k2.5.yml")
VLLM_VERSION = "0.21.0"
# The tiny model's context; the recipe's 32768 exceeds what its config allows.
MAX_MODEL_LEN = "512"

# flashinfer (flashinfer-python + flashinfer-cubin, hundreds of MB) is not carried: vLLM 0.21 imports it at
# engine start only for its default-on top-k/top-p sampler, which this switch replaces with PyTorch's.
NOT_CARRIED_ENV = {"VLLM_USE_FLASHINFER_SAMPLER": "0"}
TRACE_PERIOD_S = 2  # how often each traced process records its modules

TRACER = '''\
"""Records the modules this interpreter imported (full dotted names), for the GPU tier's import measurement."""
import importlib.machinery
import importlib.util
import os
import sys
import threading

_DIR = os.environ.get("SPARKFLEET_IMPORT_TRACE")


def _dump():
    try:
        names = sorted(list(sys.modules))
        with open(os.path.join(_DIR, "%d.txt" % os.getpid()), "w") as fh:
            fh.write("\\n".join([" ".join(sys.argv[:3])] + names))
    except Exception:
        pass


def _loop():
    import time
    while True:
        time.sleep(@PERIOD@)
        _dump()


if _DIR:
    import atexit
    atexit.register(_dump)
    threading.Thread(target=_loop, daemon=True, name="sparkfleet-import-trace").start()

# Run the sitecustomize this one shadows, if the interpreter has one.
_here = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.machinery.PathFinder.find_spec(
    "sitecustomize", [p for p in sys.path if os.path.abspath(p or ".") != _here])
if _spec is not None and _spec.loader is not None:
    _mod = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_mod)
'''.replace("@PERIOD@", str(TRACE_PERIOD_S))


def log(msg):
    print("[gpu-check %s] %s" % (time.strftime("%H:%M:%S"), msg), flush=True)


def sh(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, check=False, **kw)


def gpu_facts():
    facts = {"python": sys.version.split()[0]}
    smi = sh(["nvidia-smi", "--query-gpu=name,compute_cap,memory.total,driver_version", "--format=csv,noheader"])
    facts["nvidia_smi"] = smi.stdout.strip() or smi.stderr.strip()
    probe = sh([sys.executable, "-c", "import torch, transformers, triton; print(torch.__version__, "
                "torch.version.cuda, transformers.__version__, triton.__version__, torch.cuda.device_count())"])
    facts["torch_cuda_transformers_triton_gpus"] = probe.stdout.strip() or probe.stderr.strip()[-400:]
    return facts


def _wheels():
    sys.path.insert(0, HERE)
    import wheels

    return wheels


def installed_from_this_lock(site):
    wheels = _wheels()
    stamp = os.path.join(site, wheels.LOCK_STAMP)
    if not os.path.exists(stamp):
        return False
    with open(stamp) as fh:
        return fh.read() == wheels.sha256(wheels.REQUIREMENTS)


def collections_path():
    """A collections root whose ansible_collections/sparkfleet/vllm is this checkout."""
    base = os.path.join(STASH, "collections")
    link = os.path.join(base, "ansible_collections", "sparkfleet", "vllm")
    os.makedirs(os.path.dirname(link), exist_ok=True)
    if os.path.islink(link):
        os.remove(link)
    os.symlink(ROOT, link)
    return base


def load_recipe():
    import yaml  # the GPU image has PyYAML; vLLM needs it too

    with open(RECIPE) as fh:
        return yaml.safe_load(fh)


def patch_tree(site, collections, recipe, out):
    """Copy site/vllm to STASH/patched/vllm and patch it the way the image build does; return the report."""
    sys.path.insert(0, collections)
    from ansible_collections.sparkfleet.vllm.plugins.module_utils import image_build, patches
    from ansible_collections.sparkfleet.vllm.plugins.module_utils.patches.verdicts import verdicts as report

    verdicts = report(site)["patches"]
    patched = os.path.join(STASH, "patched")
    shutil.rmtree(patched, ignore_errors=True)
    shutil.copytree(os.path.join(site, "vllm"), os.path.join(patched, "vllm"), symlinks=True)
    kit = os.path.join(STASH, "patchkit")
    shutil.rmtree(kit, ignore_errors=True)
    for rel, src in image_build.patch_sources(patches).items():
        os.makedirs(os.path.dirname(os.path.join(kit, rel)), exist_ok=True)
        with open(os.path.join(kit, rel), "w") as fh:
            fh.write(src)
    ids, required = ",".join(recipe["patches"]), ",".join(recipe.get("required_patches", []))
    env = dict(os.environ, PYTHONPATH=patched)
    run = sh([sys.executable, os.path.join(kit, "apply_patches.py"), kit, "apply", ids, required], env=env)
    report, error = image_build.parse_patch_output(run.stdout + run.stderr)
    result = {"all_patches_on_the_release": verdicts, "applied_for_the_recipe": report, "error": error,
              "rc": run.returncode}
    with open(os.path.join(out, "patches.json"), "w") as fh:
        json.dump(result, fh, indent=1)
    if run.returncode != 0 or error:
        raise SystemExit("patching failed: %s\n%s" % (error, run.stdout[-2000:] + run.stderr[-2000:]))
    return patched, result


MODELS = {"trained": ["--mode", "trained"], "random": ["--mode", "random"],
          "trained-fp8": ["--mode", "trained", "--format", "fp8"]}
# run: (model, on the patched tree)
RUNS = {"unpatched": ("trained", False), "patched": ("trained", True), "random": ("random", True),
        "fp8": ("trained-fp8", True)}


def make_models(site, out, names):
    """Generate the checkpoints (deterministic: one already generated by this checkout is reused)."""
    models = {}
    for name in names:
        flags = MODELS[name]
        path = os.path.join(STASH, "models", name)
        stamp = os.path.join(path, "sparkfleet-generated.json")
        recipe = {"flags": flags, "generator": _wheels().sha256(os.path.join(HERE, "tiny_moe.py"))}
        if not (os.path.exists(stamp) and _read_json(stamp) == recipe):
            shutil.rmtree(path, ignore_errors=True)
            run = sh([sys.executable, os.path.join(HERE, "tiny_moe.py"), path] + flags,
                     env=dict(os.environ, PYTHONPATH=site))
            with open(os.path.join(out, "model-%s.log" % name), "w") as fh:
                fh.write(run.stdout + run.stderr)
            if run.returncode != 0:
                raise SystemExit("the %s model could not be generated:\n%s" % (name, (run.stdout + run.stderr)[-3000:]))
            with open(stamp, "w") as fh:
                json.dump(recipe, fh)
            log("model %s: %s" % (name, run.stdout.strip().splitlines()[-1][:300]))
        models[name] = path
    return models


def _read_json(path):
    with open(path) as fh:
        return json.load(fh)


def serve_args(recipe):
    args = list(recipe["serve_args"])
    if "--max-model-len" in args:
        args[args.index("--max-model-len") + 1] = MAX_MODEL_LEN
    else:
        args += ["--max-model-len", MAX_MODEL_LEN]
    return args


def boot(proc, port, timeout):
    """Wait for the server's /health with the collection's own waiter and HTTP client: (healthy, seconds,
    what was last seen). A server process that exits stops the wait."""
    from ansible_collections.sparkfleet.vllm.plugins.module_utils import waiter
    from ansible_collections.sparkfleet.vllm.plugins.module_utils._http import request

    def probe():
        if proc.poll() is not None:
            raise waiter.WaitAborted("vllm serve exited with %s" % proc.returncode)
        return request("http://127.0.0.1:%d/health" % port, timeout=2)[0]

    started = time.monotonic()
    try:
        last = waiter.wait_for("vllm serve", probe, lambda status: (status == 200, "HTTP %s" % status),
                               timeout, 1)[1]
        return True, round(time.monotonic() - started, 1), last
    except (waiter.WaitTimeout, waiter.WaitAborted) as exc:
        return False, round(time.monotonic() - started, 1), str(exc)


def _signal_group(pgid, sig):
    try:
        os.killpg(pgid, sig)
        return True
    except ProcessLookupError:  # the whole group is gone
        return False


def stop(proc):
    """End the server's whole process group (the API server and its EngineCore), even if its leader already
    exited, so that no engine keeps the GPU or the port for the next run: SIGTERM to the group, up to 30 s
    for the server (which shuts its engine down first), then SIGKILL to whatever of the group is left."""
    _signal_group(proc.pid, signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        pass
    _signal_group(proc.pid, signal.SIGKILL)
    proc.wait()


def port_free(port):
    import socket

    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


def serve_and_check(name, model, pythonpath, recipe, collections, site, out, port, boot_timeout):
    args = serve_args(recipe)
    trace = os.path.join(out, "imports", name)
    shutil.rmtree(trace, ignore_errors=True)  # an earlier run's traces must not count
    os.makedirs(trace)
    if not port_free(port):
        raise SystemExit("port %d is in use before the %s run: another server would answer its checks" % (port, name))
    logfile = os.path.join(out, "vllm-%s-%s-h200.log" % (VLLM_VERSION, name))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(pythonpath), SPARKFLEET_IMPORT_TRACE=trace,
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1",
               PYTHONUNBUFFERED="1", **NOT_CARRIED_ENV)
    cmd = [sys.executable, "-c", "import sys; from vllm.entrypoints.cli.main import main; sys.argv[0] = 'vllm'; "
           "sys.exit(main())", "serve", model, "--served-model-name", recipe["served_model_name"],
           "--host", "127.0.0.1", "--port", str(port)] + args
    result = {"run": name, "model": model, "serve_args": args, "log": os.path.basename(logfile)}
    log("%s: vllm serve %s" % (name, " ".join(cmd[5:])))
    with open(logfile, "w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        result["healthy"], result["boot_s"], last = boot(proc, port, boot_timeout)
        if not result["healthy"]:
            result["exit_code"] = proc.poll()
            log("%s: not healthy after %.0f s: %s" % (name, result["boot_s"], last))
        else:
            log("%s: healthy after %.0f s" % (name, result["boot_s"]))
        result["vllm_check"] = vllm_check(recipe, args, port, logfile, collections, site, out, name)
        time.sleep(TRACE_PERIOD_S + 0.5)  # let every process record what serving the checks imported
    finally:
        stop(proc)
    with open(os.path.join(out, "result-%s.json" % name), "w") as fh:
        json.dump(result, fh, indent=1, ensure_ascii=False)
    return result


def vllm_check(recipe, args, port, logfile, collections, site, out, name):
    """The collection's vllm_check module, run the way Ansible runs a module (an args file), with the
    parameters the verify role derives from the recipe (roles/verify/tasks/main.yml and its defaults), the
    log file in place of the container, and no API key (the server runs without one here)."""
    params = {"url": "http://127.0.0.1:%d" % port, "served_model_name": recipe["served_model_name"],
              "probes": recipe["probes"], "serve_args": args, "log_file": logfile,
              "moe_backend": recipe.get("moe_backend"), "quantization": recipe.get("quantization"),
              "mxfp8_linear_kernel": recipe.get("mxfp8_linear_kernel"),
              "expect_mxfp8": recipe.get("expect_mxfp8", False), "vllm_version": VLLM_VERSION,
              "unverifiable": "fail", "timeout": 120}
    args_file = os.path.join(out, "vllm_check-args-%s.json" % name)
    with open(args_file, "w") as fh:
        json.dump({"ANSIBLE_MODULE_ARGS": params}, fh, ensure_ascii=False)
    run = sh([sys.executable, "-m", "ansible_collections.sparkfleet.vllm.plugins.modules.vllm_check", args_file],
             env=dict(os.environ, PYTHONPATH=os.pathsep.join([collections, site])))
    try:
        return json.loads(run.stdout)
    except ValueError:
        return {"failed": True, "msg": "the module printed no JSON", "stdout": run.stdout[-2000:],
                "stderr": run.stderr[-2000:]}


def module_owners(site):
    """({dotted module name: distribution}, {top-level name: {distributions}}) of what is installed in site."""
    import importlib.metadata as md

    exact, tops = {}, {}
    for dist in md.distributions(path=[site]):
        name = dist.metadata["Name"]
        for f in dist.files or []:
            parts = list(f.parts)
            if not parts or parts[0].endswith((".dist-info", ".data")) or parts[0] == "..":
                continue
            tops.setdefault(parts[0].split(".")[0], set()).add(name)
            last = parts[-1]
            if last.endswith(".py"):
                parts[-1] = last[:-3]
            elif last.endswith((".so", ".pyd")):
                parts[-1] = last.split(".")[0]
            else:
                continue
            if parts[-1] == "__init__":
                parts.pop()
            if parts:
                exact[".".join(parts)] = name
    return exact, tops


def imports(site, out):
    """Which carried distributions some serving process imported, from the modules each process recorded.

    A module counts for the distribution whose files hold it. A namespace package (``opentelemetry``,
    ``google``) belongs to no file: its name proves nothing, and a distribution seen only through one is
    reported as unproven rather than as imported or not."""
    import importlib.metadata as md

    exact, tops = module_owners(site)
    used, seen = {}, set()
    root = os.path.join(out, "imports")
    for run in sorted(os.listdir(root)):
        for fname in os.listdir(os.path.join(root, run)):
            with open(os.path.join(root, run, fname)) as fh:
                lines = fh.read().splitlines()
            seen.update(lines[1:])
            for module in lines[1:]:
                if module in exact:
                    used.setdefault(exact[module], set()).add(module)
    carried = sorted({d.metadata["Name"] for d in md.distributions(path=[site])}, key=str.lower)
    namespace_seen = {top for top in seen if "." not in top and top in tops and top not in exact}
    unproven = [d for d in carried if d not in used and any(d in tops[t] for t in namespace_seen)]
    report = {"imported": {d: len(used[d]) for d in sorted(used, key=str.lower)},
              "unproven": unproven,
              "not_imported": [d for d in carried if d not in used and d not in unproven]}
    with open(os.path.join(out, "imports.json"), "w") as fh:
        json.dump(report, fh, indent=1)
    return report


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--runs", default="unpatched,patched,random,fp8")
    ap.add_argument("--port", type=int, default=8011, help="the first run's port; each run takes the next")
    ap.add_argument("--boot-timeout", type=int, default=300)
    args = ap.parse_args(argv)
    runs = [r for r in args.runs.split(",") if r]
    unknown = [r for r in runs if r not in RUNS]
    if unknown:
        ap.error("unknown runs %s; known: %s" % (unknown, ", ".join(RUNS)))
    os.makedirs(args.out, exist_ok=True)
    facts = gpu_facts()
    log("facts: %s" % facts)
    site = os.path.join(STASH, "site")
    if not installed_from_this_lock(site):
        run = sh([sys.executable, os.path.join(HERE, "wheels.py"), "install"])
        log("install: %s %s" % (run.stdout.strip()[-500:], run.stderr.strip()[-1500:]))
        if run.returncode != 0:
            return 1
    sys.path.append(site)  # ansible-core for the collection's waiter and HTTP client (the image's packages first)
    tracer = os.path.join(STASH, "tracer")
    os.makedirs(tracer, exist_ok=True)
    with open(os.path.join(tracer, "sitecustomize.py"), "w") as fh:
        fh.write(TRACER)
    collections = collections_path()
    recipe = load_recipe()
    patched, patch_result = patch_tree(site, collections, recipe, args.out)
    log("patches: %s" % json.dumps(patch_result["applied_for_the_recipe"]))
    models = make_models(site, args.out, sorted({RUNS[r][0] for r in runs}))
    trees = {False: [tracer, site], True: [tracer, patched, site]}
    results = {"facts": facts, "runs": []}
    for i, name in enumerate(runs):
        model, is_patched = RUNS[name]
        res = serve_and_check(name, models[model], trees[is_patched], recipe, collections, site, args.out,
                              args.port + i, args.boot_timeout)
        check = res["vllm_check"]
        log("%s: vllm_check %s: %s" % (name, "FAILED" if check.get("failed") else "passed",
                                       str(check.get("msg", ""))[:600]))
        for a in check.get("answers", []):
            log("%s:   %r -> %r ok=%s" % (name, a.get("prompt"), a.get("answer"), a.get("ok")))
        results["runs"].append({k: res[k] for k in ("run", "boot_s", "healthy")} | {
            "check_failed": bool(check.get("failed")), "msg": check.get("msg"), "kernels": check.get("kernels"),
            "answers": [{k: a.get(k) for k in ("prompt", "answer", "ok", "reasons")}
                        for a in check.get("answers", [])]})
        with open(os.path.join(args.out, "summary.json"), "w") as fh:
            json.dump(results, fh, indent=1, ensure_ascii=False)
    results["imports"] = imports(site, args.out)
    with open(os.path.join(args.out, "summary.json"), "w") as fh:
        json.dump(results, fh, indent=1, ensure_ascii=False)
    log("imported: %s" % ", ".join(results["imports"]["imported"]))
    log("unproven (namespace packages): %s" % ", ".join(results["imports"]["unproven"]))
    log("not imported: %s" % ", ".join(results["imports"]["not_imported"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
