"""Run a hand-built plan through marun's executor, as `marun run` would after planning.

Usage: run_plan.py PLAN.json [--exec]
PLAN.json holds `{"mode", "node": {"index", "host"}, "processes": [ProcessSpec fields]}` and
optionally `"fail_fast": false` (as marun simulate's outer supervision of coordinating nodes).
Without --exec the node is supervised even when it holds one process. Supervision settings come
from the environment (MARUN_GRACE_PERIOD, ...), as for the CLI.
"""

import json
import os
import sys

from marun.errors import MarunError
from marun.inputs.injected import read_platform
from marun.inputs.records import replace
from marun.inputs.settings import load_settings
from marun.launch import open_link
from marun.plan.launch_plan import LaunchPlan, NodePlan, ProcessSpec
from marun.plan.modes.common import supervision
from marun.runtime.execute import execute


def main():
    with open(sys.argv[1]) as fh:
        data = json.load(fh)
    processes = tuple(ProcessSpec(**{**p, "argv": tuple(p["argv"])}) for p in data["processes"])
    node = NodePlan(index=data["node"]["index"], host=data["node"]["host"], processes=processes)
    try:
        env, cwd = dict(os.environ), os.getcwd()
        platform = read_platform([], env, cwd, load_settings({}, env, cwd).settings)
        watching = supervision(platform, always_supervise="--exec" not in sys.argv[2:])
        # result.json next to the first process's log, as before the plan named a directory
        watching = replace(watching, record_dir=None, fail_fast=data.get("fail_fast", True))
        plan = LaunchPlan(data.get("mode", "test"), (node,), supervision=watching)
        code = execute(plan, open_link)
    except MarunError as exc:
        sys.stderr.write(f"marun: error: {exc}\n")
        sys.exit(exc.exit_code)
    sys.exit(code)


if __name__ == "__main__":
    main()
