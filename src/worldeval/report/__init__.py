"""Self-contained HTML report of OPIS and WorldCast runs (`worldeval report`)."""

from worldeval.report.build import ReportError, build_report, render_report, unreadable_run_dirs

__all__ = ["ReportError", "build_report", "render_report", "unreadable_run_dirs"]
