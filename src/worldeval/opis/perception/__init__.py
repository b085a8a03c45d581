"""The OPIS measurement pipeline (paper sections 4.1-4.3).

`frame.py` runs one sampled frame through the stages, in order, over one
`FrameState`: observe, camera (`camera.py`), project and visibility
(`projection.py`, place proposals in `places.py`), embed, associate and identity
(`identity.py` over `association.py`), extras (`extras.py`) and structure
(`structure.py`). `reference.py` builds the case's reference bank once per
rollout; `config.py` holds the evaluator's settings. Backends only provide
observations, embeddings, correspondences and (optionally) keypoints, through
the contract in `backends/base.py`; these modules turn them into the
measurements of the archive.
"""
