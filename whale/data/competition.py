"""Reading a Kaggle-format competition folder: train.csv, test listing, boxes, solution.

A competition folder holds (Humpback Whale Identification 2019; :mod:`whale.formats`)::

    train.csv               Image,Id             (required)
    train/                  the training images  (required)
    test/                   the test images      (optional when there is no test set)
    sample_submission.csv   Image,Id             (optional; defines the test order)
    bounding_boxes.csv      Image,x0,y0,x1,y1    (optional; pixels, x1/y1 exclusive)

or, in the Happywhale 2022 format, ``train.csv`` ``image,species,individual_id``, the folders
``train_images/`` and ``test_images/`` and ``sample_submission.csv`` ``image,predictions``
(``bounding_boxes.csv`` keeps its columns). The format is read from ``train.csv``'s header
unless named (``fmt``); either way the loaded table has the columns ``Image``, ``Id`` and, for
2022, ``species``, so nothing downstream asks which competition it came from.

Everything is checked once, at load time, so that a bad row is reported with its file and
line before any training starts. Line numbers count the header as line 1, so data row ``r``
(1-based) is on line ``r + 1``; messages give both.

Images themselves are decoded by :mod:`whale.data.images`.
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np
import pandas as pd

from whale.data.images import Box
from whale.core.errors import DataError
from whale.formats import DEFAULT, FORMATS, Format, format_of_header, get_format, read_header

TRAIN_CSV = "train.csv"
SAMPLE_CSV = "sample_submission.csv"
BOXES_CSV = "bounding_boxes.csv"
ORIGIN = "Origin"
"""Optional ``train.csv`` column: where a row comes from (:data:`ORIGINS`; empty = ``train``)."""
ORIGINS = ("train", "pseudo", "duplicate")
"""``pseudo``: a test image labelled by :mod:`whale.pseudo`; ``duplicate``: a near-duplicate of another
training image (:mod:`whale.duplicates`). Both train but are never validated (:mod:`whale.data.folds`)."""
SPECIES = "species"
"""Column of :attr:`Competition.train` holding each image's species, for formats that have one."""
TRAIN_DIR = "train"
TEST_DIR = "test"
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp")
"""Suffixes (lower case) of the files taken from a ``test/`` listing."""

_MAX_REPORTED = 5  # how many missing files one error message lists


@dataclasses.dataclass(frozen=True, eq=False)
class Competition:
    """A loaded competition folder.

    Attributes:
        root: the competition folder.
        train: DataFrame with columns ``Image`` and ``Id`` (str), plus ``species`` (str) when
            the format has one, one row per training image, in ``train.csv`` order, index ``0..n-1``.
        test_images: test image names, in ``sample_submission.csv`` order if that file exists,
            else the sorted listing of ``test/``.
        boxes: image name -> ``(x0, y0, x1, y1)`` ints (x1, y1 exclusive); empty without
            ``bounding_boxes.csv``.
        sample_path: path of ``sample_submission.csv``, or None.
        format: the folder's :class:`whale.formats.Format` (folders, columns, open-set label).
    """

    root: Path
    train: pd.DataFrame
    test_images: list[str]
    boxes: dict[str, Box]
    sample_path: Path | None
    format: Format = DEFAULT

    @property
    def open_label(self) -> str:
        """The label of an individual absent from training (``new_whale``, ``new_individual``)."""
        return self.format.open_label

    def train_path(self, name: str) -> Path:
        """Path of training image ``name`` (checked to stay inside the training folder)."""
        return safe_image_path(self.root / self.format.train_dir, name)

    def test_path(self, name: str) -> Path:
        """Path of test image ``name`` (checked to stay inside the test folder)."""
        return safe_image_path(self.root / self.format.test_dir, name)

    def box(self, name: str) -> Box | None:
        """Box of image ``name``, or None (meaning the whole image) if it has none."""
        return self.boxes.get(name)


def _line(lines: np.ndarray, row: int) -> str:
    """'line L (data row R)' for 0-based data row ``row``."""
    return f"line {int(lines[row])} (data row {row + 1})"


def _where(path: Path, lines: np.ndarray, row: int) -> str:
    """'FILE, line L (data row R)' for 0-based data row ``row``."""
    return f"{path}, {_line(lines, row)}"


def _read_csv(path: Path, required: tuple[str, ...], hint: str = "") -> tuple[pd.DataFrame, np.ndarray]:
    """Read a CSV as strings (nothing turned into NaN) and check that columns exist.

    Returns:
        the rows (values stripped, blank lines dropped, index ``0..n-1``) and ``[n]`` int64,
        the 1-based line number of each row in the file (header = line 1; exact unless a
        quoted field spans lines). ``hint`` ends the message of a missing column.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: file not found (expected a CSV with columns {', '.join(required)})")
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False, na_filter=False, skip_blank_lines=False)
    except pd.errors.EmptyDataError:
        raise DataError(
            f"{path}: file is empty (expected a header with columns {', '.join(required)})"
        ) from None
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: not a readable CSV file: {exc}") from None
    df.columns = [str(c).strip().lstrip("\ufeff") for c in df.columns]
    found = list(df.columns)
    missing = [c for c in required if c not in found]
    if missing:
        raise DataError(
            f"{path}, line 1: missing column(s) {', '.join(missing)}; "
            f"expected {', '.join(required)}, found {', '.join(found) or 'no columns'}{hint}"
        )
    for col in df.columns:
        df[col] = df[col].str.strip()
    lines = np.arange(2, len(df) + 2, dtype=np.int64)
    blank = (df == "").all(axis=1).to_numpy()
    return df[~blank].reset_index(drop=True), lines[~blank]


def _check_names(path: Path, lines: np.ndarray, names: pd.Series, what: str = "Image") -> None:
    """Raise on empty or duplicate values in ``names`` (a column of a CSV read by _read_csv)."""
    empty = np.flatnonzero((names == "").to_numpy())
    if len(empty):
        raise DataError(f"{_where(path, lines, int(empty[0]))}: empty {what} value")
    dup = names.duplicated(keep=False).to_numpy()
    if dup.any():
        rows = np.flatnonzero(dup)
        first = rows[0]
        same = rows[(names.to_numpy()[rows] == names.iloc[first])]
        raise DataError(
            f"{path}: {what} {names.iloc[first]!r} appears more than once, on lines "
            f"{', '.join(str(lines[r]) for r in same[:_MAX_REPORTED])} "
            f"(data rows {', '.join(str(r + 1) for r in same[:_MAX_REPORTED])}); "
            f"expected each {what} once"
        )
    folded = names.str.lower()
    dup = folded.duplicated(keep=False).to_numpy()
    if dup.any():
        rows = np.flatnonzero(dup)
        same = rows[folded.to_numpy()[rows] == folded.iloc[rows[0]]][:2]
        raise DataError(
            f"{path}: {what} names {names.iloc[same[0]]!r} (line {lines[same[0]]}) and "
            f"{names.iloc[same[1]]!r} (line {lines[same[1]]}) differ only in case; on a case-insensitive "
            "file system (Windows, macOS) they are one file: rename one"
        )


def read_train_csv(path: str | Path, fmt: str | Format | None = None) -> pd.DataFrame:
    """Read and check ``train.csv``.

    Args:
        path: the CSV file: columns ``Image,Id`` (2019) or ``image,species,individual_id``
            (2022), and optionally :data:`ORIGIN` (others are ignored).
        fmt: the format (:mod:`whale.formats`); None = read from the header.

    Returns:
        DataFrame with the columns ``Image`` and ``Id`` (str), ``species`` (str) when the
        format has one, plus ``Origin`` (one of :data:`ORIGINS`) when the file has it, index ``0..n-1``.

    Raises:
        DataError: missing file or columns, empty Image, Id or species, duplicate Image (the
            message names the file and the line).
    """
    return _read_train(Path(path), fmt)[0]


def _header_format(path: Path) -> tuple[Format, str]:
    """The format ``path``'s header fits (:data:`whale.formats.DEFAULT` if none), and a hint for the error."""
    try:
        return format_of_header(read_header(path), str(path)), ""
    except DataError:
        others = "; ".join(f"{','.join(f.train_columns)} ({f.name})" for f in FORMATS.values() if f != DEFAULT)
        return DEFAULT, f" (or {others})"


def _read_train(path: Path, fmt: str | Format | None = None) -> tuple[pd.DataFrame, np.ndarray]:
    """:func:`read_train_csv` plus the ``[n]`` int64 line number of each row."""
    fmt, hint = (get_format(fmt), "") if fmt is not None else _header_format(path)
    df, lines = _read_csv(path, fmt.train_columns, hint)
    renamed = {fmt.image_column: "Image", fmt.id_column: "Id"}
    if fmt.species_column is not None:
        renamed[fmt.species_column] = SPECIES
    df = df.drop(columns=[c for c in ("Image", "Id", SPECIES) if c in df.columns and c not in renamed])
    df = df.rename(columns=renamed)
    _check_names(path, lines, df["Image"], fmt.image_column)
    for col, what in ((c, name) for name, c in renamed.items() if c != "Image"):
        empty = np.flatnonzero((df[col] == "").to_numpy())
        if len(empty):
            row = int(empty[0])
            expected = f"an individual's id or {fmt.open_label}" if col == "Id" else "a species name"
            raise DataError(f"{_where(path, lines, row)}: empty {what} for image {df['Image'].iloc[row]!r} "
                            f"(expected {expected})")
    columns = ["Image", "Id"] + ([SPECIES] if fmt.species_column is not None else [])
    if ORIGIN not in df.columns:
        return df[columns].copy(), lines
    df[ORIGIN] = df[ORIGIN].replace("", "train")
    bad = np.flatnonzero(~df[ORIGIN].isin(ORIGINS).to_numpy())
    if len(bad):
        raise DataError(f"{_where(path, lines, int(bad[0]))}: {ORIGIN} is {df[ORIGIN].iloc[int(bad[0])]!r}; "
                        f"expected one of {', '.join(ORIGINS)} (or empty)")
    return df[columns + [ORIGIN]].copy(), lines


def read_solution(root: str | Path, images: list[str] | None = None) -> dict[str, str]:
    """True ids of a competition's test images, from ``root/test_solution.csv``.

    The synthetic competition (:mod:`whale.data.synth`) and the benchmarks' mini-competitions write
    that file (Kaggle's data has none); it has ``train.csv``'s format (read from its header) and checks.

    Args:
        root: the competition folder. images: test image names that must all be present.

    Returns:
        dict image name -> id.

    Raises:
        DataError: a missing or malformed file, or an image of ``images`` without a row (the
            message names the file, and the line or image).
    """
    path = Path(root) / "test_solution.csv"
    df, _ = _read_train(path)
    sol = dict(zip(df["Image"], df["Id"]))
    missing = [n for n in images or () if n not in sol]
    if missing:
        raise DataError(f"{path}: no row for test image {missing[0]!r} ({len(missing)} missing)")
    return sol


def _parse_int(where: str, col: str, text: str) -> int:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not np.isfinite(value) or value != int(value):
        raise DataError(f"{where}: column {col} is {text!r}; expected an integer pixel coordinate")
    return int(value)


def read_boxes(path: str | Path) -> dict[str, Box]:
    """Read and check ``bounding_boxes.csv``.

    Args:
        path: the CSV file, columns ``Image,x0,y0,x1,y1``; coordinates are integer pixels
            (``12`` or ``12.0``), x1/y1 exclusive.

    Returns:
        dict image name -> ``(x0, y0, x1, y1)`` Python ints.

    Raises:
        DataError: missing columns, duplicate or empty Image, a non-integer or negative
            coordinate, or ``x1 <= x0`` / ``y1 <= y0`` (the message names the file and line).
    """
    return read_box_rows(path)[0]


def read_box_rows(path: str | Path) -> tuple[dict[str, Box], dict[str, str]]:
    """:func:`read_boxes` plus where each box is: image name -> ``"FILE, line L (data row R)"``.

    For checks that need more than the CSV (the image's size, whether it exists), so that their
    errors name the row too.
    """
    path = Path(path)
    cols = ("Image", "x0", "y0", "x1", "y1")
    df, lines = _read_csv(path, cols)
    where_of: dict[str, str] = {}
    _check_names(path, lines, df["Image"])
    boxes: dict[str, Box] = {}
    values = df[list(cols)].to_numpy()
    for row, (name, *coords) in enumerate(values):
        where = _where(path, lines, row)
        x0, y0, x1, y1 = (_parse_int(where, c, t) for c, t in zip(cols[1:], coords))
        if min(x0, y0, x1, y1) < 0:
            raise DataError(
                f"{where}: negative coordinate in box ({x0}, {y0}, {x1}, {y1}) "
                f"of {name!r}; expected pixels >= 0"
            )
        if x1 <= x0 or y1 <= y0:
            raise DataError(
                f"{where}: empty box ({x0}, {y0}, {x1}, {y1}) of {name!r}; "
                "expected x1 > x0 and y1 > y0 (x1, y1 exclusive)"
            )
        boxes[name] = (x0, y0, x1, y1)
        where_of[name] = where
    return boxes, where_of


def _name_problem(name: object) -> str | None:
    """Why ``name`` is not a plain relative file name, or None if it is one (no I/O)."""
    if not isinstance(name, str) or not name:
        return "an empty name"
    if "\x00" in name:
        return "a NUL byte"
    if "\\" in name:
        return "a backslash"
    if name.startswith("/") or Path(name).is_absolute() or (len(name) > 1 and name[1] == ":"):
        return "an absolute path"
    if ".." in Path(name).parts:
        return "a '..' component"
    return None


def safe_image_path(folder: str | Path, name: str) -> Path:
    """``folder / name``, refusing names that would read outside ``folder``.

    Rejected: empty names, NUL bytes, absolute paths, backslashes, ``..`` components, and
    names whose resolved path (following symlinks) is not inside the resolved ``folder``.
    The file itself need not exist.

    Returns:
        ``Path(folder) / name`` (not resolved).

    Raises:
        DataError: naming the folder and the offending name.
    """
    folder = Path(folder)
    bad = _name_problem(name)
    if bad is None:
        path = folder / name
        try:
            resolved = path.resolve()
            resolved.relative_to(folder.resolve())
        except ValueError:
            bad = f"a path that resolves outside the folder (to {resolved})"
        except (OSError, RuntimeError) as exc:  # symlink loops and the like
            bad = f"a path that cannot be resolved ({exc})"
        else:
            return path
    raise DataError(f"image name {name!r} in {folder} is {bad}; expected a plain file name inside {folder}")


def _check_images_exist(folder: Path, names: list[str], csv: Path, lines: np.ndarray) -> None:
    """Raise on the first unsafe name, or list the first few names not found (with rows)."""
    # One directory listing answers the common case (plain files in a flat folder) without
    # resolving every path; symlinks and sub-folder names take the full check.
    entries = {}
    if folder.is_dir():
        entries = {e.name: e for e in os.scandir(folder)}
    missing: list[tuple[int, str]] = []
    for row, name in enumerate(names):
        entry = entries.get(name)
        if entry is not None and _name_problem(name) is None and not entry.is_symlink() and entry.is_file():
            continue
        try:
            path = safe_image_path(folder, name)
        except DataError as exc:
            raise DataError(f"{_where(csv, lines, row)}: {exc}") from None
        if not path.is_file():
            missing.append((row, name))
    if missing:
        shown = "; ".join(f"{_line(lines, r)}: {n!r}" for r, n in missing[:_MAX_REPORTED])
        more = f" and {len(missing) - _MAX_REPORTED} more" if len(missing) > _MAX_REPORTED else ""
        raise DataError(f"{csv}: {len(missing)} listed image(s) not found in {folder}: {shown}{more}")


def _list_test(folder: Path) -> list[str]:
    if not folder.is_dir():
        return []
    names = sorted(
        e.name
        for e in os.scandir(folder)
        if e.is_file() and not e.name.startswith(".") and e.name.lower().endswith(IMAGE_SUFFIXES)
    )
    folded = [n.lower() for n in names]
    clash = sorted({n for n, f in zip(names, folded) if folded.count(f) > 1})
    if clash:
        raise DataError(f"{folder}: image names that differ only in case: {', '.join(clash[:6])}; on a "
                        "case-insensitive file system (Windows, macOS) they are one file: rename them")
    return names


def load_competition(root: str | Path, fmt: str | Format | None = None) -> Competition:
    """Load and check a Kaggle-format competition folder (see the module docstring).

    Every image listed in ``train.csv`` (and in ``sample_submission.csv``, if present) must
    exist; boxes are parsed and checked. Images are not decoded here.

    Args:
        root: the folder. fmt: its format (:mod:`whale.formats`, a name or a
            :class:`whale.formats.Format`); None = read from ``train.csv``'s header.

    Raises:
        DataError: a missing folder or file, a malformed CSV, an unsafe or missing image name;
            the message names the file and line.
    """
    root = Path(root)
    if not root.is_dir():
        raise DataError(f"{root}: competition folder not found (expected {TRAIN_CSV} and {TRAIN_DIR}/ inside)")
    if fmt is None:
        fmt = _header_format(root / TRAIN_CSV)[0] if (root / TRAIN_CSV).is_file() else DEFAULT
    fmt = get_format(fmt)
    train_dir = root / fmt.train_dir
    if not train_dir.is_dir():
        raise DataError(f"{train_dir}: training image folder not found")
    train, lines = _read_train(root / TRAIN_CSV, fmt)
    _check_images_exist(train_dir, train["Image"].tolist(), root / TRAIN_CSV, lines)

    sample_path = root / SAMPLE_CSV
    test_dir = root / fmt.test_dir
    if sample_path.is_file():
        image_col = fmt.submission_columns[0]
        sample, lines = _read_csv(sample_path, (image_col,))
        _check_names(sample_path, lines, sample[image_col], image_col)
        test_images = sample[image_col].tolist()
        _check_images_exist(test_dir, test_images, sample_path, lines)
    else:
        sample_path = None
        test_images = _list_test(test_dir)

    boxes_path = root / BOXES_CSV
    boxes = read_boxes(boxes_path) if boxes_path.is_file() else {}
    return Competition(root=root, train=train, test_images=test_images, boxes=boxes, sample_path=sample_path,
                       format=fmt)
