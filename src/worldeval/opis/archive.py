"""The OPIS measurement archive: the only thing scoring reads (SPEC section 3).

One row per sampled frame x reference instance, plus one row per confirmed
extra observation. Stored as Parquet with one declared schema.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

VISIBILITY = ("expected_visible", "occluded", "out_of_view", "too_small", "unknown")
TRACKS = ("static", "dynamic")
STRUCTURE_SOURCES = ("static", "pose", "claims")

SCHEMA = pa.schema(
    [
        pa.field("model", pa.string(), nullable=False),
        pa.field("case_id", pa.string(), nullable=False),
        pa.field("domain", pa.string(), nullable=False),
        pa.field("subcategory", pa.string(), nullable=False),
        pa.field("n_reference", pa.int32(), nullable=False),
        pa.field("frame", pa.int32(), nullable=False),
        pa.field("time_s", pa.float64(), nullable=False),
        pa.field("instance_id", pa.string(), nullable=True),
        pa.field("track", pa.string(), nullable=True),
        pa.field("visibility", pa.string(), nullable=True),
        pa.field("matched", pa.bool_(), nullable=False),
        pa.field("ambiguous", pa.bool_(), nullable=False),
        pa.field("extra", pa.bool_(), nullable=False),
        pa.field("appearance", pa.float64(), nullable=True),
        pa.field("structure", pa.float64(), nullable=True),
        pa.field("structure_source", pa.string(), nullable=True),
    ]
)
COLUMNS = tuple(SCHEMA.names)
KEY = ("model", "case_id", "frame", "instance_id")
