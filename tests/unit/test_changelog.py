"""CHANGELOG.rst is what antsibull-changelog renders from changelogs/changelog.yaml, and the fragments lint."""

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def test_changelog_rst_is_rendered_from_the_changelog_data(tmp_path):
    for name in ("galaxy.yml", "CHANGELOG.rst"):
        shutil.copy(REPO / name, tmp_path / name)
    shutil.copytree(REPO / "changelogs", tmp_path / "changelogs")
    # The plugin cache is committed, so rendering needs no ansible-doc run.
    assert (tmp_path / "changelogs" / ".plugin-cache.yaml").is_file()
    res = subprocess.run([str(BIN / "antsibull-changelog"), "generate"], cwd=tmp_path, capture_output=True,
                         text=True, check=False)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "CHANGELOG.rst").read_text() == (REPO / "CHANGELOG.rst").read_text(), (
        "CHANGELOG.rst is out of date: run antsibull-changelog generate")


def test_the_fragments_lint():
    res = subprocess.run([str(BIN / "antsibull-changelog"), "lint"], cwd=REPO, capture_output=True, text=True,
                         check=False)
    assert res.returncode == 0 and not res.stdout.strip(), res.stdout + res.stderr
