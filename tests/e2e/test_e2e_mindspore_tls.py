"""MindSpore's secure channel end to end: a two-node MindSpore CPU dynamic cluster with
`ms_ssl` on. The certificates are made by the real `openssl` in the test (a CA, server and
client p12 files with a password); each node is a real `marun run --mode mindspore` under the
MindSpore venv; examples/mindspore_cluster.py calls `set_ps_context(..., enable_ssl=True)` with
what marun hands it. The passwords reach marun through the environment only, and must appear in
no output or file marun writes.
"""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import pytest
from local_cluster import LocalCluster, free_ports, rank_results

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ms_certs import make_certs

pytestmark = pytest.mark.e2e

NODES, DEVICES = 2, 1
DEADLINE = 120  # seconds; a hang guard only
RUN = ["run", "--mode", "mindspore", "--", "examples/mindspore_cluster.py", "--steps", "2"]


def tls_env(node: int, port: int, certs_dir: Path, run_dir: Path, password: str) -> dict[str, str]:
    return {
        "MA_NUM_HOSTS": str(NODES),
        "MA_NUM_GPUS": str(DEVICES),
        "VC_TASK_INDEX": str(node),
        "VC_WORKER_HOSTS": ",".join(["127.0.0.1"] * NODES),
        "MARUN_MS_SCHED_PORT": str(port),
        "MARUN_RUN_DIR": str(run_dir),
        "MARUN_MS_SSL": "1",
        "MARUN_MS_SERVER_CERT": str(certs_dir / "server.p12"),
        "MARUN_MS_CLIENT_CERT": str(certs_dir / "client.p12"),
        "MARUN_MS_CA_CERT": str(certs_dir / "ca.pem"),
        "MARUN_MS_CLIENT_PASSWORD": password,
        "MARUN_MS_SERVER_PASSWORD": password,
    }


def test_two_node_cluster_trains_over_tls(tmp_path: Path) -> None:
    certs = make_certs(tmp_path / "certs")
    (port,) = free_ports(1)
    with LocalCluster(tmp_path, "mindspore") as cluster:
        nodes = [
            cluster.start(
                f"node{n}",
                RUN,
                tls_env(n, port, tmp_path / "certs", tmp_path / f"run{n}", certs.password),
            )
            for n in range(NODES)
        ]
        codes = [node.wait(DEADLINE) for node in nodes]
        assert codes == [0, 0], cluster.report()
        # node 1 runs one process, which marun execs: its output is on the node's stdout
        logs = "".join(node.logs() + node.stdout for node in nodes)
        results = rank_results(logs)
        assert sorted(results) == list(range(NODES * DEVICES)), cluster.report()
        assert len({r.checksum for r in results.values()}) == 1, results
        cluster.assert_nothing_left()

    for n in range(NODES):
        config = tmp_path / f"run{n}" / "mindspore_tls.json"
        assert stat.S_IMODE(config.stat().st_mode) == 0o600
        data = json.loads(config.read_text())
        assert data["ca_cert_path"] == str(certs.ca)
        assert data["server_cert_path"] == str(certs.server)
        assert data["crl_path"] == ""
    for path in tmp_path.rglob("*"):
        if path.is_file() and path.suffix in (".log", ".json", ".stdout", ".stderr"):
            assert certs.password not in path.read_text(errors="replace"), path
