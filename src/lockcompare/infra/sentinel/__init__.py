"""Redis behind Sentinel: the sentinels, the lock nodes they fail over, and the kind."""
