"""A multi-node Ray cluster on this machine, run as its own process for the cluster-path tests.

``python tests/multinode.py DASHBOARD_PORT`` starts a head that offers no CPUs to work (as a
cluster's CPU-only head: the driver and the dashboard run there, nothing else) and two worker nodes
of one CPU each (``ray.cluster_utils.Cluster``: separate raylets and object stores, one machine),
prints one JSON line ``{"address": ..., "nodes": [...]}`` and then takes commands on stdin, one a
line, answering one JSON line each:

    remove N    remove worker node N (0-based, in the order they were added): its processes die
    add         add a worker node of one CPU

End of input shuts the whole cluster down. A process of its own keeps the cluster apart from the
test session's own Ray (which the test process may be connected to).
"""
from __future__ import annotations

import json
import sys


def main() -> None:
    from ray.cluster_utils import Cluster

    port = int(sys.argv[1])
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 0, "include_dashboard": True, "dashboard_host": "127.0.0.1", "dashboard_port": port})
    workers = [cluster.add_node(num_cpus=1) for _ in range(2)]
    cluster.wait_for_nodes()
    try:
        print(json.dumps({"address": cluster.address, "nodes": [w.node_id for w in workers]}), flush=True)
        for line in sys.stdin:
            words = line.split()
            if words[:1] == ["remove"]:
                node = workers[int(words[1])]
                cluster.remove_node(node, allow_graceful=False)
                print(json.dumps({"removed": node.node_id}), flush=True)
            elif words[:1] == ["add"]:
                workers.append(cluster.add_node(num_cpus=1))
                cluster.wait_for_nodes()
                print(json.dumps({"added": workers[-1].node_id}), flush=True)
            else:
                print(json.dumps({"error": f"unknown command {line.strip()!r}"}), flush=True)
    finally:
        cluster.shutdown()


if __name__ == "__main__":
    main()
