"""Built-in workloads."""
