# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""Download one pinned snapshot from the Hugging Face Hub into a node's cache, with huggingface_hub.

``huggingface_hub`` does the work: its ``snapshot_download`` resolves the file list at the pinned commit,
retries a file cut mid-way with a Range request within the run, and lays the files out as the cache's blobs
and links. Since 2.0 a file is written to a temporary named for its process and removed when the run fails,
so the next run starts that file over and skips only the files it completed. This module only reports its
byte progress, names the failures, and keeps the token out of every message. It is imported only where the
download runs, so nodes that never download need no package.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import threading
import time
from urllib.error import HTTPError, URLError
from urllib.parse import quote, urlsplit

from ansible.module_utils.urls import open_url

try:
    import huggingface_hub
    from huggingface_hub import errors
    from tqdm import tqdm
except ImportError as exc:  # the module reports it, naming the pin to install
    HUB_IMPORT_ERROR = str(exc)
    tqdm = object
else:
    HUB_IMPORT_ERROR = None

PIN = "huggingface_hub==2.0.0"


class DownloadError(Exception):
    pass


def _progress_class(report, bars, min_interval=0.5):
    """A tqdm subclass for snapshot_download: silent, it hands the bytes written so far and the total to
    ``report(done, total)``, at most every ``min_interval`` seconds; the bars made are added to ``bars``."""
    lock = threading.Lock()  # snapshot_download updates one bar from its worker threads

    class Reported(tqdm):
        def __init__(self, *args, **kwargs):
            kwargs.pop("name", None)
            self._bytes = kwargs.get("unit") == "B" and str(kwargs.get("desc", "")).startswith("Reconstructing")
            self._last = 0.0
            bars.append(self)
            kwargs["file"] = open(os.devnull, "w")  # closed with the bar
            super().__init__(*args, **kwargs)

        def update(self, n=1):
            with lock:
                out = super().update(n)
                if self._bytes and time.monotonic() - self._last >= min_interval:
                    self._last = time.monotonic()
                    report(int(self.n), int(self.total or 0))
            return out

        def close(self):
            fp = self.fp
            super().close()
            fp.close()

    return Reported


def download(hub_dir, repo_id, revision, endpoint=None, token=None, report=None, max_workers=8):
    """Download ``repo_id`` at the commit ``revision`` into the cache ``hub_dir``. Returns the snapshot's
    path. Raises DownloadError with a message that names the repo, the revision and the fix, never the
    token."""
    if HUB_IMPORT_ERROR:
        raise DownloadError("huggingface_hub is not importable here (%s); install %s for this interpreter"
                            % (HUB_IMPORT_ERROR, PIN))
    where, bars = endpoint or "the Hugging Face Hub", []
    try:
        path = huggingface_hub.snapshot_download(
            repo_id, revision=revision, cache_dir=hub_dir, endpoint=endpoint or None, token=token or False,
            max_workers=max_workers, tqdm_class=_progress_class(report, bars) if report else None)
        for made in bars:
            if made._bytes:  # the last figures: the bar is left open by snapshot_download
                report(int(made.n), int(made.total or 0))
            made.close()
        return path
    except errors.GatedRepoError:
        raise DownloadError("%s is gated on %s and the token given has no access to it; accept its terms on "
                            "the Hub and set sparkfleet_hf_token" % (repo_id, where)) from None
    except errors.RevisionNotFoundError:
        raise DownloadError("%s has no revision %s on %s; set the recipe's revision to a commit of the repo"
                            % (repo_id, revision, where)) from None
    except errors.RepositoryNotFoundError as exc:
        status = getattr(getattr(exc, "response", None), "status_code", None)
        raise DownloadError("%s was not found on %s (HTTP %s): the repo id is wrong, or it is private and %s; "
                            "fix repo_id or sparkfleet_hf_token" % (
                                repo_id, where, status, "the token was refused" if token else "no token was given")
                            ) from None
    except errors.LocalEntryNotFoundError as exc:
        raise DownloadError("%s could not be reached for %s@%s (%s); the files already received are kept and "
                            "the next run resumes them" % (where, repo_id, revision, _first_line(exc))) from None
    except errors.HfHubHTTPError as exc:
        if getattr(getattr(exc, "response", None), "status_code", None) == 401:
            raise DownloadError("%s refused the token given for %s (HTTP 401): the token was refused; set "
                                "sparkfleet_hf_token to a token with read access to the repo" % (where, repo_id)
                                ) from None
        raise DownloadError("%s answered %s for %s@%s; the next run resumes what was received"
                            % (where, _first_line(exc), repo_id, revision)) from None
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            free = shutil.disk_usage(hub_dir).free
            raise DownloadError("the disk under %s is full (%d bytes free) while downloading %s; free space "
                                "there or point sparkfleet_hf_cache_dir elsewhere" % (hub_dir, free, repo_id)
                                ) from None
        raise DownloadError("downloading %s@%s from %s failed: %s; the next run resumes what was received"
                            % (repo_id, revision, where, _first_line(exc))) from None
    except Exception as exc:  # noqa: BLE001 - httpx2's transport errors after the client's own retries
        raise DownloadError("downloading %s@%s from %s failed: %s: %s; the next run resumes what was received"
                            % (repo_id, revision, where, type(exc).__name__, _first_line(exc))) from None


def hub_listing(endpoint, repo_id, revision, token=None, timeout=30):
    """The files of ``repo_id`` at ``revision`` on the Hub: {path: size}, through its tree API (the same
    listing snapshot_download fetches), following its pagination. Needs only the standard library and
    Ansible's ``open_url``, so the preflight can ask before anything is installed."""
    url = "%s/api/models/%s/tree/%s?recursive=true" % (endpoint.rstrip("/"), repo_id, quote(revision, safe=""))
    origin = urlsplit(url)[:2]
    headers = {"Authorization": "Bearer %s" % token} if token else {}
    files = {}
    while url:
        try:
            # No redirects, and pages only from the endpoint's own origin: the token goes nowhere else.
            resp = open_url(url, headers=headers, timeout=timeout, validate_certs=True, follow_redirects="none")
            entries, link = json.loads(resp.read().decode()), resp.headers.get("Link") or ""
        except HTTPError as exc:
            code = exc.headers.get("X-Error-Code") if exc.headers else None
            if code == "RevisionNotFound":
                raise DownloadError("%s has no revision %s on %s; set the recipe's revision to a commit of the repo"
                                    % (repo_id, revision, endpoint)) from None
            if exc.code in (401, 403, 404):
                why = ("the token was refused" if token and code != "RepoNotFound" else
                       "it is private and %s" % ("the token has no access" if token else "no token was given"))
                raise DownloadError("%s was not found on %s (HTTP %d): the repo id is wrong, or %s; fix repo_id or "
                                    "sparkfleet_hf_token" % (repo_id, endpoint, exc.code, why)) from None
            raise DownloadError("%s answered HTTP %d for %s@%s" % (endpoint, exc.code, repo_id, revision)) from None
        except (URLError, OSError, ValueError) as exc:
            why = _first_line(exc)
            raise DownloadError("%s could not be reached for %s@%s: %s" % (endpoint, repo_id, revision, why)) from None
        for entry in entries:
            if entry.get("type") == "file":
                files[entry["path"]] = int((entry.get("lfs") or {}).get("size") or entry.get("size") or 0)
        nxt = re.search(r'<([^>]+)>;\s*rel="next"', link)
        url = nxt.group(1) if nxt else None
        if url and urlsplit(url)[:2] != origin:
            raise DownloadError("%s sent the next page of %s at another origin (%s); refused, the token goes only "
                                "to sparkfleet_hf_endpoint" % (endpoint, repo_id, "%s://%s" % urlsplit(url)[:2]))
    return files


def _first_line(exc):
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
