"""One job, not N nodes: the coordination of a multi-node job's marun processes, in every mode
(MPI too: node 0 runs mpirun, the other nodes are daemons only). Node 0's marun runs the coordinator
(arrival and the start barrier, job-wide fail-fast, lost nodes, the hang watchdog, job.json);
every node's marun, node 0's included, is a member that reports to it. A job of one node runs the
same job machine in its own process (`local_job`). The protocol is in docs/supervision.md.

May import: `marun.inputs`, `marun.plan`, `marun.runtime` and the top-level helpers. Nothing
imports `marun.job` statically: `marun.launch.open_link` loads `marun.job.link` for a plan with a
coordination section, else `marun.job.local_job` (its machine only once the node's processes
started), and hands it to runtime.execute.
"""
