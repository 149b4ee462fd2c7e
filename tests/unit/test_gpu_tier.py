"""The GPU tier's offline carriage (tests/gpu/wheels.py) and the parts of its driver that need no GPU
(tests/gpu/check.py): pieces are accepted only when their digest matches, an incomplete or altered set
is refused before pip runs, and the recipe's serve flags travel unchanged but for the context length."""

import hashlib
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "gpu"))
import check
import wheels


@pytest.fixture
def carried(tmp_path):
    """A lock of two fake wheels, packed into pieces of 1 MiB."""
    whl = tmp_path / "wheels"
    whl.mkdir()
    lock = []
    for name, size in (("alpha", 1_500_000), ("beta", 700_000)):
        path = whl / ("%s-1.0-py3-none-any.whl" % name)
        path.write_bytes(bytes(range(256)) * (size // 256))
        lock.append("%s==1.0 --hash=sha256:%s  # why" % (name, hashlib.sha256(path.read_bytes()).hexdigest()))
    req = tmp_path / "requirements.txt"
    req.write_text("# comment\n" + "\n".join(lock) + "\n#   gamma==2.0  # not carried\n")
    return tmp_path, whl, req


def _pack(tmp_path, whl, req, monkeypatch):
    monkeypatch.setattr(wheels, "REQUIREMENTS", str(req))
    monkeypatch.setattr(wheels, "WORK", str(tmp_path))
    pieces = tmp_path / "pieces"
    wheels.main(["pack", "--wheels", str(whl), "--pieces", str(pieces), "--piece-mib", "1"])
    return pieces


def test_the_lock_reads_pins_and_digests_and_skips_comments(carried, monkeypatch):
    _unused, _unused, req = carried
    assert [(n, v) for n, v, _unused in wheels.requirements(str(req))] == [("alpha", "1.0"), ("beta", "1.0")]
    bad = req.parent / "bad.txt"
    bad.write_text("alpha>=1.0\n")
    with pytest.raises(SystemExit, match="NAME==VERSION --hash=sha256:DIGEST"):
        wheels.requirements(str(bad))


def test_the_committed_lock_pins_every_wheel_with_a_digest():
    rows = wheels.requirements()
    assert rows[0][:2] == ("vllm", "0.21.0")
    assert all(len(digest) == 64 for _unused, _unused, digest in rows)


def test_pieces_arrive_over_several_transfers_and_only_verified_ones_are_kept(carried, monkeypatch, capsys):
    tmp_path, whl, req = carried
    pieces = _pack(tmp_path, whl, req, monkeypatch)
    capsys.readouterr()
    names = sorted(p.name for p in pieces.iterdir() if p.name != "SHA256SUMS")
    assert len(names) == 3  # 2.2 MB in pieces of 1 MiB
    stash = tmp_path / "stash"
    first = tmp_path / "transfer1"
    first.mkdir()
    (first / "SHA256SUMS").write_bytes((pieces / "SHA256SUMS").read_bytes())
    (first / names[0]).write_bytes((pieces / names[0]).read_bytes())
    (first / names[1]).write_bytes(b"corrupted in transit")
    assert wheels.main(["stage", "--pieces", str(first), "--stash", str(stash)]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["rejected"] == [names[1]] and report["missing"] == names[1:]
    with pytest.raises(SystemExit, match="missing pieces"):
        wheels.main(["install", "--stash", str(stash)])
    assert wheels.main(["stage", "--pieces", str(pieces), "--stash", str(stash)]) == 0
    assert json.loads(capsys.readouterr().out)["missing"] == []


def test_a_piece_altered_after_staging_is_refused_before_pip_runs(carried, monkeypatch):
    tmp_path, whl, req = carried
    pieces = _pack(tmp_path, whl, req, monkeypatch)
    stash = tmp_path / "stash"
    wheels.main(["stage", "--pieces", str(pieces), "--stash", str(stash)])
    victim = sorted((stash / "pieces").glob("*.001"))[0]
    data = bytearray(victim.read_bytes())
    data[100] ^= 1
    victim.write_bytes(bytes(data))
    monkeypatch.setattr(wheels.subprocess, "run", lambda *a, **k: pytest.fail("pip ran on unverified bytes"))
    with pytest.raises(SystemExit, match=r"staged pieces \['sparkfleet-gpu-wheels.tar.001'\] do not match"):
        wheels.main(["install", "--stash", str(stash)])


def test_pieces_packed_from_another_lock_are_refused(carried, monkeypatch):
    """SHA256SUMS travels with the pieces and vouches for nothing: the GPU host's own lock decides."""
    tmp_path, whl, req = carried
    pieces = _pack(tmp_path, whl, req, monkeypatch)
    stash = tmp_path / "stash"
    wheels.main(["stage", "--pieces", str(pieces), "--stash", str(stash)])
    ours = tmp_path / "our-lock.txt"
    ours.write_text(req.read_text().replace("beta==1.0", "beta==1.1"))
    monkeypatch.setattr(wheels.subprocess, "run", lambda *a, **k: pytest.fail("pip ran on another lock's wheels"))
    with pytest.raises(SystemExit, match="packed from another lock"):
        wheels.main(["install", "--stash", str(stash), "--lock", str(ours)])


def test_sums_may_name_only_pieces(tmp_path):
    (tmp_path / "SHA256SUMS").write_text("%s  ../../etc/passwd\n" % ("0" * 64))
    with pytest.raises(SystemExit, match="not a piece of"):
        wheels.read_sums(str(tmp_path / "SHA256SUMS"))


def _dist(site, name, files):
    info = site / ("%s-1.0.dist-info" % name)
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: %s\nVersion: 1.0\n" % name)
    (info / "RECORD").write_text("".join("%s,,\n" % f for f in files))
    for f in files:
        (site / f).parent.mkdir(parents=True, exist_ok=True)
        (site / f).write_text("")


def test_imports_credit_modules_to_their_files_and_not_namespace_packages(tmp_path):
    site = tmp_path / "site"
    _dist(site, "regular", ["regular/__init__.py", "regular/core.py"])
    _dist(site, "otel-api", ["otel/api/__init__.py"])
    _dist(site, "otel-sdk", ["otel/sdk/__init__.py"])
    _dist(site, "ext", ["fastext.abi3.so"])
    _dist(site, "unused", ["unused/__init__.py"])
    traces = tmp_path / "out" / "imports" / "run"
    traces.mkdir(parents=True)
    (traces / "1.txt").write_text("vllm serve\nregular\nregular.core\notel\notel.api\nfastext\njson\n")
    (traces / "2.txt").write_text("engine\notel\n")
    report = check.imports(str(site), str(tmp_path / "out"))
    assert report == {"imported": {"ext": 1, "otel-api": 1, "regular": 2}, "unproven": ["otel-sdk"],
                      "not_imported": ["unused"]}


def test_nothing_carried_this_time_is_not_an_error(tmp_path, capsys):
    assert wheels.main(["stage", "--pieces", str(tmp_path / "none"), "--stash", str(tmp_path / "s")]) == 0
    assert "no pieces carried" in capsys.readouterr().out


def test_the_recipe_flags_travel_with_only_the_context_length_changed():
    recipe = check.load_recipe()
    args = check.serve_args(recipe)
    i = args.index("--max-model-len")
    assert args[i + 1] == check.MAX_MODEL_LEN
    assert args[:i + 1] + args[i + 2:] == [a for j, a in enumerate(recipe["serve_args"]) if j != i + 1]
    assert args[args.index("--moe-backend") + 1] == "triton"


FAKE_MAIN = '''
"""A stand-in for `vllm serve` that needs no GPU: replays a recorded startup log, starts a child process
(as vLLM starts its EngineCore) and answers the OpenAI API with the recorded answers."""
import json, os, subprocess, sys
from http.server import BaseHTTPRequestHandler, HTTPServer

ANSWERS = {"The capital of France is": " Paris."}


def main():
    args = sys.argv[1:]
    port, name = int(args[args.index("--port") + 1]), args[args.index("--served-model-name") + 1]
    sys.stdout.write(open(os.environ["FAKE_VLLM_LOG"]).read())
    sys.stdout.flush()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    open(os.environ["FAKE_VLLM_CHILD"], "w").write(str(child.pid))

    class Handler(BaseHTTPRequestHandler):
        def _send(self, body):
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            self._send({"data": [{"id": name}]} if self.path == "/v1/models" else {})

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if "messages" in body:
                self._send({"choices": [{"message": {"content": "法国的首都是巴黎。"}}]})
            else:
                self._send({"choices": [{"text": ANSWERS.get(body["prompt"], "")}]})

        def log_message(self, *a):
            pass

    HTTPServer(("127.0.0.1", port), Handler).serve_forever()
'''


def _free_port():
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_the_driver_serves_checks_and_stops_the_whole_group(tmp_path, monkeypatch):
    """check.serve_and_check on CPU with a stand-in for the `vllm` package: the log lands in OUT, vllm_check
    reads it (the recorded unpatched log: Marlin), the answers are judged, the engine child dies with its
    server, and the import trace names the modules the server imported."""
    import os
    import time

    fake = tmp_path / "fake"
    (fake / "vllm" / "entrypoints" / "cli").mkdir(parents=True)
    for pkg in ("vllm", "vllm/entrypoints", "vllm/entrypoints/cli"):
        (fake / pkg / "__init__.py").write_text("")
    (fake / "vllm" / "entrypoints" / "cli" / "main.py").write_text(FAKE_MAIN)
    tracer = tmp_path / "tracer"
    tracer.mkdir()
    (tracer / "sitecustomize.py").write_text(check.TRACER)
    recorded = REPO / "tests" / "unit" / "fixtures" / "vllm_real" / "first" / "vllm-0.21.0-unpatched-h200.log"
    monkeypatch.setenv("FAKE_VLLM_LOG", str(recorded))
    monkeypatch.setenv("FAKE_VLLM_CHILD", str(tmp_path / "child.pid"))
    collections = next(p for p in sys.path if (Path(p) / "ansible_collections" / "sparkfleet").is_dir())
    out = tmp_path / "out"
    result = check.serve_and_check("unpatched", "/models/trained", [str(tracer), str(fake)], check.load_recipe(),
                                   collections, str(tmp_path / "site"), str(out), _free_port(), 30)
    assert result["healthy"]
    verdict = result["vllm_check"]
    assert verdict["failed"] and verdict["msg"].endswith("requested --moe-backend triton, but vLLM resolved MARLIN")
    assert [a["ok"] for a in verdict["answers"]] == [True, True]
    assert (out / "vllm-0.21.0-unpatched-h200.log").read_text() == recorded.read_text()
    child = int((tmp_path / "child.pid").read_text())
    for _unused in range(20):
        if not os.path.exists("/proc/%d" % child) or "Z" in open("/proc/%d/stat" % child).read().split()[2]:
            break
        time.sleep(0.1)
    else:
        pytest.fail("the engine child outlived its server")
    traced = [line for f in (out / "imports" / "unpatched").iterdir() for line in f.read_text().splitlines()]
    assert "http.server" in traced and "vllm.entrypoints.cli.main" in traced
