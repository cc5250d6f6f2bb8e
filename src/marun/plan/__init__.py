"""From a `Platform` to a `LaunchPlan`: the plan value (`launch_plan`), one planner per mode
(`modes/`), and the dry-run's rendering (`render`).

May import: `marun.inputs` and the top-level helpers. Never `marun.runtime`, `marun.mpi` or
`marun.sim` (the MPI planner lives in `marun.mpi.planner`; `modes` finds it by name).
"""
