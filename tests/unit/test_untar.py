"""A received snapshot is unpacked member by member: what a Hugging Face snapshot never holds is refused
before anything is written under its name."""

import io
import os
import tarfile

import pytest

from ansible_collections.sparkfleet.vllm.plugins.module_utils.untar import UnsafeMember, extract_repo

TOP = "models--o--m"
BLOB = "a" * 64


def tar_of(*members):
    """members: (name, kind, data_or_target)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, kind, payload in members:
            info = tarfile.TarInfo(name)
            if kind == "file":
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
                continue
            info.type = {"dir": tarfile.DIRTYPE, "sym": tarfile.SYMTYPE, "hard": tarfile.LNKTYPE,
                         "chr": tarfile.CHRTYPE, "blk": tarfile.BLKTYPE, "fifo": tarfile.FIFOTYPE}[kind]
            if kind in ("sym", "hard"):
                info.linkname = payload
            tar.addfile(info)
    buf.seek(0)
    return buf


GOOD = [
    (f"{TOP}/blobs/{BLOB}", "file", b"{}"),
    (f"{TOP}/snapshots/rev", "dir", None),
    (f"{TOP}/snapshots/rev/config.json", "sym", f"../../blobs/{BLOB}"),
    (f"{TOP}/snapshots/rev/sub/x.py", "sym", f"../../../blobs/{BLOB}"),
    (f"{TOP}/snapshots/rev/plain.txt", "file", b"regular files are allowed"),
]


def test_a_snapshot_unpacks_with_its_links_into_blobs(tmp_path):
    assert extract_repo(tar_of(*GOOD), str(tmp_path), TOP) == 5
    snap = tmp_path / TOP / "snapshots" / "rev"
    assert (snap / "config.json").read_bytes() == b"{}"
    assert (snap / "sub" / "x.py").read_bytes() == b"{}"
    assert (snap / "plain.txt").read_bytes() == b"regular files are allowed"


HOSTILE = {
    "absolute name": [("/etc/cron.d/x", "file", b"x")],
    "dot-dot": [(f"{TOP}/../../x", "file", b"x")],
    "outside the repo": [("models--other--m/blobs/" + BLOB, "file", b"x")],
    "link to an absolute path": [(f"{TOP}/snapshots/rev/tokenizer.json", "sym", "/etc/hostname")],
    "link out of the repo": [(f"{TOP}/snapshots/rev/tokenizer.json", "sym", "../../../../etc/hostname")],
    "link into the snapshots, not the blobs": [(f"{TOP}/snapshots/rev/a", "sym", "b")],
    "link below blobs": [(f"{TOP}/snapshots/rev/a", "sym", "../../blobs/x/y")],
    "hard link": [(f"{TOP}/blobs/{BLOB}", "hard", "/etc/shadow")],
    "character device": [(f"{TOP}/blobs/dev", "chr", None)],
    "block device": [(f"{TOP}/blobs/dev", "blk", None)],
    "fifo": [(f"{TOP}/blobs/pipe", "fifo", None)],
    "path through a link": [(f"{TOP}/snapshots/rev/d", "sym", f"../../blobs/{BLOB}"),
                            (f"{TOP}/snapshots/rev/d/x", "file", b"x")],
    "a name twice": [(f"{TOP}/blobs/{BLOB}", "file", b"x"), (f"{TOP}/blobs/{BLOB}", "file", b"y")],
    "empty part": [(f"{TOP}//blobs/x", "file", b"x")],
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_members_are_refused_before_they_are_written(tmp_path, case):
    dest = tmp_path / "stage"
    dest.mkdir()
    with pytest.raises(UnsafeMember) as err:
        extract_repo(tar_of(*HOSTILE[case]), str(dest), TOP)
    bad = HOSTILE[case][-1][0]
    assert repr(bad) in str(err.value)
    written = {os.path.relpath(os.path.join(d, f), dest) for d, dirs, fs in os.walk(dest) for f in fs + dirs}
    earlier = {m[0] for m in HOSTILE[case][:-1]}
    assert {w for w in written if "/".join(w.split(os.sep)) not in earlier and not any(
        e.startswith("/".join(w.split(os.sep)) + "/") for e in earlier)} == set()
    assert not (tmp_path / "x").exists()
