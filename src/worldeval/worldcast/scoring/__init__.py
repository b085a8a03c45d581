"""Scores from `judgments.jsonl` (`scores.py`: per case, per model, bootstrap CIs, ranks) and the terminal
tables that show them (`tables.py`)."""
