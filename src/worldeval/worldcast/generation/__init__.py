"""Making a model's outputs in the layout the judge reads: the generation requests (`requests.py`), the
per-state plan and step inspection (`plan.py`) and the harness of `worldcast generate` (`generate.py`),
which calls generators through the core client `worldeval.generator`."""
