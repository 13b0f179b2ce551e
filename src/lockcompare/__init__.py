"""lockcompare: measure what distributed locks really guarantee.

Real redis-server nodes, real worker processes, the same experiments for every lock backend,
and results as CSV rows from which every table is rendered. See README.md and DESIGN.md.
"""

__version__ = "0.1.0"
