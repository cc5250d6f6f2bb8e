"""`marun report [LOG_DIR]`: what a job came to, for a person in ten seconds, from what its marun
wrote: files.py (finding and reading job.json, result.json, marun-events.log), summary.py (the
report's one value, also its JSON), render.py (text; one HTML page with the job's timeline),
preflight.py (job.json's preflight section, as lines).

May import: the helpers (errors) only. It reads the files marun writes, never the job's or the
runtime's code, so a report of a job run by another marun version still reads."""
