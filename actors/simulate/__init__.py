"""The main job: a gateway-shaped workload on many sessions, then an integrity check.

`run_simulation` drives the workload (`workload`) through a gateway (`gateways`: the
actors, or the naive upstream path) from threads or spawned processes and checks
every acknowledged message (`check`). The command line is `actors.cli._simulate`.
"""

from ._config import WorkerConfig
from ._run import run_simulation

__all__ = ["WorkerConfig", "run_simulation"]
