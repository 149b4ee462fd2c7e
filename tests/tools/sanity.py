# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""make sanity: `ansible-test sanity` on this working tree, as Ansible's own collections run it.

ansible-test needs the collection at a path that ends in ``ansible_collections/<namespace>/<name>`` and
refuses a symlinked one, so the working tree's files (tracked, and untracked ones git does not ignore) are
copied to such a path in a temporary directory, and the sanity tests run there with ``--venv`` (each test's
pinned requirements in its own virtual environment, built once under ~/.ansible/test).

ansible-test bootstraps pip in those environments with a script it downloads from
ci-files.testing.ansible.com. Where that host cannot be reached (this project's build machines), its own
error message says to save a bootstrap script at the cache path: the stand-in written here bootstraps the
pip bundled with Python (``ensurepip``) and lets it install the packages ansible-test asked get-pip for, from
the configured index (PyPI: ``--venv`` needs one), and is removed again after the run. No library does
this; it is the documented manual step, automated.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _pip_version():
    """The pip ansible-test bootstraps in its virtual environments (24.2 for ansible-core 2.19)."""
    try:
        import inspect

        from ansible_test._internal import python_requirements

        match = re.search(r"pip='([^']+)'", inspect.getsource(python_requirements.get_venv_packages))
        if match:
            return match.group(1)
    except (ImportError, OSError, TypeError):
        pass
    return "24.2"


PIP_VERSION = _pip_version()
GET_PIP_URL = "https://ci-files.testing.ansible.com/ansible-test/get-pip-%s.py" % PIP_VERSION
GET_PIP_CACHE = os.path.expanduser("~/.ansible/test/cache/get_pip_%s.py" % PIP_VERSION.replace(".", "_"))
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
STAND_IN = '''\
# Stand-in for get-pip.py (written by sparkfleet's tests/tools/sanity.py because %s was unreachable):
# bootstrap the pip bundled with Python, then let it install what get-pip was asked for. get-pip's own
# options --no-setuptools and --no-wheel only say what not to add, so they are dropped.
import ensurepip
import sys

ensurepip.bootstrap(upgrade=True)
from pip._internal.cli.main import main  # noqa: E402

extra = ["--cert", %r] if __import__("os").path.exists(%r) else []
sys.exit(main(["install"] + extra + [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]))
''' % (GET_PIP_URL, CA_BUNDLE, CA_BUNDLE)


def ensure_get_pip():
    """Make sure ansible-test finds its pip bootstrap script; True when the stand-in was written for this run."""
    if os.path.exists(GET_PIP_CACHE):
        return False
    os.makedirs(os.path.dirname(GET_PIP_CACHE), exist_ok=True)
    try:
        with urllib.request.urlopen(GET_PIP_URL, timeout=15) as resp:  # noqa: S310 (a fixed https URL)
            body = resp.read()
    except OSError as exc:
        print("sanity: %s unreachable (%s); writing the pip bootstrap stand-in to %s"
              % (GET_PIP_URL, exc, GET_PIP_CACHE))
        body = None
    with open(GET_PIP_CACHE + ".download", "wb") as fh:
        fh.write(body or STAND_IN.encode())
    os.replace(GET_PIP_CACHE + ".download", GET_PIP_CACHE)
    return body is None


def working_tree_files():
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, check=True,
                         capture_output=True).stdout
    return [p for p in out.decode().split("\0") if p]


def copy_tree(dest):
    for rel in working_tree_files():
        src, dst = os.path.join(REPO, rel), os.path.join(dest, rel)
        if not os.path.lexists(src):  # deleted in the working tree, not yet in the index
            continue
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        if os.path.islink(src):
            os.symlink(os.readlink(src), dst)
        else:
            shutil.copy2(src, dst)


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    stand_in = ensure_get_pip()
    ansible_test = os.path.join(os.path.dirname(sys.executable), "ansible-test")
    try:
        with tempfile.TemporaryDirectory(prefix="sparkfleet-sanity-") as tmp:
            dest = os.path.join(tmp, "ansible_collections", "sparkfleet", "vllm")
            copy_tree(dest)
            cmd = [ansible_test, "sanity", "--venv", "--python", "%d.%d" % sys.version_info[:2], "--color", "no"]
            return subprocess.run(cmd + argv, cwd=dest, check=False).returncode
    finally:
        if stand_in:  # the user-wide cache keeps only what ansible-test itself downloaded
            os.remove(GET_PIP_CACHE)


if __name__ == "__main__":
    sys.exit(main())
