"""Networks implemented in the project (imported only when a workload builds them: they import torch)."""
