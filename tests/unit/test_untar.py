"""A received snapshot is unpacked member by member: what a Hugging Face snapshot never holds is refused
before anything is written under its name."""

import hashlib
import io
import os
import tarfile

import pytest

from ansible_collections.sparkfleet.vllm.plugins.module_utils.untar import BadBlob, UnsafeMember, extract_repo

TOP = "models--o--m"
BLOB = hashlib.sha256(b"{}").hexdigest()
SMALL = b"a small file, named by its git sha1"
GIT = hashlib.sha1(b"blob %d\0" % len(SMALL) + SMALL).hexdigest()  # noqa: S324


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
    (f"{TOP}/blobs/{GIT}", "file", SMALL),
    (f"{TOP}/snapshots/rev/README.md", "sym", f"../../blobs/{GIT}"),
]


def test_a_snapshot_unpacks_with_its_links_into_blobs(tmp_path):
    assert extract_repo(tar_of(*GOOD), str(tmp_path), TOP) == 6
    snap = tmp_path / TOP / "snapshots" / "rev"
    assert (snap / "config.json").read_bytes() == b"{}"
    assert (snap / "sub" / "x.py").read_bytes() == b"{}"
    assert (snap / "README.md").read_bytes() == b"a small file, named by its git sha1"


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
    "a name twice": [(f"{TOP}/blobs/{BLOB}", "file", b"{}"), (f"{TOP}/blobs/{BLOB}", "file", b"{}")],
    "empty part": [(f"{TOP}//blobs/x", "file", b"x")],
    # A directory among the blobs, and links whose text resolves into blobs/ but whose real path, through
    # other links, climbs out (the kernel follows a link before it applies '..').
    "links through a directory in blobs": [(f"{TOP}/blobs/D", "dir", None)],
    "a link whose '..' climbs through another link": [
        (f"{TOP}/snapshots/rev/S", "sym", "../../blobs/D"),
        (f"{TOP}/blobs/D/a/b/c/L", "sym", "../../../../E"),
        (f"{TOP}/snapshots/rev/tokenizer.json", "sym", "S/a/b/c/L/../../../../../../../blobs/" + BLOB)],
    "the same, with the directory first": [
        (f"{TOP}/blobs/D", "dir", None),
        (f"{TOP}/snapshots/rev/S", "sym", "../../blobs/D"),
        (f"{TOP}/snapshots/rev/tokenizer.json", "sym", "S/../../blobs/" + BLOB)],
    "a regular file among the snapshot's links": [(f"{TOP}/snapshots/rev/plain.txt", "file", b"x")],
    "a link among the blobs": [(f"{TOP}/blobs/{BLOB}", "sym", "../../etc/passwd")],
    "a blob not named by its hash": [(f"{TOP}/blobs/payload.bin", "file", b"x")],
    "a link with a deeper climb than its depth": [(f"{TOP}/snapshots/rev/a", "sym", f"../../../blobs/{BLOB}")],
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_members_are_refused_before_they_are_written(tmp_path, case):
    dest = tmp_path / "stage"
    dest.mkdir()
    with pytest.raises(UnsafeMember) as err:
        extract_repo(tar_of(*HOSTILE[case]), str(dest), TOP)
    refused = [m[0] for m in HOSTILE[case] if repr(m[0]) in str(err.value)]
    assert refused, str(err.value)
    if [m[0] for m in HOSTILE[case]].count(refused[0]) == 1:  # (a name twice: its first copy stays)
        assert not os.path.lexists(dest / refused[0])
    assert not (tmp_path / "x").exists()


def test_each_blob_is_hashed_as_it_is_written_and_published_as_it_checks_out(tmp_path):
    published = []
    extract_repo(tar_of(*GOOD), str(tmp_path), TOP, done=lambda blob, path, size: published.append((blob, size)))
    assert published == [(BLOB, 2), (GIT, len(SMALL))]


def test_a_blob_whose_bytes_do_not_match_its_name_is_refused_and_removed(tmp_path):
    members = [(f"{TOP}/blobs/{BLOB}", "file", b"{} "), (f"{TOP}/snapshots/rev/config.json", "sym", f"../../blobs/{BLOB}")]
    with pytest.raises(BadBlob, match="blob %s arrived with content %s" % (BLOB, hashlib.sha256(b"{} ").hexdigest())):
        extract_repo(tar_of(*members), str(tmp_path), TOP)
    assert not (tmp_path / TOP / "blobs" / BLOB).exists()


def test_a_blob_already_verified_here_is_read_past_not_written(tmp_path):
    published = []
    extract_repo(tar_of(*GOOD), str(tmp_path), TOP, wanted=lambda blob: blob != BLOB,
                 done=lambda blob, path, size: published.append(blob))
    assert published == [GIT] and not (tmp_path / TOP / "blobs" / BLOB).exists()
    assert (tmp_path / TOP / "snapshots" / "rev" / "README.md").read_bytes() == SMALL


def test_the_packed_size_is_the_stream_length_exactly(tmp_path):
    import make_checkpoint

    from ansible_collections.sparkfleet.vllm.plugins.module_utils import checkpoint
    from ansible_collections.sparkfleet.vllm.plugins.module_utils.untar import pack_repo, packed_size

    info = make_checkpoint.write_checkpoint(tmp_path / "hub", "kimi", {"layers": 2, "experts": 2, "shards": 2})
    rdir = checkpoint.repo_dir(str(tmp_path / "hub"), info["repo_id"])
    sdir = checkpoint.snapshot_dir(str(tmp_path / "hub"), info["repo_id"], info["revision"])
    for skip in (set(), {sorted(info["files"].values())[0]}):
        out = io.BytesIO()
        pack_repo(out, rdir, sdir, info["revision"], info["files"], skip)
        assert packed_size(rdir, sdir, info["revision"], info["files"], skip) == len(out.getvalue())
