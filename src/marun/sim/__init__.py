"""`marun simulate`: a whole job on this machine (one `marun run` per node on loopback, or per
network-namespace host for MPI).

May import any other part of marun; nothing imports `marun.sim` but the CLI.
"""
