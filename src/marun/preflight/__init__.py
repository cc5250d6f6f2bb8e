"""The preflight: a job that checks itself before it spends the cluster (docs/preflight.md).

`result.py` (the typed results: `CheckResult`, `LinkResult`, `NodeReport`, their bounded wire
form), `checks.py` (the per-node checks, bounded to about 2 s: devices, /dev/shm, free space,
this node's address, the `*_SOCKET_IFNAME` interfaces, the planned ports, the clock's offset),
`needs.py` (what this node's plan wants of it: `NodeNeeds` from a plan and its platform),
`ring.py` (the ring probe: one small TCP listener per node, a client that measures connect time,
round-trip time and a short bounded throughput to the next node's), `decide.py` (node 0's
decision from every node's report, per `--preflight off|on|warn|strict`, and job.json's
`preflight` section).

Imported only when a preflight runs (`marun doctor`, and a coordinated `marun run` whose
preflight is not off): nothing of it is on the exec path of a lone process.

May import: inputs, plan (values only).
"""
