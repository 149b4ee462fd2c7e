# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""Run a pure planner module on the controller, in the playbook's own process.

The planners (validate_inputs, topology_plan, ray_tuning) read only their arguments. As modules on
localhost each one costs a Python start and a module package (about 0.7 s); every playbook runs them, and
a re-run with nothing to change is otherwise about as long as these three. Their action plugins validate
the arguments against the module's own spec and call the same ``compute`` the module's ``main`` does.
"""

from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.sparkfleet.vllm.plugins.module_utils.validation import PlanFailure


def action_for(argument_spec, compute):
    class ActionModule(ActionBase):
        TRANSFERS_FILES = False
        _requires_connection = False

        def run(self, tmp=None, task_vars=None):
            result = super().run(tmp, task_vars)
            _validation, params = self.validate_argument_spec(argument_spec=argument_spec)
            try:
                result.update(compute(params))
            except PlanFailure as exc:
                result.update(exc.extra, failed=True, msg=str(exc))
            return result

    return ActionModule
