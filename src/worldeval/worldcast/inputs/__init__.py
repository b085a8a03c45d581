"""What WorldCast reads: cases (`cases.py`), and a model's outputs turned into its ordered states by the
output adapters (`adapters.py`: step images, grids cut by `grid.py`, videos reduced to keyframes by
`keyframes.py`); the errors of bad input (`errors.py`)."""
