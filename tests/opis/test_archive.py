"""The measurement archive: write, read (all run-folder layouts), validate with precise errors."""

from __future__ import annotations

import os
import re
import time

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from worldeval.opis.archive import (
    BOOL_COLUMNS,
    COLUMNS,
    FLOAT_COLUMNS,
    INT_COLUMNS,
    SCHEMA,
    STRING_COLUMNS,
    ArchiveColumns,
    ArchiveError,
    consolidate,
    frame_from_records,
    group_counts,
    read_archive,
    read_archive_columns,
    validate_archive,
    write_archive,
    write_case_part,
)


def rows(model="m", case_id="c", n_frames=2, subcategory="s", domain="d"):
    recs = []
    for k in range(n_frames):
        f = 24 + 8 * k
        recs += [
            dict(frame=f, instance_id="a", track="static", visibility="expected_visible", matched=True,
                 appearance=0.9, structure=0.8, structure_source="static"),
            dict(frame=f, instance_id="b", track="dynamic", visibility="occluded"),
            dict(frame=f, extra=True),
        ]
    return frame_from_records(recs, model=model, case_id=case_id, domain=domain, subcategory=subcategory,
                              n_reference=2, fps=24.0)


def _sorted(df: pd.DataFrame) -> pd.DataFrame:
    out = df.copy()
    for c in out.columns:
        if isinstance(out[c].dtype, pd.CategoricalDtype) or out[c].dtype == object or pd.api.types.is_string_dtype(out[c]):
            out[c] = out[c].astype(object).where(out[c].notna(), None)
        elif pd.api.types.is_integer_dtype(out[c]):
            out[c] = out[c].astype(np.int64)
    return out.sort_values(["model", "case_id", "frame", "extra", "instance_id"], na_position="last").reset_index(drop=True)


def test_write_then_read_round_trips(tmp_path):
    df = rows()
    path = write_archive(df, tmp_path / "measurements.parquet")
    assert pq.read_schema(path).remove_metadata().equals(SCHEMA, check_metadata=False)
    back = read_archive(tmp_path)
    pd.testing.assert_frame_equal(_sorted(back), _sorted(df), check_dtype=False)
    assert list(back.columns) == list(COLUMNS)
    assert not list(tmp_path.glob(".*tmp")), "no temporary file left behind"


def test_write_stores_nan_as_null(tmp_path):
    path = write_archive(rows(), tmp_path / "x.parquet")
    col = pq.read_table(path).column("appearance")
    assert col.null_count == 2 * 2  # the occluded and the extra row of both frames
    assert not pc.any(pc.is_nan(col)).as_py()


def test_reads_single_file_per_model_files_and_several_runs(tmp_path):
    run1, run2 = tmp_path / "r1", tmp_path / "r2"
    write_archive(rows("m1"), run1 / "measurements.parquet")
    write_archive(rows("m2"), run1 / "measurements" / "m2.parquet")
    write_archive(rows("m3", "c9"), run2 / "measurements" / "m3.parquet")
    df = read_archive([run1, run2])
    assert sorted(df["model"].unique()) == ["m1", "m2", "m3"]
    assert len(df) == 3 * len(rows())
    assert len(read_archive(run2 / "measurements" / "m3.parquet")) == len(rows())


def test_parts_are_read_then_consolidated_and_resumed(tmp_path):
    write_case_part(tmp_path, "m", "c1", rows(case_id="c1"))
    write_case_part(tmp_path, "m", "c2", rows(case_id="c2"))
    assert sorted(read_archive(tmp_path)["case_id"].unique()) == ["c1", "c2"]
    [out] = consolidate(tmp_path)
    assert out == tmp_path / "measurements" / "m.parquet"
    assert len(pq.read_table(out)) == 2 * len(rows())
    assert len(read_archive(tmp_path)) == 2 * len(rows())  # parts not counted twice
    # A resumed run redoes c2 (now 3 frames) and adds c3 after consolidation.
    old = time.time() - 10
    os.utime(out, (old, old))
    write_case_part(tmp_path, "m", "c2", rows(case_id="c2", n_frames=3))
    write_case_part(tmp_path, "m", "c3", rows(case_id="c3"))
    df = read_archive(tmp_path)
    assert df.groupby("case_id", observed=True).size().to_dict() == {"c1": 6, "c2": 9, "c3": 6}
    consolidate(tmp_path)
    assert len(pq.read_table(out)) == 21


def test_write_case_part_rejects_rows_of_another_case_and_unsafe_names(tmp_path):
    with pytest.raises(ArchiveError, match="not to the part"):
        write_case_part(tmp_path, "m", "c1", rows(case_id="other"))
    with pytest.raises(ArchiveError, match="file name"):
        write_case_part(tmp_path, "m", "../evil", rows(case_id="../evil"))


def test_empty_folder_and_missing_path_are_named(tmp_path):
    with pytest.raises(ArchiveError, match="no measurements found") as e:
        read_archive(tmp_path)
    assert str(tmp_path) in str(e.value)
    with pytest.raises(ArchiveError, match="no such file"):
        read_archive(tmp_path / "nope")


def test_not_a_parquet_file_is_named(tmp_path):
    bad = tmp_path / "measurements.parquet"
    bad.write_bytes(b"this is not parquet")
    with pytest.raises(ArchiveError, match="not a readable Parquet file") as e:
        read_archive(tmp_path)
    assert str(bad) in str(e.value)


# --- validation: each rule names its column and row ----------------------------------------------
def _bad(mutate):
    df = rows()
    mutate(df)
    return df


@pytest.mark.parametrize(
    "mutate, column, row, message",
    [
        (lambda d: d.__setitem__("visibility", d["visibility"].where(d.index != 1, "hidden")), "visibility", 1, "unknown label"),
        (lambda d: d.__setitem__("appearance", d["appearance"].where(d.index != 3, 1.2)), "appearance", 3, "outside [0, 1]"),
        (lambda d: d.__setitem__("structure", d["structure"].where(d.index != 0, -0.1)), "structure", 0, "outside [0, 1]"),
        (lambda d: d.__setitem__("matched", d.index == 1), "matched", 1, "not expected_visible"),
        (lambda d: d.__setitem__("ambiguous", d.index == 0), "ambiguous", 0, "visibility=unknown"),
        (lambda d: d.__setitem__("instance_id", d["instance_id"].where(d.index != 2, "z")), "instance_id", 2, "extra row"),
        (lambda d: d.__setitem__("instance_id", d["instance_id"].where(d.index != 1, "a")), "instance_id", 1, "duplicates"),
        (lambda d: d.__setitem__("track", d["track"].where(d.index != 4, "flying")), "track", 4, "unknown label"),
        (lambda d: d.__setitem__("n_reference", np.where(d.index >= 3, 3, 2)), "n_reference", 3, "same (model, case_id)"),
        (lambda d: d.__setitem__("time_s", np.where(d.index == 4, 9.0, d["time_s"])), "time_s", 4, "same (model, case_id, frame)"),
        (lambda d: d.__setitem__("structure", d["structure"].where(d.index != 2, 0.5)), "structure", 2, "extra row"),
        (lambda d: d.__setitem__("matched", d.index == 2), "matched", 2, "extra row"),
    ],
)
def test_validation_names_column_and_row(mutate, column, row, message):
    with pytest.raises(ArchiveError, match=re.escape(message)) as e:
        validate_archive(_bad(mutate))
    assert e.value.column == column and e.value.row == row
    assert f"row {row}" in str(e.value) and repr(column) in str(e.value)


def test_missing_reference_row_is_an_error():
    df = rows().drop(index=1).reset_index(drop=True)  # frame 24 lost instance b
    with pytest.raises(ArchiveError, match="number of reference-instance rows") as e:
        validate_archive(df)
    assert e.value.row == 0


def test_subcategory_in_two_domains_is_an_error():
    df = pd.concat([rows(case_id="x", domain="d1"), rows(case_id="y", domain="d2")], ignore_index=True)
    with pytest.raises(ArchiveError, match="belongs to one domain"):
        validate_archive(df)


def test_missing_column_is_named(tmp_path):
    with pytest.raises(ArchiveError, match="missing columns: track"):
        validate_archive(rows().drop(columns=["track"]))
    table = pa.Table.from_pandas(rows().drop(columns=["structure"]), preserve_index=False)
    pq.write_table(table, tmp_path / "measurements.parquet")
    with pytest.raises(ArchiveError, match="missing columns: structure") as e:
        read_archive(tmp_path)
    assert "measurements.parquet" in str(e.value)


def test_wrong_type_is_named(tmp_path):
    df = rows()
    df["frame"] = df["frame"].astype(str)
    with pytest.raises(ArchiveError, match="'frame' must be integer"):
        validate_archive(df)
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), tmp_path / "measurements.parquet")
    with pytest.raises(ArchiveError, match="column .frame. has type (large_)?string"):
        read_archive(tmp_path)


def test_nan_inside_a_file_is_an_error_with_its_row(tmp_path):
    table = pa.Table.from_pandas(rows(), schema=SCHEMA, preserve_index=False)
    app = table.column("appearance").to_pylist()
    app[3] = float("nan")
    table = table.set_column(COLUMNS.index("appearance"), "appearance", pa.array(app, pa.float64(), from_pandas=False))
    pq.write_table(table, tmp_path / "measurements.parquet")
    with pytest.raises(ArchiveError, match="row 3: column 'appearance' is NaN"):
        read_archive(tmp_path)


def test_errors_in_a_later_file_name_that_file_and_its_own_row(tmp_path):
    write_archive(rows("m1"), tmp_path / "measurements" / "m1.parquet")
    bad = rows("m2")
    bad.loc[4, "visibility"] = "gone"
    write_archive(bad, tmp_path / "measurements" / "m2.parquet", validate=False)
    with pytest.raises(ArchiveError) as e:
        read_archive(tmp_path)
    assert "m2.parquet" in str(e.value) and e.value.row == 4 and e.value.column == "visibility"


def test_same_model_in_two_runs_is_a_duplicate(tmp_path):
    write_archive(rows("m"), tmp_path / "a" / "measurements.parquet")
    write_archive(rows("m"), tmp_path / "b" / "measurements.parquet")
    with pytest.raises(ArchiveError, match="duplicates"):
        read_archive([tmp_path / "a", tmp_path / "b"])


def test_unsorted_rows_still_detect_duplicates():
    df = pd.concat([rows(), rows().iloc[[0]]], ignore_index=True).iloc[::-1].reset_index(drop=True)
    with pytest.raises(ArchiveError, match="duplicates"):
        validate_archive(df)
    validate_archive(rows().iloc[::-1].reset_index(drop=True))  # reversed but clean: fine


def test_archive_written_by_plain_pandas_is_accepted(tmp_path):
    """pandas writes large_string, int64 and an all-null column as type null; all of it reads back."""
    df = rows()
    df["structure_source"] = None
    df.to_parquet(tmp_path / "measurements.parquet")
    back = read_archive(tmp_path)
    assert back["structure_source"].isna().all() and len(back) == len(df)
    assert back["n_reference"].tolist() == [2] * len(df)


def test_columns_read_from_parquet_hold_what_the_dataframe_holds(tmp_path):
    """`read_archive_columns` (how `opis score` reads, without pandas) against `read_archive`'s DataFrame:
    the same codes in the same category order, the same values, NaN for null."""
    write_archive(rows("m1"), tmp_path / "measurements" / "m1.parquet")
    other = rows("m2", case_id="c2", n_frames=3)
    other.loc[1, "visibility"] = "unknown"
    write_archive(other, tmp_path / "measurements" / "m2.parquet")
    cols, keys = read_archive_columns(tmp_path)
    frame = ArchiveColumns(read_archive(tmp_path))
    assert cols.n_rows == frame.n_rows == len(rows()) + len(other)
    for c in STRING_COLUMNS:
        (codes, labels), (fcodes, flabels) = cols.codes(c), frame.codes(c)
        assert list(labels) == list(flabels) and codes.tolist() == fcodes.tolist(), c
        assert list(cols.labels(c)) == list(labels)
        assert cols.isna(c).tolist() == frame.isna(c).tolist()
    for c in FLOAT_COLUMNS:
        np.testing.assert_array_equal(cols.floats(c), frame.floats(c))
    for c in INT_COLUMNS:
        assert cols.ints(c).tolist() == frame.ints(c).tolist()
    for c in BOOL_COLUMNS:
        assert cols.bools(c).tolist() == frame.bools(c).tolist()
    assert keys.frame.tolist() == validate_archive(frame).frame.tolist()


def test_group_counts_are_one_bincount_per_mask():
    rng = np.random.default_rng(0)
    key = rng.integers(0, 50, 10_000)
    masks = [rng.random(10_000) < p for p in np.linspace(0.05, 0.95, 19)]  # over 16: packed in two codes
    expected = np.stack([np.bincount(key[m], minlength=50) for m in masks])
    np.testing.assert_array_equal(group_counts(key, 50, masks), expected)
    assert group_counts(key[:0], 3, [masks[0][:0]]).tolist() == [[0, 0, 0]]
