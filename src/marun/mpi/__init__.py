"""Everything MPI mode adds: its planner, the key-only sshd (config template, bootstrap, keys),
node 0's leader (cluster formation, then `mpirun`) and the other nodes' follower.

May import: `marun.inputs`, `marun.plan`, `marun.runtime` and the top-level helpers. Nothing
imports `marun.mpi` but the mode registry (by name) and `marun.sim`.
"""
