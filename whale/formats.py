"""Competition formats as data: folder names, CSV columns, the open-set label, the submission's columns.

Two Kaggle competitions share the task (rank five ids per photo, MAP@5, one label for "an
individual not in the training set"), but not the files:

================  ========================  ==================================================
profile           ``humpback2019``          ``happywhale2022``
================  ========================  ==================================================
image folders     ``train/``, ``test/``     ``train_images/``, ``test_images/``
``train.csv``     ``Image,Id``              ``image,species,individual_id``
open-set label    ``new_whale``             ``new_individual``
submission        ``Image,Id``              ``image,predictions``
================  ========================  ==================================================

Inside the toolkit a competition is always the same table (:class:`whale.data.Competition`:
columns ``Image``, ``Id`` and, where the format has one, ``species``); only the reader, the
submission writer and the open-set label depend on the format. Every rule that inserts or
checks the open-set label takes it from :attr:`Format.open_label` (the ranking receives it as
``open_label``; :data:`whale.NEW_WHALE` is the 2019 default).

:func:`detect_format` reads a folder's ``train.csv`` header; a format named by the user
(``--format``) overrides it.
"""
from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from whale import NEW_WHALE
from whale.core.errors import ConfigError, DataError

TRAIN_CSV = "train.csv"


@dataclass(frozen=True)
class Format:
    """One competition's file layout.

    Attributes:
        name: the profile's name (``--format NAME``).
        train_dir, test_dir: image folders inside the competition folder.
        image_column, id_column: ``train.csv``'s image and individual columns.
        species_column: ``train.csv``'s species column, or None.
        open_label: the label of an individual absent from the training set.
        submission_columns: header of the submission CSV (image column, five labels column).
        singletons_open: whether ids with one training image stand in for open-set validation
            queries (:mod:`whale.data.folds`); for a format whose ``train.csv`` has no open-set rows.
    """

    name: str
    train_dir: str
    test_dir: str
    image_column: str
    id_column: str
    species_column: str | None
    open_label: str
    submission_columns: tuple[str, str]
    singletons_open: bool

    @property
    def train_columns(self) -> tuple[str, ...]:
        """``train.csv``'s required columns, in Kaggle's order."""
        if self.species_column is None:
            return (self.image_column, self.id_column)
        return (self.image_column, self.species_column, self.id_column)


HUMPBACK2019 = Format(name="humpback2019", train_dir="train", test_dir="test", image_column="Image",
                      id_column="Id", species_column=None, open_label=NEW_WHALE,
                      submission_columns=("Image", "Id"), singletons_open=False)
HAPPYWHALE2022 = Format(name="happywhale2022", train_dir="train_images", test_dir="test_images",
                        image_column="image", id_column="individual_id", species_column="species",
                        open_label="new_individual", submission_columns=("image", "predictions"),
                        singletons_open=True)
FORMATS: dict[str, Format] = {f.name: f for f in (HUMPBACK2019, HAPPYWHALE2022)}
"""Every profile by name; the first is the default."""
DEFAULT = HUMPBACK2019


def get_format(name: str | Format | None) -> Format:
    """The profile ``name`` (a :class:`Format` passes through; None = :data:`DEFAULT`).

    Raises:
        ConfigError: an unknown name, listing the valid ones.
    """
    if name is None:
        return DEFAULT
    if isinstance(name, Format):
        return name
    if name not in FORMATS:
        raise ConfigError(f"unknown competition format {name!r}; expected one of {', '.join(FORMATS)}")
    return FORMATS[name]


def format_of_header(header: list[str] | tuple[str, ...], where: str) -> Format:
    """The profile whose ``train.csv`` columns are all in ``header`` (other columns are allowed).

    Raises:
        DataError: no profile fits, naming ``where`` (the file and line), the header found and
            every profile's columns.
    """
    cols = {str(c).strip().lstrip("\ufeff") for c in header}
    for fmt in FORMATS.values():
        if set(fmt.train_columns) <= cols:
            return fmt
    expected = "; ".join(f"{','.join(f.train_columns)} ({f.name})" for f in FORMATS.values())
    raise DataError(f"{where}: header {','.join(header) or '(empty)'!r} fits no competition format; "
                    f"expected {expected}")


def read_header(path: Path) -> list[str]:
    """The first row of CSV ``path`` (``[]`` for an empty file).

    Raises:
        DataError: the file is missing or not UTF-8 text.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: file not found (expected a CSV with a header such as "
                        f"{' or '.join(','.join(f.train_columns) for f in FORMATS.values())})")
    try:
        with open(path, newline="", encoding="utf-8-sig") as fh:
            return [c.strip() for c in next(csv.reader(fh), [])]
    except (UnicodeDecodeError, csv.Error) as err:
        raise DataError(f"{path}: not a readable CSV file: {err}") from None


def detect_format(root: str | Path, override: str | Format | None = None) -> Format:
    """The format of competition folder ``root``: ``override`` if given, else from ``train.csv``'s header.

    Raises:
        DataError: no ``train.csv``, or a header that fits no format (file and line named).
        ConfigError: an unknown ``override``.
    """
    if override is not None:
        return get_format(override)
    path = Path(root) / TRAIN_CSV
    return format_of_header(read_header(path), f"{path}, line 1")
