"""Carrying out one node's `LaunchPlan`: exec a lone process or supervise many (start, relay
output, fail fast, relay signals, reap, write `result.json`).

May import: `marun.plan`, `marun.inputs` and the top-level helpers. Never `marun.mpi` or
`marun.sim`.
"""
