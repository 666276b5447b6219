"""`narad sentinel`: automatic failover for groups of Narad data nodes, speaking Redis
Sentinel's commands and events so that Redis clients (redis-py's `Sentinel`, ...)
follow a failover with no change (docs/failover.md).

The modules:

- config.py: sentinel.conf (Redis Sentinel's syntax), loading and rewriting;
- state.py: what is known of each group's nodes and sentinels, and how SENTINEL
  shows them;
- sentinel.py: the decisions (down, objectively down, votes, epochs, strays);
- watch.py: the links to data nodes and other sentinels, and discovery;
- failover.py: election, fencing, promotion, reconfiguration;
- link.py: one request-at-a-time RESP client link;
- connection.py: a client connection (requests, replies, subscriptions);
- commands.py: the commands answered;
- serve.py: the process, which wires the parts together.
"""
