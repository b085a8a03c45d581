"""The `opis` command line: one module per command group, each with `register(app)`."""
