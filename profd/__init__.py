"""profd: reads torch.profiler traces and puts the findings on your source lines."""

__version__ = "0.1.0"
