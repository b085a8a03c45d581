"""The OPIS measurement archive: the only thing scoring reads (SPEC section 3).

One row per sampled frame x reference instance, plus one row per confirmed
extra observation. Stored as Parquet with one declared schema.

Layout of a run folder (all of it is read together by `read_archive`)::

    RUN/measurements.parquet            any number of models in one file
    RUN/measurements/<model>.parquet    one consolidated file per model
    RUN/parts/<model>/<case_id>.parquet one file per evaluated (model, case)

The evaluator writes one part per finished (model, case) with
`write_case_part`, so a crash loses at most the case in flight and a rerun
only redoes cases without a part. `consolidate` merges the parts of each model
into `measurements/<model>.parquet`. The parts stay the source of truth: when
a part is newer than the consolidated file of its model (a resumed run added
or redid cases), `read_archive` takes that case from the part.

Floats: inside pandas a missing appearance/structure is NaN (pandas cannot
tell NaN from null in a float column), so `write_*` stores NaN as null. Inside
a Parquet file a real NaN is an error, because it usually means a broken
computation rather than "no evidence".
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from worldeval.opis.labels import ARCHIVE_TRACKS, EXCLUDED, STRUCTURE_SOURCES, UNLABELED, VISIBILITY, Visibility
from worldeval.runs import atomic_write_via, read_manifest

# pandas and pyarrow.compute are imported where they are used: `opis score` reads, validates and
# scores an archive without either (`ArchiveColumns`), and importing them would cost it about 0.35 s.
if TYPE_CHECKING:
    import pandas as pd

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

STRING_COLUMNS = tuple(f.name for f in SCHEMA if pa.types.is_string(f.type))
INT_COLUMNS = tuple(f.name for f in SCHEMA if pa.types.is_integer(f.type))
FLOAT_COLUMNS = tuple(f.name for f in SCHEMA if pa.types.is_floating(f.type))
BOOL_COLUMNS = tuple(f.name for f in SCHEMA if pa.types.is_boolean(f.type))
REQUIRED_NON_NULL = tuple(f.name for f in SCHEMA if not f.nullable)

SINGLE_FILE = "measurements.parquet"
PER_MODEL_DIR = "measurements"
PARTS_DIR = "parts"

# Strings are read dictionary-encoded (pandas categoricals): the archive repeats
# a handful of labels millions of times, and scoring works on the integer codes.
_READ_SCHEMA = pa.schema(
    [
        pa.field(f.name, pa.dictionary(pa.int32(), pa.string()) if f.name in STRING_COLUMNS else f.type)
        for f in SCHEMA
    ]
)


class ArchiveError(ValueError):
    """A measurement archive that violates SPEC section 3; the message names file, column and row."""

    def __init__(self, message: str, *, path: str | None = None, column: str | None = None, row: int | None = None):
        self.path, self.column, self.row = path, column, row
        super().__init__(f"{path}: {message}" if path else message)


# ----------------------------------------------------------------------------- writing


def _atomic_write_table(table: pa.Table, path: Path) -> Path:
    return atomic_write_via(path, lambda tmp: pq.write_table(table, tmp, compression="zstd"))


def to_table(data: pd.DataFrame | pa.Table) -> pa.Table:
    """Cast a DataFrame or table to the declared SCHEMA (column order, types); NaN floats become null."""
    import pandas as pd
    import pyarrow.compute as pc

    if isinstance(data, pa.Table):
        missing = [c for c in COLUMNS if c not in data.column_names]
        if missing:
            raise ArchiveError(f"missing columns: {', '.join(missing)}", column=missing[0])
        cols = []
        for f in SCHEMA:
            col = data.column(f.name)
            if pa.types.is_dictionary(col.type):
                col = col.cast(f.type)
            if pa.types.is_floating(f.type):
                col = pc.if_else(pc.is_nan(col.cast(pa.float64())), None, col.cast(pa.float64()))
            cols.append(col.cast(f.type) if col.type != f.type else col)
        return pa.Table.from_arrays(cols, schema=SCHEMA)
    missing = [c for c in COLUMNS if c not in data.columns]
    if missing:
        raise ArchiveError(f"missing columns: {', '.join(missing)}", column=missing[0])
    out = {}
    for f in SCHEMA:
        s = data[f.name]
        if isinstance(s.dtype, pd.CategoricalDtype):
            s = s.astype(object).where(s.notna(), None)
        try:
            out[f.name] = pa.array(s, type=f.type, from_pandas=True)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as exc:
            raise ArchiveError(f"column {f.name!r}: cannot store as {f.type}: {exc}", column=f.name) from exc
    try:
        return pa.Table.from_pydict(out, schema=SCHEMA)
    except (pa.ArrowInvalid, ValueError) as exc:
        raise ArchiveError(f"cannot build archive table: {exc}") from exc


def write_archive(data: pd.DataFrame | pa.Table, path: str | Path, validate: bool = True) -> Path:
    """Validate and write measurements to one Parquet file (temporary file, then rename)."""
    table = to_table(data)
    if validate:
        validate_archive(table.to_pandas(), source=str(path))
    return _atomic_write_table(table, Path(path))


_SAFE_NAME = re.compile(r"^[^/\\\x00]+$")


def _check_name(kind: str, name: str) -> str:
    name = str(name)
    if not name or name in (".", "..") or name.startswith(".") or not _SAFE_NAME.match(name):
        raise ArchiveError(f"{kind} {name!r} cannot be used as a file name (no '/', '\\', leading '.')")
    return name


def part_path(run_dir: str | Path, model: str, case_id: str) -> Path:
    return Path(run_dir) / PARTS_DIR / _check_name("model", model) / f"{_check_name('case_id', case_id)}.parquet"


def write_case_part(run_dir: str | Path, model: str, case_id: str, df: pd.DataFrame | pa.Table) -> Path:
    """Write the rows of one evaluated (model, case) to `parts/<model>/<case_id>.parquet` atomically.

    The rows must all belong to that model and case; they are validated first,
    so a bad part fails where it is produced rather than at scoring time.
    """
    table = to_table(df)
    path = part_path(run_dir, model, case_id)
    frame = table.to_pandas()
    bad = (frame["model"] != model) | (frame["case_id"] != case_id)
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise ArchiveError(
            f"row {i}: belongs to ({frame['model'].iat[i]!r}, {frame['case_id'].iat[i]!r}), "
            f"not to the part ({model!r}, {case_id!r})",
            path=str(path),
            column="case_id",
            row=i,
        )
    validate_archive(frame, source=str(path))
    return _atomic_write_table(table, path)


def consolidate(run_dir: str | Path, models: Iterable[str] | None = None) -> list[Path]:
    """Merge `parts/<model>/*.parquet` into `measurements/<model>.parquet` for each model.

    Idempotent and safe to rerun after a resumed evaluation: the consolidated
    file is rebuilt from all parts of the model. Parts are kept (they remain
    the source of truth for `read_archive`).
    """
    run_dir = Path(run_dir)
    parts_root = run_dir / PARTS_DIR
    written: list[Path] = []
    if not parts_root.is_dir():
        return written
    names = sorted(models) if models is not None else sorted(p.name for p in parts_root.iterdir() if p.is_dir())
    for model in names:
        files = sorted((parts_root / _check_name("model", model)).glob("*.parquet"))
        if not files:
            continue
        table = pa.concat_tables([_read_checked(f) for f in files])
        table = to_table(table)
        validate_archive(table.to_pandas(), source=str(parts_root / model))
        written.append(_atomic_write_table(table, run_dir / PER_MODEL_DIR / f"{model}.parquet"))
    return written


# ----------------------------------------------------------------------------- reading


def _type_ok(name: str, t: pa.DataType) -> bool:
    if pa.types.is_null(t):
        return name not in REQUIRED_NON_NULL
    if pa.types.is_dictionary(t):
        t = t.value_type
    if name in STRING_COLUMNS:
        return pa.types.is_string(t) or pa.types.is_large_string(t)
    if name in INT_COLUMNS:
        return pa.types.is_integer(t)
    if name in FLOAT_COLUMNS:
        return pa.types.is_floating(t) or pa.types.is_integer(t)
    if name in BOOL_COLUMNS:
        return pa.types.is_boolean(t)
    return True


def _read_checked(path: Path) -> pa.Table:
    """Read one Parquet file, check columns and types, cast to the read schema."""
    try:
        schema = pq.read_schema(path)
    except Exception as exc:
        raise ArchiveError(f"not a readable Parquet file: {exc}", path=str(path)) from exc
    missing = [c for c in COLUMNS if c not in schema.names]
    if missing:
        raise ArchiveError(f"missing columns: {', '.join(missing)}", path=str(path), column=missing[0])
    for name in COLUMNS:
        t = schema.field(name).type
        if not _type_ok(name, t):
            expected = SCHEMA.field(name).type
            raise ArchiveError(f"column {name!r} has type {t}, expected {expected}", path=str(path), column=name)
    try:
        # ParquetFile, not pq.read_table: the latter goes through pyarrow.dataset, which imports pandas.
        with pq.ParquetFile(path, read_dictionary=list(STRING_COLUMNS)) as f:
            table = f.read(columns=list(COLUMNS))
    except Exception as exc:
        raise ArchiveError(f"cannot read: {exc}", path=str(path)) from exc
    for name in FLOAT_COLUMNS:
        col = table.column(name)
        if pa.types.is_floating(col.type):
            row = _first_nan(col.cast(pa.float64()) if col.type != pa.float64() else col)
            if row is not None:
                raise ArchiveError(
                    f"row {row}: column {name!r} is NaN (store missing evidence as null)",
                    path=str(path),
                    column=name,
                    row=row,
                )
    cols = []
    for f in _READ_SCHEMA:
        col = table.column(f.name)
        if col.type != f.type:
            try:
                col = col.cast(f.type)
            except pa.ArrowInvalid as exc:
                raise ArchiveError(f"column {f.name!r}: {exc}", path=str(path), column=f.name) from exc
        cols.append(col)
    return pa.Table.from_arrays(cols, schema=_READ_SCHEMA)


def _valid(chunk: pa.Array) -> np.ndarray | None:
    """The validity bitmap of one array as booleans; None when it holds no null."""
    if chunk.null_count == 0:
        return None
    bits = np.frombuffer(chunk.buffers()[0], dtype=np.uint8)
    return np.unpackbits(bits, bitorder="little", count=chunk.offset + len(chunk))[chunk.offset:].astype(bool)


def _values(chunk: pa.Array) -> np.ndarray:
    """The values of one fixed-width array from its buffer (no copy but for booleans); slots of nulls hold anything."""
    t = chunk.type
    if pa.types.is_boolean(t):
        if len(chunk) == 0:
            return np.zeros(0, dtype=bool)
        bits = np.frombuffer(chunk.buffers()[1], dtype=np.uint8)
        return np.unpackbits(bits, bitorder="little", count=chunk.offset + len(chunk))[chunk.offset:].astype(bool)
    kind = "f" if pa.types.is_floating(t) else "i" if pa.types.is_signed_integer(t) else "u"
    dtype = np.dtype(f"{kind}{t.bit_width // 8}")
    if len(chunk) == 0:
        return np.zeros(0, dtype=dtype)
    return np.frombuffer(chunk.buffers()[1], dtype=dtype, count=chunk.offset + len(chunk))[chunk.offset:]


def _to_numpy(col: pa.ChunkedArray) -> np.ndarray:
    """A fixed-width column as one numpy array, from Arrow's buffers (pyarrow's own `to_numpy` of a
    chunked column goes through pandas). Nulls as pandas has them: NaN (an integer column turns
    float), False in a boolean column."""
    parts = []
    for chunk in col.chunks:
        part, valid = _values(chunk), _valid(chunk)
        if valid is not None:
            part = np.where(valid, part, False) if part.dtype == bool else np.where(valid, part, np.nan)
        parts.append(part)
    if not parts:
        return _values(pa.array([], type=col.type))
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _first_nan(col: pa.ChunkedArray) -> int | None:
    """Row of the first NaN (not null) of a float64 column, or None; numpy on Arrow's buffers."""
    start = 0
    for chunk in col.chunks:
        nan = np.isnan(_values(chunk))
        if nan.any():
            valid = _valid(chunk)
            hits = np.flatnonzero(nan if valid is None else nan & valid)
            if len(hits):
                return start + int(hits[0])
        start += len(chunk)
    return None


def _dictionary_codes(col: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """Codes (-1 for null) and labels of a dictionary column whose chunks share one dictionary."""
    if col.num_chunks == 0:
        return np.zeros(0, dtype=np.int32), np.zeros(0, dtype=object)
    parts = []
    for chunk in col.chunks:
        idx = chunk.indices
        values = _values(idx)
        valid = _valid(idx)
        parts.append(values if valid is None else np.where(valid, values, -1))
    return np.concatenate(parts), _labels(col.chunk(0).dictionary)


def _labels(dictionary: pa.Array) -> np.ndarray:
    labels = np.empty(len(dictionary), dtype=object)
    labels[:] = dictionary.to_pylist()  # to_numpy would convert the strings through pandas
    return labels


def archive_files(path: str | Path) -> list[tuple[Path, frozenset[str]]]:
    """The Parquet files a run folder (or file) contributes, each with the case ids to leave out of it.

    Raises ArchiveError when nothing is found, naming the folder.
    """
    path = Path(path)
    if path.is_file():
        return [(path, frozenset())]
    if not path.is_dir():
        raise ArchiveError("no such file or folder", path=str(path))
    out: list[tuple[Path, frozenset[str]]] = []
    single = path / SINGLE_FILE
    if single.is_file():
        out.append((single, frozenset()))
    consolidated = {p.stem: p for p in sorted((path / PER_MODEL_DIR).glob("*.parquet"))}
    parts_root = path / PARTS_DIR
    part_models = {p.name: p for p in sorted(parts_root.iterdir()) if p.is_dir()} if parts_root.is_dir() else {}
    for model in sorted(set(consolidated) | set(part_models)):
        parts = sorted(part_models[model].glob("*.parquet")) if model in part_models else []
        if model in consolidated:
            cfile = consolidated[model]
            cm = cfile.stat().st_mtime_ns
            fresh = [p for p in parts if p.stat().st_mtime_ns > cm]
            # A part newer than the consolidated file (resumed run) replaces its case.
            out.append((cfile, frozenset(p.stem for p in fresh)))
            out.extend((p, frozenset()) for p in fresh)
        else:
            out.extend((p, frozenset()) for p in parts)
    if not out:
        raise ArchiveError(
            f"no measurements found (expected {SINGLE_FILE}, {PER_MODEL_DIR}/<model>.parquet or "
            f"{PARTS_DIR}/<model>/<case_id>.parquet)",
            path=str(path),
        )
    return out


def read_archive(paths: str | Path | Sequence[str | Path], validate: bool = True) -> pd.DataFrame:
    """Read measurements from run folders and/or Parquet files into one DataFrame.

    String columns come back as pandas categoricals. With `validate` (default)
    every rule of `validate_archive` is checked and violations raise
    ArchiveError naming the file, column and row.
    """
    return read_archive_columns(paths, validate)[0].to_frame()


def read_archive_with_keys(
    paths: str | Path | Sequence[str | Path], validate: bool = True
) -> tuple[pd.DataFrame, "ArchiveKeys | None"]:
    """`read_archive`, also returning the row keys computed by validation (None without it)."""
    cols, keys = read_archive_columns(paths, validate)
    return cols.to_frame(), keys


def read_archive_columns(
    paths: str | Path | Sequence[str | Path], validate: bool = True
) -> tuple["ArchiveColumns", "ArchiveKeys | None"]:
    """`read_archive_with_keys` without the DataFrame: the columns as numpy arrays (`ArchiveColumns`)."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    if not paths:
        raise ArchiveError("no archive paths given")
    tables: list[pa.Table] = []
    sources: list[tuple[str, int]] = []
    start = 0
    for p in paths:
        for f, exclude in archive_files(p):
            t = _read_checked(f)
            if exclude:
                import pyarrow.compute as pc

                drop = pa.array(sorted(exclude), pa.string())
                t = t.filter(pc.invert(pc.is_in(t.column("case_id").cast(pa.string()), value_set=drop)))
            sources.append((str(f), start))
            start += t.num_rows
            tables.append(t)
    cols = ArchiveColumns(pa.concat_tables(tables) if len(tables) > 1 else tables[0])
    keys = validate_archive(cols, sources=sources) if validate else None
    return cols, keys


class ArchiveColumns:
    """An archive's columns as numpy arrays, each converted on first use and then kept.

    Validation and scoring read an archive through this, built from a pandas DataFrame or from the
    table `read_archive_columns` read (`_READ_SCHEMA`: strings dictionary-encoded). From the table
    no pandas is needed: `opis score` neither imports it nor builds a DataFrame of 16 columns only
    to take it apart again. A string column reads as (codes, labels), code -1 for null, as a pandas
    categorical, with the categories `pyarrow.Table.to_pandas` gives (chunks' dictionaries unified).
    """

    def __init__(self, source: "pd.DataFrame | pa.Table"):
        self.source = source
        self.is_table = isinstance(source, pa.Table)
        self.names = tuple(source.column_names if self.is_table else source.columns)
        self.n_rows = source.num_rows if self.is_table else len(source)
        self._cache: dict[tuple[str, str], object] = {}

    @classmethod
    def of(cls, data: "pd.DataFrame | pa.Table | ArchiveColumns") -> "ArchiveColumns":
        return data if isinstance(data, ArchiveColumns) else cls(data)

    def _kept(self, kind: str, name: str, make):
        if (kind, name) not in self._cache:
            self._cache[(kind, name)] = make()
        return self._cache[(kind, name)]

    def codes(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """Integer codes (-1 for null) and the labels of a string column."""
        if not self.is_table:
            return self._kept("codes", name, lambda: label_codes(self.source[name]))
        unified = self._kept("unified", "", self.source.unify_dictionaries)
        return self._kept("codes", name, lambda: _dictionary_codes(unified.column(name)))

    def labels(self, name: str) -> np.ndarray:
        """The labels of a string column (what its codes index), without converting its rows."""
        if not self.is_table:
            return self.codes(name)[1]
        col = self._kept("unified", "", self.source.unify_dictionaries).column(name)
        return _labels(col.chunk(0).dictionary) if col.num_chunks else np.zeros(0, dtype=object)

    def labels_at(self, name: str, rows: np.ndarray) -> np.ndarray:
        """The labels of a string column at `rows` as objects (a categorical's null is NaN)."""
        if not self.is_table:
            return np.asarray(self.source[name].iloc[rows], dtype=object)
        codes, labels = self.codes(name)
        picked = codes[rows]
        out = np.full(len(picked), np.nan, dtype=object)
        out[picked >= 0] = labels[picked[picked >= 0]]
        return out

    def floats(self, name: str) -> np.ndarray:
        """A float column as float64, NaN for null."""
        if self.is_table:
            return self._kept("floats", name, lambda: _to_numpy(self.source.column(name)))
        s = self.source[name]
        return self._kept("floats", name,
                          lambda: s.to_numpy() if s.dtype == np.float64 else s.to_numpy(dtype=float, na_value=np.nan))

    def bools(self, name: str) -> np.ndarray:
        if self.is_table:
            return self._kept("bools", name, lambda: _to_numpy(self.source.column(name)))
        return self._kept("bools", name, lambda: self.source[name].to_numpy(dtype=bool))

    def ints(self, name: str) -> np.ndarray:
        if self.is_table:
            return self._kept("ints", name, lambda: _to_numpy(self.source.column(name)))
        return self._kept("ints", name, self.source[name].to_numpy)

    def isna(self, name: str) -> np.ndarray:
        if not self.is_table:
            return self.source[name].isna().to_numpy()
        if name in STRING_COLUMNS:
            return self.codes(name)[0] < 0
        if name in FLOAT_COLUMNS:
            return np.isnan(self.floats(name))
        return np.zeros(self.n_rows, dtype=bool)  # ints and booleans: a null is a type error (`check_types`)

    def value(self, name: str, row: int):
        """The value a DataFrame of the archive shows at `row` (a categorical's null is NaN), for messages."""
        if not self.is_table:
            return self.source[name].iat[row]
        if name in STRING_COLUMNS:
            codes, labels = self.codes(name)
            return labels[codes[row]] if codes[row] >= 0 else float("nan")
        return self.source.column(name)[row].as_py()

    def check_types(self, source: str | None) -> None:
        """Every column present, with a type validation can read (a DataFrame's as pandas holds them)."""
        missing = [c for c in COLUMNS if c not in self.names]
        if missing:
            raise ArchiveError(f"missing columns: {', '.join(missing)}", path=source, column=missing[0])
        if not self.is_table:
            _check_types(self.source, source)
            return
        # The table's types are the read schema's; only a null where pandas would change the type is left.
        for c in COLUMNS:
            if c in INT_COLUMNS + BOOL_COLUMNS and self.source.column(c).null_count:
                kind, got = ("integer", "float64") if c in INT_COLUMNS else ("boolean", "object")
                raise ArchiveError(f"column {c!r} must be {kind} (got {got})", path=source, column=c)

    def to_frame(self) -> pd.DataFrame:
        """The DataFrame `read_archive` returns: string columns as categoricals."""
        if not self.is_table:
            return self.source
        import pandas as pd

        df = self.source.to_pandas()
        for name in STRING_COLUMNS:
            if not isinstance(df[name].dtype, pd.CategoricalDtype):
                df[name] = df[name].astype("category")
        return df


# ----------------------------------------------------------------------------- validation


def _locate(row: int, sources: Sequence[tuple[str, int]] | None, source: str | None) -> tuple[str | None, int]:
    if sources:
        starts = [s for _, s in sources]
        k = int(np.searchsorted(starts, row, side="right") - 1)
        return sources[k][0], row - sources[k][1]
    return source, row


def label_codes(s: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Integer codes (-1 for null) and the labels, for categorical or plain string columns."""
    import pandas as pd

    if isinstance(s.dtype, pd.CategoricalDtype):
        return s.cat.codes.to_numpy(), np.asarray(s.cat.categories, dtype=object)
    codes, uniques = pd.factorize(s, use_na_sentinel=True)
    return codes, np.asarray(uniques, dtype=object)


def validate_archive(
    df: "pd.DataFrame | ArchiveColumns", source: str | None = None, sources: Sequence[tuple[str, int]] | None = None
) -> "ArchiveKeys | None":
    """Check every SPEC section 3 rule; raise ArchiveError naming column and (file) row of the first violation.

    `source` names the file the whole frame came from; `sources` is a list of
    (file, first_row) when the frame concatenates several files. Returns the
    row keys it computed (`ArchiveKeys`) so scoring need not recompute them.
    """
    cols = ArchiveColumns.of(df)
    cols.check_types(source)
    if cols.n_rows == 0:
        return None
    fail = _failer(cols, source, sources)
    for c in REQUIRED_NON_NULL:
        fail(c, cols.isna(c), "is null")
    labels = _check_labels(cols, fail)
    _check_rows(cols, fail, labels)
    keys = archive_keys(cols)
    _check_case_constants(cols, fail, keys)
    _check_instances_per_frame(cols, fail, keys)
    return keys


def _failer(cols: ArchiveColumns, source, sources):
    """`fail(column, mask, what)`: raise ArchiveError at the first row of `mask`, naming its file and keys."""

    def fail(column: str, mask: np.ndarray, what: str) -> None:
        if not mask.any():
            return
        rows = np.flatnonzero(mask)
        row = int(rows[0])
        path, local = _locate(row, sources, source)
        ident = []
        for c in ("model", "case_id", "frame", "instance_id"):
            if c in cols.names:
                v = cols.value(c, row)
                ident.append(f"{c}={(v.item() if hasattr(v, 'item') else v)!r}")
        raise ArchiveError(
            f"row {local} ({', '.join(ident)}): column {column!r} {what}"
            + (f" [{len(rows)} rows affected]" if len(rows) > 1 else ""),
            path=path,
            column=column,
            row=local,
        )

    return fail


def _check_types(df: pd.DataFrame, source) -> None:
    """Types at the pandas level (file-level types were checked on read)."""
    import pandas as pd

    for c in COLUMNS:
        s = df[c]
        dt = s.dtype
        if c in STRING_COLUMNS:
            if isinstance(dt, pd.CategoricalDtype):
                ok = len(dt.categories) == 0 or pd.api.types.infer_dtype(dt.categories, skipna=True) == "string"
            else:
                ok = pd.api.types.is_string_dtype(dt) and pd.api.types.infer_dtype(s, skipna=True) in ("string", "empty")
            if not ok:
                raise ArchiveError(f"column {c!r} must hold strings (got {dt})", path=source, column=c)
        elif c in INT_COLUMNS:
            if not pd.api.types.is_integer_dtype(dt):
                raise ArchiveError(f"column {c!r} must be integer (got {dt})", path=source, column=c)
        elif c in FLOAT_COLUMNS:
            if not (pd.api.types.is_float_dtype(dt) or pd.api.types.is_integer_dtype(dt)) or pd.api.types.is_bool_dtype(dt):
                raise ArchiveError(f"column {c!r} must be float (got {dt})", path=source, column=c)
        elif c in BOOL_COLUMNS:
            if not pd.api.types.is_bool_dtype(dt):
                raise ArchiveError(f"column {c!r} must be boolean (got {dt})", path=source, column=c)


def _label_column(cols: ArchiveColumns, fail, column: str, allowed) -> None:
    # The labels first: the rows' codes are needed only to name the row of a label not allowed.
    bad = np.array([lab not in allowed for lab in cols.labels(column)], dtype=bool)
    if bad.any():
        codes, _ = cols.codes(column)
        fail(column, (codes >= 0) & bad[np.maximum(codes, 0)], f"has an unknown label (allowed: {', '.join(allowed)})")


def _check_labels(cols: ArchiveColumns, fail) -> dict:
    _label_column(cols, fail, "visibility", VISIBILITY)
    _label_column(cols, fail, "track", ARCHIVE_TRACKS)
    _label_column(cols, fail, "structure_source", STRUCTURE_SOURCES)
    vis_codes, vis_labels = cols.codes("visibility")
    lab_idx = {lab: i for i, lab in enumerate(vis_labels)}
    track_codes, track_labels = cols.codes("track")
    # rows of an instance without a Structure track
    no_track = np.append(np.isin(np.asarray(track_labels, dtype=object), (UNLABELED, EXCLUDED)), False)
    unstructured = (no_track[np.where(track_codes >= 0, track_codes, len(no_track) - 1)] if no_track.any()
                    else np.zeros(cols.n_rows, dtype=bool))
    return {
        "unstructured": unstructured,
        "visibility": vis_codes,
        "expected": vis_codes == lab_idx.get(Visibility.EXPECTED, -2),
        "unknown": vis_codes == lab_idx.get(Visibility.UNKNOWN, -2),
        "track": track_codes,
    }


def _check_rows(cols: ArchiveColumns, fail, labels: dict) -> None:
    """Rules within one row: extras vs reference rows, matched/ambiguous vs visibility, value ranges."""
    extra = cols.bools("extra")
    matched = cols.bools("matched")
    ambiguous = cols.bools("ambiguous")
    vis_codes, track_codes = labels["visibility"], labels["track"]
    inst_null = cols.isna("instance_id")
    fail("instance_id", extra & ~inst_null, "must be null on an extra row")
    fail("instance_id", ~extra & inst_null, "is null on a reference-instance row (extra=false)")
    fail("visibility", ~extra & (vis_codes < 0), "is null on a reference-instance row")
    fail("track", ~extra & (track_codes < 0), "is null on a reference-instance row")
    fail("track", extra & (track_codes >= 0), "must be null on an extra row")
    fail("matched", extra & matched, "is true on an extra row (an extra is by definition unmatched)")
    fail("ambiguous", extra & ambiguous, "is true on an extra row")
    fail("matched", matched & ~labels["expected"], f"is true but visibility is not {Visibility.EXPECTED}")
    fail("ambiguous", ambiguous & ~(labels["unknown"] & ~matched),
         "is true but the row is not visibility=unknown, matched=false")
    for c in ("appearance", "structure"):
        v = cols.floats(c)
        fail(c, ~np.isnan(v) & ((v < 0.0) | (v > 1.0)), "is outside [0, 1]")
    structure = cols.floats("structure")
    fail("structure", extra & ~np.isnan(structure), "must be null on an extra row")
    fail("structure", labels["unstructured"] & ~np.isnan(structure),
         f"must be null on an {UNLABELED} or {EXCLUDED} instance's row (no Structure track)")
    fail("n_reference", cols.ints("n_reference") < 0, "is negative")
    fail("frame", cols.ints("frame") < 0, "is negative")
    tsec = cols.floats("time_s")
    fail("time_s", ~np.isfinite(tsec) | (tsec < 0), "must be a finite number >= 0")


def _check_case_constants(cols: ArchiveColumns, fail, keys: "ArchiveKeys") -> None:
    """Domain, subcategory and n_reference are constant per case, time_s per frame; a subcategory has one domain."""
    nref = cols.ints("n_reference")
    tsec = cols.floats("time_s")
    for c in ("domain", "subcategory", "n_reference"):
        codes = np.asarray(cols.codes(c)[0] if c != "n_reference" else nref)
        fail(c, codes != codes[keys.first_row_of_case][keys.case], "differs between rows of the same (model, case_id)")
    first_t = np.zeros(keys.n_frames)
    first_t[keys.frame[::-1]] = tsec[::-1]
    fail("time_s", tsec != first_t[keys.frame], "differs between rows of the same (model, case_id, frame)")

    sub_codes, _ = cols.codes("subcategory")
    dom_codes, _ = cols.codes("domain")
    n_dom = int(dom_codes.max()) + 1
    pairs = np.flatnonzero(np.bincount(sub_codes * n_dom + dom_codes))
    pair_sub = pairs // n_dom  # ascending, so a subcategory with two domains shows as a repeat
    repeats = np.flatnonzero(np.diff(pair_sub) == 0)
    if len(repeats):
        s_bad = int(pair_sub[repeats[0]])
        first_dom = dom_codes[np.flatnonzero(sub_codes == s_bad)[0]]
        fail("domain", (sub_codes == s_bad) & (dom_codes != first_dom),
             "differs for the same subcategory (a subcategory belongs to one domain)")


def _check_instances_per_frame(cols: ArchiveColumns, fail, keys: "ArchiveKeys") -> None:
    """Every sampled frame carries exactly one row per reference instance (SPEC section 3)."""
    extra = cols.bools("extra")
    frame_key = keys.frame
    icode, _ = cols.codes("instance_id")
    ref_rows = np.flatnonzero(~extra)
    ref_frame = frame_key[ref_rows]
    key = ref_frame * (int(icode.max()) + 2) + icode[ref_rows]
    # Archives are usually written frame by frame, instance by instance: then the
    # key is strictly increasing and there can be no duplicate; sort only otherwise.
    if len(key) > 1 and not np.all(key[1:] > key[:-1]):
        order = np.argsort(key, kind="stable")
        same = key[order][1:] == key[order][:-1]
        if same.any():
            mask = np.zeros(cols.n_rows, dtype=bool)
            mask[ref_rows[order[1:][same]]] = True
            fail("instance_id", mask, "duplicates an earlier row with the same (model, case_id, frame, instance_id)")
    per_frame = np.bincount(ref_frame, minlength=keys.n_frames)
    fail("n_reference", ~extra & (per_frame[frame_key] != cols.ints("n_reference")),
         "does not equal the number of reference-instance rows in this frame")


class ArchiveKeys:
    """Dense integer ids of the (model, case_id) and (model, case_id, frame) of every row.

    Case ids ascend with (model, case_id) category codes and frame ids with
    (case id, frame), so both are stable for a given archive.
    """

    def __init__(self, case: np.ndarray, frame: np.ndarray, first_row_of_case: np.ndarray, n_frames: int):
        self.case, self.frame, self.first_row_of_case, self.n_frames = case, frame, first_row_of_case, n_frames

    @property
    def n_cases(self) -> int:
        return len(self.first_row_of_case)


def dense_ids(key: np.ndarray) -> tuple[np.ndarray, int]:
    """Map non-negative int keys to 0..k-1 preserving order; a bitmap when the key space is small."""
    space = int(key.max()) + 1 if len(key) else 0
    if space <= max(4 * len(key), 1 << 22):
        present = np.zeros(space, dtype=bool)
        present[key] = True
        remap = np.cumsum(present) - 1
        return remap[key], int(remap[-1]) + 1 if space else 0
    import pandas as pd

    codes, uniq = pd.factorize(key, sort=True)
    return codes.astype(np.int64), len(uniq)


def group_counts(key: np.ndarray, n: int, masks: Sequence[np.ndarray]) -> np.ndarray:
    """How many rows of each boolean mask fall in each group of `key` (0..n-1): (len(masks), n) int64.

    The same numbers as one `np.bincount(key[mask], minlength=n)` per mask, in one pass over the rows
    for all of them (about a third of the time for a dozen masks): each row's masks are packed into
    the bits of one code, rows are counted per (code, group), and a mask's count is the sum over
    the codes that have its bit.
    """
    if len(masks) > 16:
        return np.concatenate([group_counts(key, n, masks[:16]), group_counts(key, n, masks[16:])])
    code = np.zeros(len(key), dtype=np.uint16)
    for i, m in enumerate(masks):
        code |= m.astype(np.uint16) << np.uint16(i)
    present = np.flatnonzero(np.bincount(code, minlength=1 << len(masks)))
    offset = np.zeros(1 << len(masks), dtype=np.int64)
    offset[present] = np.arange(len(present)) * n
    table = np.bincount(offset[code] + key, minlength=len(present) * n).reshape(len(present), n)
    bits = (present[None, :] >> np.arange(len(masks))[:, None]) & 1
    # A float product is exact here (counts far below 2**53) and much faster than an integer one.
    return (bits.astype(float) @ table.astype(float)).astype(np.int64)


def archive_keys(df: "pd.DataFrame | ArchiveColumns") -> ArchiveKeys:
    cols = ArchiveColumns.of(df)
    mcode, _ = cols.codes("model")
    ccode, _ = cols.codes("case_id")
    case_key, n_cases = dense_ids(mcode.astype(np.int64) * (int(ccode.max()) + 1) + ccode)
    frame = cols.ints("frame").astype(np.int64)
    frame_key, n_frames = dense_ids(case_key * (int(frame.max()) + 1) + frame)
    first_row = np.empty(n_cases, dtype=np.int64)
    first_row[case_key[::-1]] = np.arange(len(case_key) - 1, -1, -1)
    return ArchiveKeys(case_key, frame_key, first_row, n_frames)


# ----------------------------------------------------------------------------- building by hand

_DEFAULTS = {
    "instance_id": None,
    "track": None,
    "visibility": None,
    "matched": False,
    "ambiguous": False,
    "extra": False,
    "appearance": None,
    "structure": None,
    "structure_source": None,
}


def frame_from_records(records: Sequence[dict], **common) -> pd.DataFrame:
    """A measurement DataFrame from row dicts, filling unset optional fields with their neutral value.

    `common` supplies fields shared by every row (e.g. model, case_id, domain,
    subcategory, n_reference). `time_s` defaults to frame / fps when `fps` is
    given in `common`. Meant for tests and small hand-built archives.
    """
    import pandas as pd

    fps = common.pop("fps", None)
    rows = []
    for r in records:
        row = {**_DEFAULTS, **common, **r}
        if "time_s" not in row and fps:
            row["time_s"] = row["frame"] / fps
        rows.append(row)
    df = pd.DataFrame(rows, columns=list(COLUMNS))
    for c in ("appearance", "structure"):
        df[c] = df[c].astype(float)
    for c in ("n_reference", "frame"):
        df[c] = df[c].astype(np.int64)
    for c in BOOL_COLUMNS:
        df[c] = df[c].astype(bool)
    return df


# ----------------------------------------------------------------------------- a run folder as found
# The report and the manual audit read whatever a run folder holds: every reader here returns what it
# found plus notes about what it could not use, instead of raising (a failed rollout, a run that never
# consolidated, a missing frames record must not stop a report).


@dataclass
class OpisRun:
    root: Path
    manifest: dict
    archive_files: list[Path]
    frames: dict[tuple[str, str], Path]  # (model, case_id) -> frames record path
    status: dict[tuple[str, str], dict]  # (model, case_id) -> status record
    notes: list[str] = field(default_factory=list)


def found_archive_files(root: Path) -> list[Path]:
    """Consolidated archives first; per-rollout parts only for models with no consolidated file.

    Parts and consolidated files hold the same rows, so reading both would count a rollout twice.
    """
    files: list[Path] = []
    if (root / SINGLE_FILE).is_file():
        files.append(root / SINGLE_FILE)
    mdir = root / PER_MODEL_DIR
    consolidated_models = set()
    if mdir.is_dir():
        for p in sorted(mdir.glob("*.parquet")):
            files.append(p)
            consolidated_models.add(p.stem)
    pdir = root / PARTS_DIR
    if pdir.is_dir() and not (root / SINGLE_FILE).is_file():
        for mdl in sorted(x for x in pdir.iterdir() if x.is_dir()):
            if mdl.name not in consolidated_models:
                files.extend(sorted(mdl.glob("*.parquet")))
    return files


def load_opis_run(root: Path) -> OpisRun:
    notes: list[str] = []
    manifest = read_manifest(root, notes)
    frames: dict[tuple[str, str], Path] = {}
    fdir = root / "frames"
    if fdir.is_dir():
        for p in sorted(fdir.glob("*/*.json")):
            frames[(p.parent.name, p.stem)] = p
    status: dict[tuple[str, str], dict] = {}
    sdir = root / "status"
    if sdir.is_dir():
        for p in sorted(sdir.glob("*/*.json")):
            try:
                rec = json.loads(p.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError) as exc:
                notes.append(f"{p}: unreadable status record ({exc})")
                continue
            status[(str(rec.get("model", p.parent.name)), str(rec.get("case_id", p.stem)))] = rec
    return OpisRun(root, manifest, found_archive_files(root), frames, status, notes)


def is_opis_run(root: Path) -> bool:
    return bool(found_archive_files(root)) or (root / "frames").is_dir() or (root / "status").is_dir()


def read_archives(files: list[Path], notes: list[str]) -> pd.DataFrame:
    """All archive rows of the given Parquet files (unreadable files are noted and skipped)."""
    import pandas as pd

    frames = []
    for p in files:
        try:
            frames.append(pd.read_parquet(p))
        except Exception as exc:  # pyarrow raises several types for broken files
            notes.append(f"{p}: unreadable archive ({exc})")
    if not frames:
        return pd.DataFrame(columns=list(COLUMNS))
    return pd.concat(frames, ignore_index=True)


def read_frames_record(path: Path, notes: list[str]) -> dict | None:
    try:
        rec = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        notes.append(f"{path}: unreadable frames record ({exc})")
        return None
    if not isinstance(rec, dict) or not isinstance(rec.get("frames"), list):
        notes.append(f"{path}: frames record has no 'frames' list")
        return None
    return rec
