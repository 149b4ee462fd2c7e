#!/usr/bin/env python3
"""TEST DOUBLE for `vllm serve`: stands in for GPU inference on the simulated Spark cluster.

It is not vLLM and nothing the collection ships depends on it. What it does for real:
  * accepts `vllm serve MODEL ...` with vLLM's flags (unknown flags are logged and ignored);
  * joins the Ray cluster, reserves one {GPU: 1} bundle per TP x PP rank in a placement group, and places
    one long-lived worker actor per bundle, as vLLM's Ray executor does;
  * on each bundle's node, opens and reads every shard that the index lists (the default loader makes
    every rank read every shard); a missing or corrupt shard fails the load as vLLM's would;
  * prints vLLM-shaped startup log lines for the vLLM version found in the image;
  * serves /health, /v1/models, /v1/completions, /v1/chat/completions and /metrics, with canned,
    coherent answers to known probe prompts.

Like real inference on GB10, its answers depend on the vLLM source files in the image (the files the
collection's patches rewrite). A MiMo checkpoint gives seed 004's garbage until the MXFP8 dispatch, the
scale name and the qkv split are fixed ("あるい", then "ייך", then "*\0"); a Kimi checkpoint served by the
Marlin WNA16 MoE kernel answers "foss foss foss" (seed 000).

SPARKFLEET_SIM_FAULT (comma separated) makes it misbehave:
  degenerate       completions collapse into "foss foss foss ..."
  script_soup      completions are a soup of scripts ("あるい ייך ...")
  wrong_backend    the logs show a MoE backend other than the one requested
  crash_on_load    the last rank dies while loading weights
  slow_load=S      every rank sleeps S seconds before loading
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import threading
import time
import typing
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import metadata
from pathlib import Path

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
        key, _, val = item.partition("=")
        out[key] = val
    return out


# ------------------------------------------------------------------------------------------------- CLI
def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    p = argparse.ArgumentParser(prog="vllm")
    p.add_argument("command", choices=["serve"])
    p.add_argument("model")
    p.add_argument("--served-model-name", nargs="+")
    p.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    p.add_argument("--pipeline-parallel-size", "-pp", type=int, default=1)
    p.add_argument("--distributed-executor-backend", default=None)
    p.add_argument("--host", default="0.0.0.0")  # noqa: S104 (vLLM's own default)
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--moe-backend", default="auto")
    p.add_argument("--max-model-len", type=int, default=32768)
    p.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    p.add_argument("--max-num-batched-tokens", type=int, default=None)
    p.add_argument("--kv-cache-dtype", default="auto")
    p.add_argument("--attention-backend", default=None)
    p.add_argument("--safetensors-load-strategy", default=None)
    p.add_argument("--api-key", default=None)
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--enforce-eager", action="store_true")
    p.add_argument("--disable-custom-all-reduce", action="store_true")
    return p.parse_known_args(argv)


# ------------------------------------------------------------------------- what the image's vLLM does
def vllm_source(rel: str) -> str:
    """A source file of the vllm package in this image ("" when absent)."""
    import importlib.util

    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return ""
    path = Path(next(iter(spec.submodule_search_locations))) / rel
    return path.read_text() if path.exists() else ""


def mxfp8_dispatch_ok() -> bool:
    src = vllm_source("model_executor/layers/quantization/modelopt.py")
    return 'if quant_algo == "MXFP8"' in src or re.search(r"LINEAR_ALGOS[^=]*=\s*\{[^}]*\"MXFP8\"", src) is not None


def mimo_garbage() -> str | None:
    """Seed 004's progression: each missing fix has its own signature."""
    mimo = vllm_source("model_executor/models/mimo_v2.py")
    if not mxfp8_dispatch_ok():
        return " あるいあるい あるい 。あるい"  # MXFP8 attention fell through to UnquantizedLinearMethod
    if "_sparkfleet_scale_name" not in mimo:
        return " ייך ייך ייךייך"  # weight_scale_inv never landed: zero scales
    if "_sparkfleet_load_plain_qkv" not in mimo:
        return " *\0*\0*\0*\0"  # Q rows posing as K and V on 7 of 8 ranks
    return None


def wna16_honours_backend() -> bool:
    src = vllm_source("model_executor/layers/quantization/compressed_tensors/compressed_tensors_moe/"
                      "compressed_tensors_moe.py")
    return VTUPLE >= (0, 27) or "_sparkfleet_requested_moe_backend" in src


# -------------------------------------------------------------------------------------- kernel choice
def moe_backend_lines(quant: dict, requested: str, fault: dict) -> list[str]:
    """The MoE/quant selection lines real vLLM prints for this checkpoint, version and request."""
    method = quant.get("quant_method", "")
    lines: list[str] = []
    if method == "compressed-tensors":
        triton = requested == "triton" and wna16_honours_backend() and "wrong_backend" not in fault
        if requested == "triton" and (0, 25) <= VTUPLE < (0, 27) and not wna16_honours_backend():
            raise ValueError("--moe-backend triton is not supported for CompressedTensorsWNA16MoEMethod")
        if triton:
            q = "" if VTUPLE >= (0, 34) else "'"
            lines += ["Using CompressedTensorsWNA16MoEMethod", f"Using {q}TRITON{q} WNA16 MoE backend.",
                      "Using TritonWNA16Experts"]
        elif VTUPLE <= (0, 22):
            lines += ["Using CompressedTensorsWNA16MarlinMoEMethod",
                      "Using Marlin backend for WNA16 MoE (group_size=32, num_bits=4)"]
        else:
            lines += ["Using CompressedTensorsWNA16MarlinMoEMethod", "Using 'MARLIN' WNA16 MoE backend."]
    elif method == "modelopt":
        if VTUPLE < (0, 30):
            lines.append("Detected ModelOpt NVFP4 checkpoint (quant_algo=MIXED_PRECISION). Please note that "
                         "the format is experimental and could change in future.")
        if mxfp8_dispatch_ok():
            lines.append("Using FlashInferCutlassMxfp8LinearKernel for MXFP8 GEMM")
        chosen = "MARLIN" if requested in ("marlin", "auto") else requested.upper()
        if "wrong_backend" in fault:
            chosen = "FLASHINFER_CUTLASS" if chosen == "MARLIN" else "MARLIN"
        q = "" if VTUPLE >= (0, 34) else "'"
        lines.append(f"Using {q}{chosen}{q} NvFp4 MoE backend out of potential backends: "
                     "['FLASHINFER_TRTLLM', 'FLASHINFER_CUTLASS', 'CUTLASS', 'MARLIN'].")
        if chosen == "MARLIN":
            lines.append("Your GPU does not have native support for FP4 computation but FP4 quantization is "
                         "being used. Weight-only FP4 compression will be used leveraging the Marlin kernel. "
                         "This may degrade performance for compute-heavy workloads.")
    return lines


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

    if "slow_load" in fault:
        time.sleep(float(fault["slow_load"] or 30))
    if "crash_on_load" in fault and rank == world - 1:
        os._exit(1)  # the worker process dies, as a CUDA fault or the OOM killer would
    start = time.monotonic()
    h = hashlib.sha256()
    nbytes = 0
    for name in files:
        path = Path(model_dir) / name
        with safe_open(str(path), framework="numpy") as f:  # validates header framing and buffer length
            n_tensors = len(list(f.keys()))
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 20):
                h.update(chunk)
                nbytes += len(chunk)
        if n_tensors == 0:
            raise RuntimeError(f"{path}: no tensors")
    return {"rank": rank, "bytes": nbytes, "sha256": h.hexdigest(), "seconds": time.monotonic() - start}


class Engine:
    """Ray placement + the rank workers. Keeps the bundles reserved while the server runs."""

    def __init__(self, args: argparse.Namespace, model: Path, files: list[str], fault: dict) -> None:
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

            def load(self, model_dir, files, rank, world, fault):
                return load_shards(model_dir, files, rank, world, fault)

            def ping(self) -> bool:
                return True

        self.workers = [
            RayWorkerProc.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
                placement_group=self.pg, placement_group_bundle_index=i)).remote()
            for i in range(self.world)
        ]
        self.ips = ray.get([w.node_ip.remote() for w in self.workers])
        tp = args.tensor_parallel_size
        for rank, ip in enumerate(self.ips):
            log(f"rank {rank} in world size {self.world} is assigned as DP rank 0, PP rank {rank // tp}, "
                f"PCP rank 0, TP rank {rank % tp}, EP rank {rank % tp}, EPLB rank 0",
                f"RayWorkerProc pid={PID}, ip={ip}", where="parallel_state.py:1")
        log("vLLM is using nccl==2.27.7", "EngineCore_DP0", where="pynccl.py:1")
        self.model, self.files, self.fault = str(model), files, fault

    def load_weights(self) -> list[dict]:
        refs = [w.load.remote(self.model, self.files, r, self.world, self.fault) for r, w in enumerate(self.workers)]
        results = []
        for rank, ref in enumerate(refs):
            try:
                results.append(self.ray.get(ref))
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
    (re.compile(r"def fibonacci\(n\):"),
     "\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n"),
]
GENERIC = " That is a good question. Here is a short, clear answer based on what I know."
SOUP = " あるい ייך *\0 あるい ייך ꧁ ḁ あるい ייך"


def answer(prompt: str, max_tokens: int, fault: dict) -> str:
    if "degenerate" in fault or fault.get("_kernel") == "marlin_wna16":
        return " " + " ".join(["foss"] * max(1, max_tokens))
    if "script_soup" in fault:
        return SOUP
    if fault.get("_garbage"):
        return fault["_garbage"]
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
        key = self.state["api_key"]
        if not key or not self.path.startswith("/v1"):
            return True
        if self.headers.get("Authorization", "") == f"Bearer {key}":
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
            text = answer(str(req.get("prompt", "")), max_tokens, s["fault"])
            return self.reply(200, {"id": f"cmpl-{s['requests']}", "object": "text_completion",
                                    "created": created, "model": s["served"],
                                    "choices": [{"index": 0, "text": text, "finish_reason": "length"}]})
        if self.path == "/v1/chat/completions":
            msgs = req.get("messages") or [{}]
            text = answer(str(msgs[-1].get("content", "")), max_tokens, s["fault"]).strip()
            return self.reply(200, {"id": f"chatcmpl-{s['requests']}", "object": "chat.completion",
                                    "created": created, "model": s["served"],
                                    "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                                 "finish_reason": "stop"}]})
        return self.reply(404, {"detail": "Not Found"})


def serve(argv: list[str]) -> int:
    args, unknown = parse_args(argv)
    fault = faults()
    served = (args.served_model_name or [args.model])[0]
    log(f"vLLM server version {VERSION}, serving model {args.model}", where="utils.py:1")
    for flag in unknown:
        if flag.startswith("-"):
            log(f"stand-in: ignoring unknown argument {flag}", level="WARNING", where="standin.py:1")
    log(f"non-default args: {json.dumps({k: v for k, v in vars(args).items() if v not in (None, False)})}",
        where="utils.py:2")
    model = Path(args.model)
    if not (model / "config.json").exists():
        raise ValueError(f"Invalid repository ID or local directory specified: '{args.model}'.")
    config = json.loads((model / "config.json").read_text())
    quant = config.get("quantization_config", {})
    log(f"Resolved architecture: {config.get('architectures', ['?'])[0]}", where="model.py:1")
    log(f"Using max model len {args.max_model_len}", where="model.py:2")
    backend_lines = moe_backend_lines(quant, args.moe_backend, fault)
    for line in backend_lines:
        log(line, "EngineCore_DP0", where="quantization.py:1")
    # What the GPU would compute with these kernels and these sources.
    if quant.get("quant_method") == "modelopt":
        fault["_garbage"] = mimo_garbage()
    if any("WNA16MarlinMoEMethod" in line for line in backend_lines):
        fault["_kernel"] = "marlin_wna16"
    log(f"Initializing a V1 LLM engine (v{VERSION}) with config: model='{args.model}', "
        f"quantization={quant.get('quant_method', 'None')}, tensor_parallel_size={args.tensor_parallel_size}, "
        f"pipeline_parallel_size={args.pipeline_parallel_size}, enforce_eager={args.enforce_eager}",
        "EngineCore_DP0", where="core.py:1")
    if args.distributed_executor_backend != "ray" and args.tensor_parallel_size * args.pipeline_parallel_size > 1:
        raise ValueError("stand-in: multi-node runs need --distributed-executor-backend ray")
    files = shard_files(model)
    engine = Engine(args, model, files, fault)
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
        log(f"Maximum concurrency for {args.max_model_len:,} tokens per request: 37.68x", "EngineCore_DP0",
            where="kv_cache_utils.py:2")
    log(f"init engine (profile, create kv cache, warmup model) took {time.monotonic() - start:.2f} s",
        "EngineCore_DP0", where="core.py:2")

    Api.state = {"served": served, "model": args.model, "max_model_len": args.max_model_len,
                 "started": time.time(), "requests": 0, "fault": fault,
                 "api_key": args.api_key or os.environ.get("VLLM_API_KEY")}
    httpd = ThreadingHTTPServer((args.host, args.port), Api)
    engine.watch(lambda: os._exit(1))
    log(f"Starting vLLM server on http://{args.host}:{args.port}", where="api_server.py:2")
    log("Available routes are:", where="launcher.py:1")
    for route in ("/health", "/v1/models", "/v1/completions", "/v1/chat/completions", "/metrics"):
        log(f"Route: {route}, Methods: {'POST' if 'completions' in route else 'GET'}", where="launcher.py:2")
    uvicorn(f"Started server process [{PID}]")
    uvicorn("Waiting for application startup.")
    uvicorn("Application startup complete.")
    uvicorn(f"Uvicorn running on http://{args.host}:{args.port} (Press CTRL+C to quit)")
    httpd.serve_forever()
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] in (["--version"], ["-v"]):
        print(VERSION)
        return 0
    try:
        return serve(argv)
    except Exception as exc:  # noqa: BLE001 (reported the way vLLM's engine reports a failed start)
        log(f"EngineCore failed to start. {type(exc).__name__}: {exc}", "EngineCore_DP0", "ERROR", "core.py:3")
        log("RuntimeError: Engine core initialization failed. See root cause above.", level="ERROR",
            where="api_server.py:3")
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
