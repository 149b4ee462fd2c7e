"""A Hugging Face Hub stand-in for the tests: the real ``huggingface_hub`` client downloads the simulated
checkpoints from it through ``HF_ENDPOINT``.

It serves, from a directory in the Hugging Face cache layout (``models--ORG--NAME/snapshots/<commit>/``),
the endpoints ``snapshot_download`` uses, with the headers the client checks:

- ``GET /api/models/ORG/NAME/revision/REV``: the repo's commit (``sha``) and files (``siblings``);
- ``GET /api/models/ORG/NAME/tree/REV``: every file with its git blob id, size and, for LFS files (those
  the cache names by sha256), ``lfs.oid`` and ``lfs.size``;
- ``HEAD``/``GET /ORG/NAME/resolve/REV/PATH``: ``X-Repo-Commit``, ``ETag`` (the git blob id) and for LFS
  files ``X-Linked-Etag`` (the sha256) and ``X-Linked-Size``; ``Range: bytes=N-`` gets 206 and
  ``Content-Range``, as the client asks when it resumes an ``.incomplete`` file.

With a token set, every request must carry ``Authorization: Bearer <token>`` (else 401). ``cut_after``
makes a file body stop after that many bytes and the link go down (``down``): every later connection is
dropped unanswered until ``down`` is cleared. The bytes of file bodies sent are counted in
``bytes_served``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

CHUNK = 1 << 16


def _lfs_pointer(sha256, size):
    return ("version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n" % (sha256, size)).encode()


def _git_blob_id(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()  # noqa: S324 - git's object name


class Repo:
    """One repo of the cache: its commit and its files (path -> (blob name, size, real path))."""

    def __init__(self, rdir, commit):
        self.commit = commit
        sdir = os.path.join(rdir, "snapshots", commit)
        self.files = {}
        for here, _dirs, names in os.walk(sdir):
            for name in names:
                path = os.path.join(here, name)
                rel = os.path.relpath(path, sdir)
                blob = os.path.basename(os.path.realpath(path))
                self.files[rel] = (blob, os.path.getsize(path), path)

    def entry(self, rel):
        blob, size, _path = self.files[rel]
        if len(blob) == 64:  # an LFS file: git holds its pointer
            return {"type": "file", "path": rel, "size": size, "oid": _git_blob_id(_lfs_pointer(blob, size)),
                    "lfs": {"oid": blob, "size": size, "pointerSize": len(_lfs_pointer(blob, size))}}
        return {"type": "file", "path": rel, "size": size, "oid": blob}


class HubServer:
    def __init__(self, hub_dir, token=None, host="127.0.0.1", port=0):
        self.hub_dir, self.token = hub_dir, token
        self.cut_after = None
        self.down = False
        self.bytes_served = 0
        self.requests = []
        self._lock = threading.Lock()
        self.httpd = ThreadingHTTPServer((host, port), self._handler())
        self.httpd.daemon_threads = True
        self.url = "http://%s:%d" % (host, self.httpd.server_address[1])

    def start(self):
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    def repo(self, org, name, revision):
        rdir = os.path.join(self.hub_dir, "models--%s--%s" % (org, name))
        if not os.path.isdir(rdir):
            return None, "RepoNotFound"
        commit = revision
        ref = os.path.join(rdir, "refs", revision)
        if os.path.isfile(ref):
            with open(ref) as fh:
                commit = fh.read().strip()
        if not re.fullmatch(r"[0-9a-f]{40}", commit) or not os.path.isdir(os.path.join(rdir, "snapshots", commit)):
            return None, "RevisionNotFound"
        return Repo(rdir, commit), None

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_args):
                pass

            def _send(self, status, body=b"", headers=None):
                self.send_response(status)
                for k, v in (headers or {}).items():
                    self.send_header(k, str(v))
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def _json(self, obj, status=200, headers=None):
                headers = dict({"Content-Type": "application/json"}, **(headers or {}))
                self._send(status, json.dumps(obj).encode(), headers)

            def _authorised(self):
                if server.token is None:
                    return True
                given = self.headers.get("Authorization")
                if given == "Bearer " + server.token:
                    return True
                if given:  # the Hub's answer to a bad token
                    self._json({"error": "Invalid credentials in Authorization header"}, 401)
                else:  # and to none, for a private repo: it does not say the repo exists
                    self._json({"error": "Repository Not Found"}, 401,
                               {"X-Error-Code": "RepoNotFound", "X-Error-Message": "Repository Not Found"})
                return False

            def do_HEAD(self):
                self.do_GET()

            def do_GET(self):
                path = unquote(urlsplit(self.path).path)
                if server.down:  # the link is down: no answer at all
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                with server._lock:
                    server.requests.append((self.command, path))
                if not self._authorised():
                    return
                api = re.fullmatch(r"/api/models/([^/]+)/([^/]+)/(revision|tree)/([^/]+)(?:/(.*))?", path)
                resolve = re.fullmatch(r"/([^/]+)/([^/]+)/resolve/([^/]+)/(.+)", path)
                match = api or resolve
                if not match:
                    return self._json({"error": "not found"}, 404)
                org, name = match.group(1), match.group(2)
                repo, error = server.repo(org, name, match.group(4) if api else match.group(3))
                if repo is None:
                    return self._json({"error": error}, 404, {"X-Error-Code": error})
                if api and match.group(3) == "revision":
                    return self._json({"id": "%s/%s" % (org, name), "sha": repo.commit, "private": False,
                                       "siblings": [{"rfilename": p} for p in sorted(repo.files)]})
                if api:
                    prefix = match.group(5) or ""
                    entries = [repo.entry(p) for p in sorted(repo.files) if p.startswith(prefix)]
                    dirs = sorted({os.path.dirname(p) for p in repo.files if os.path.dirname(p)})
                    entries += [{"type": "directory", "path": d, "oid": "0" * 40, "size": 0} for d in dirs]
                    return self._json(entries)
                rel = match.group(4)
                if rel not in repo.files:
                    return self._json({"error": "EntryNotFound"}, 404, {"X-Error-Code": "EntryNotFound"})
                self._file(repo, rel)

            def _file(self, repo, rel):
                entry = repo.entry(rel)
                blob, size, real = repo.files[rel]
                headers = {"X-Repo-Commit": repo.commit, "ETag": '"%s"' % entry["oid"], "Accept-Ranges": "bytes",
                           "Content-Type": "application/octet-stream"}
                if "lfs" in entry:
                    headers.update({"X-Linked-Etag": '"%s"' % blob, "X-Linked-Size": size})
                start = 0
                ranged = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range") or "")
                if ranged and int(ranged.group(1)) < size:
                    start = int(ranged.group(1))
                    headers["Content-Range"] = "bytes %d-%d/%d" % (start, size - 1, size)
                self.send_response(206 if start else 200)
                for k, v in headers.items():
                    self.send_header(k, str(v))
                self.send_header("Content-Length", str(size - start))
                self.end_headers()
                if self.command == "HEAD":
                    return
                budget = server.cut_after
                with open(real, "rb") as fh:
                    fh.seek(start)
                    while True:
                        chunk = fh.read(CHUNK if budget is None else min(CHUNK, budget))
                        if not chunk:
                            break
                        self.wfile.write(chunk)
                        with server._lock:
                            server.bytes_served += len(chunk)
                        if budget is not None:
                            budget -= len(chunk)
                            if budget <= 0 and fh.tell() < size:
                                server.cut_after, server.down = None, True
                                self.close_connection = True
                                self.wfile.flush()
                                self.connection.shutdown(2)  # the network is cut mid-file
                                return

        return Handler


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    ap.add_argument("--hub", required=True, help="directory in the Hugging Face cache layout")
    ap.add_argument("--host", default="0.0.0.0")  # noqa: S104 - a test server on the simulated fabric
    ap.add_argument("--port", type=int, default=5080)
    ap.add_argument("--token-file", help="a file holding the token every request must carry")
    ap.add_argument("--cut-after", type=int, help="drop the connection after this many bytes of each file")
    args = ap.parse_args()
    token = open(args.token_file).read().strip() if args.token_file else None
    server = HubServer(args.hub, token=token, host=args.host, port=args.port)
    server.cut_after = args.cut_after
    print("serving %s on %s" % (args.hub, server.url), flush=True)
    server.httpd.serve_forever()


if __name__ == "__main__":
    main()
