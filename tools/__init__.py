"""Tools apart from the gateway: trace replay and synthesis (``replay``) and the local cluster
launcher (``localcluster``). The ``lakegate`` CLI offers them; they import nothing of ``gateway``
(they start gateways as processes)."""
