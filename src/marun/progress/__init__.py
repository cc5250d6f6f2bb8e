"""The job's progress, read from the ranks' own output (docs/supervision.md, "Progress"):
`recognise.py` (the step counters the frameworks print: tqdm, transformers.Trainer, Lightning,
Keras, MindSpore, a plain `step N`, a user's pattern), `tracker.py` (one node's ranks: each
rank's latest step and rate, and the node's bounded report, `NodeReport`), `aggregate.py`
(node 0: the job's status line, job.json's `progress` section, stragglers, the verdict that
the steps stopped while the ranks print on).

Pure code: no sockets, threads or clocks (the time is passed in), so a test drives it line by
line.

May import: the top-level helpers only. `marun.runtime` (the relay's hook) and `marun.job`
(node 0, the heartbeat) import it, lazily: nothing of it is loaded on marun's exec path.
"""
