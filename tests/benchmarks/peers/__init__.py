"""The peers' workload (``python -m tests.benchmarks peers``): one multi-process chat workload
run against session-actors and other agent frameworks' session stores.

Everything here imports only the standard library at module level: the worker and checker
run in each peer's own virtual environment (``python -m tests.benchmarks.peers.workload``),
where session-actors is not installed. `systems` holds one small adapter class per system.
"""
