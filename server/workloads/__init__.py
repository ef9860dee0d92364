"""Built-in profiling workloads, run by :mod:`profd.server.workloads.runner` in a subprocess.

Each workload is a standalone script in this folder that needs only torch and the standard
library (``_common.py`` beside it holds the profiler setup they share), so that the same file runs
on a GPU machine that has no profd installed: ``python3 server/workloads/matmul_bias.py --help``.
Importing this package does not import torch.
"""
import os

HERE = os.path.dirname(os.path.abspath(__file__))

# name -> script file in this folder
SCRIPTS = {
    "matmul-bias": "matmul_bias.py",
    "mlp": "mlp.py",
}


def script_path(name: str) -> str:
    return os.path.join(HERE, SCRIPTS[name])
