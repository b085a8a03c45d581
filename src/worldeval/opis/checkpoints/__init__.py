"""Checkpoints of the hf backend outside the runtime: fetching and checking them (`worldeval models`),
and the random-weight models built from small or published configurations for tests and benchmarks."""
