"""`worldeval.opis.check_figures` under the name docs/architecture.md gives it."""

from worldeval.opis.check_figures import *  # noqa: F401,F403
