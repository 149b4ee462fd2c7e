# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""A secret that a container reads from a file on its node: the Ray token, the endpoint's API key.

By hand, not with the copy module: the module that starts the container writes the file in the same call
(one task on each node instead of three).
"""

from __future__ import annotations

import os
import tempfile


def write(path, text, check_mode):
    """Whether ``path`` had to be (re)written to hold ``text``, mode 0600 in a directory of mode 0700.

    Written to a new file and renamed over the old one, so a reader never sees a part of it. In check mode
    it only says whether it would write.
    """
    folder = os.path.dirname(path)
    data = text.encode()
    try:
        with open(path, "rb") as fh:
            same = fh.read() == data and os.stat(path).st_mode & 0o777 == 0o600
        same = same and os.stat(folder).st_mode & 0o777 == 0o700
    except FileNotFoundError:
        same = False
    if same or check_mode:
        return not same
    os.makedirs(folder, mode=0o700, exist_ok=True)
    os.chmod(folder, 0o700)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".secret-")  # created 0600
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except OSError:
        os.unlink(tmp)
        raise
    return True
