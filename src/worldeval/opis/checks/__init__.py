"""Checking the evaluator: metamorphic edits (validate, synth), real clips with masks (validate_real,
audit, gtclips), people's audit (audit_manual), the hold-out split and the figures of the reports."""
