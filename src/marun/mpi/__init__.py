"""Everything MPI mode adds: its planner, the key-only sshd (config template, bootstrap, keys),
node 0's leader (cluster formation, then `mpirun`). The other nodes run sshd only; the job's
coordination (marun.job) ends them with the job, as in every mode.

May import: `marun.inputs`, `marun.plan`, `marun.runtime` and the top-level helpers. Nothing
imports `marun.mpi` but the mode registry (by name) and `marun.sim`.
"""
