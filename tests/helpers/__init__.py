"""Plain helpers shared by test modules (fixtures live in conftest.py files). Import as `tests.helpers.<module>`."""
