"""Run a module through its entry point the way Ansible's own module tests do: arguments passed with
``patch_module_args``, ``main()`` run, and the JSON that ``exit_json``/``fail_json`` print read back."""

import io
import json
from contextlib import redirect_stdout

import pytest
from ansible.module_utils.testing import patch_module_args


def run(module, args, check_mode=False):
    """(exit status, result) of ``module.main()`` called with ``args``."""
    out = io.StringIO()
    with patch_module_args(dict(args, _ansible_check_mode=check_mode)), redirect_stdout(out), \
            pytest.raises(SystemExit) as exc:
        module.main()
    return exc.value.code, json.loads(out.getvalue())
