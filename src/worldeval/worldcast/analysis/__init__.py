"""Checking the judge and the video adapter: agreement with human votes, judge swap and repeats
(`validity.py`), and human against adapter keyframes (`keyframe_agreement.py`)."""
