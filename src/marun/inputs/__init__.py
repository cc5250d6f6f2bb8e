"""What the platform hands a container, read once and checked: the injected environment and
appended arguments (`injected`), the Ascend rank table, host lists, the NIC, marun's settings.

May import: `marun.errors`, `marun._files`, `marun.redact`, the standard library and marun's
declared dependencies. Never `marun.plan`, `marun.runtime`, `marun.mpi`, `marun.sim`.
"""
