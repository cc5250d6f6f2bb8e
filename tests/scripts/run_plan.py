"""Run a hand-built plan through marun's executor, as `marun run` would after planning.

Usage: run_plan.py PLAN.json [--exec]
PLAN.json holds `{"mode", "node": {"index", "host"}, "processes": [ProcessSpec fields]}`.
Without --exec the node is supervised even when it holds one process. Settings come from the
environment (MARUN_GRACE_PERIOD, ...), as for the CLI.
"""

import json
import sys

from marun.errors import MarunError
from marun.plan.launch_plan import LaunchPlan, NodePlan, ProcessSpec
from marun.runtime.execute import execute


def main():
    with open(sys.argv[1]) as fh:
        data = json.load(fh)
    processes = tuple(ProcessSpec(**{**p, "argv": tuple(p["argv"])}) for p in data["processes"])
    node = NodePlan(index=data["node"]["index"], host=data["node"]["host"], processes=processes)
    plan = LaunchPlan(data.get("mode", "test"), (node,))
    try:
        code = execute(plan, supervise="--exec" not in sys.argv[2:])
    except MarunError as exc:
        sys.stderr.write(f"marun: error: {exc}\n")
        sys.exit(exc.exit_code)
    sys.exit(code)


if __name__ == "__main__":
    main()
