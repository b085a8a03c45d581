"""Perception steps of the OPIS evaluator (paper section 4.1-4.3).

Each module is one step: the reference bank (what the case asks us to find),
camera estimation, projection and visibility, association, identity,
structure and extras confirmation. Backends only provide observations,
embeddings, correspondences and (optionally) keypoints; these modules turn
them into the measurements of the archive.
"""
