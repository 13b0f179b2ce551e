"""Why there is no ``fenced-redlock`` backend: the evidence, against real nodes.

The obvious construction — INCR a counter on a majority of the Redlock nodes and take the maximum
as the fencing token — is only monotonic while the nodes keep their counters. Without persistence
(the embedded default, and Redis's default of periodic snapshots at best), a majority restarting
empty sends the token backwards, and a resource would then reject every honest holder or, worse,
accept a zombie whose older token now looks new. See README, "No fenced Redlock".
"""

from __future__ import annotations

from lockcompare.infra.cluster import Cluster
from lockcompare.infra.redis.client import connect

COUNTER = "lockcompare-test:fence-seq"


def majority_token(urls: list[str]) -> int:
    tokens = []
    for url in urls:
        client = connect(url)
        tokens.append(int(client.incr(COUNTER)))
        client.close()
    return max(tokens)


def test_max_of_majority_incr_goes_backwards_after_a_majority_restarts(fresh_cluster: Cluster) -> None:
    urls = list(fresh_cluster.node_urls)
    issued = [majority_token(urls[0:3]) for _ in range(5)]
    assert issued == [1, 2, 3, 4, 5]  # monotonic while the nodes keep their counters

    for index in (0, 1, 2):  # the nodes that issued those tokens restart without persistence
        server = fresh_cluster.node_server(index)
        server.crash()
        server.start()

    # Any majority now overlaps the restarted nodes in at least one node and the survivors never
    # saw the counter: the next token is lower than one already handed out.
    assert majority_token(urls[2:5]) == 1 < issued[-1]
