"""`marun report --html` in a real browser: a simulated 4-node job (one rank each) whose node 2
fails in round 0 (a restart round follows) and whose node 3 fails in round 1 (no round left: the
job ends with its exit code 7); its page loaded by headless Chromium (Debian's `chromium`,
which scripts/bootstrap.sh installs). Checked: the DOM Chromium rendered (a row per node, the
round, both failures, the job's first failure marked on node 3, hover text on every mark), that
the console logged no error and nothing was fetched, and a screenshot was taken.

`MARUN_UPDATE_SCREENSHOT=1` copies the screenshot to docs/images/report.png, the picture of a
report in docs/supervision.md.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, run_marun

pytestmark = pytest.mark.e2e

# rank 2 fails at once in round 0; rank 3 a second into round 1; the others outlive both
RANK = (
    'if [ "$RANK$MARUN_RESTART_COUNT" = 20 ]; then echo "CUDA error: out of memory" >&2; exit 3; '
    'fi; if [ "$RANK$MARUN_RESTART_COUNT" = 31 ]; then sleep 1; '
    'echo "RuntimeError: NCCL timeout" >&2; exit 7; fi; sleep 6'
)


def _chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if not path:
        pytest.skip("no chromium: apt-get install chromium (scripts/bootstrap.sh does, as root)")
    return path


def _browse(chromium: str, page: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",  # root in a container has no user namespace sandbox
            "--disable-gpu",
            "--no-first-run",
            "--enable-logging=stderr",
            "--v=0",
            f"--user-data-dir={page.parent / 'chromium-profile'}",
            "--window-size=1000,620",
            *args,
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_report_page_of_a_4_node_job_renders_in_chromium(tmp_path: Path) -> None:
    chromium = _chromium()
    logs = tmp_path / "logs"
    job = ["--mode", "pytorch", "--nodes", "4", "--devices", "1", "--max-restarts", "1"]
    sim = run_marun(
        ["simulate", *job, "--no-show-plan", "--log-dir", str(logs), "--", "bash", "-c", RANK],
        timeout=120,
    )
    assert sim.returncode == 7, sim.stdout + sim.stderr
    page = tmp_path / "report.html"
    rep = run_marun(["report", str(logs), "--html", str(page)])
    assert rep.returncode == 0, rep.stderr
    assert "first failure: node 3 (" in rep.stdout and "rank 3 [rank3] exit 7" in rep.stdout
    assert re.search(r"^round 1 after node 2 \(.*\) rank 2 \[rank2\] exit 3: ", rep.stdout, re.M)

    dom = _browse(chromium, page, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    assert 'id="outcome">failed, exit code 7<' in html
    for node in range(4):
        for mark in ("arrived", "started", "ended"):
            assert f'class="mark {mark}" data-node="{node}"' in html, (node, mark)
    assert html.count('class="mark round"') == 1
    assert html.count('class="mark failure"') == 2
    assert re.search(r'class="mark failure" id="first-failure" data-node="3"><title>', html)
    assert html.count("<title>") == 4 * 3 + 1 + 2 + 1  # every mark's hover text, and the page's
    assert "RuntimeError: NCCL timeout" in html  # the first failure's last line, in its hover
    # the page's console: no message at all (it has no script), nothing refused or fetched
    console = [
        line
        for line in dom.stderr.splitlines()
        if ":CONSOLE" in line or "Refused to" in line or "net::ERR" in line
    ]
    assert console == [], console

    shot = tmp_path / "report.png"
    res = _browse(chromium, page, f"--screenshot={shot}", "--hide-scrollbars")
    assert res.returncode == 0, res.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
    if os.environ.get("MARUN_UPDATE_SCREENSHOT") == "1":
        shutil.copyfile(shot, REPO / "docs" / "images" / "report.png")
