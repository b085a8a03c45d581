"""Judging a model's outputs: the prompts (`prompts.py`), one spec per metric (`metrics.py`), the
`judgments.jsonl` records (`records.py`), the judge run with resume (`run.py`) and its progress display
(`progress.py`)."""
