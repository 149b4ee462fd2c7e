# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""A secret that a container reads from a file on its node: the Ray token, the endpoint's API key.

By hand, not with the copy module: the module that starts the container writes the file in the same call
(one task on each node instead of two or three).
"""

from __future__ import annotations

import os
import stat
import tempfile


def write(path, text, check_mode):
    """Whether ``path`` had to be (re)written to hold ``text`` as a regular file of mode 0600.

    A missing directory is made with mode 0700; an existing one is left as it is (it may be shared, as
    /etc is). Written to a new file in the same directory, flushed to disk and renamed over the old one,
    so a reader never sees a part of it. In check mode it only says whether it would write.
    """
    if not os.path.isabs(path):
        raise OSError("%s is not an absolute path" % path)
    folder = os.path.dirname(path)
    data = text.encode()
    try:
        st = os.lstat(path)
        same = stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600
        if same:
            with open(path, "rb") as fh:
                same = fh.read() == data
    except FileNotFoundError:
        same = False
    if same or check_mode:
        return not same
    if not os.path.isdir(folder):
        os.makedirs(folder, mode=0o700)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".secret-")  # created 0600
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return True
