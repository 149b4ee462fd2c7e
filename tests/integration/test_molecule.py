"""`molecule test` of the default scenario: create, converge, idempotence, verify, destroy."""

from conftest import BIN, sh


def test_molecule_default_scenario():
    res = sh([str(BIN / "molecule"), "test", "-s", "default"], timeout=2400)
    assert res.returncode == 0, (res.stdout + res.stderr)[-6000:]
    assert "idempotence: Executed: Successful" in res.stdout + res.stderr
