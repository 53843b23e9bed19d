"""Writing and checking Kaggle submission files (``Image,Id``; ``Id`` = 5 space-separated labels).

Happywhale 2022 names the columns ``image,predictions`` (``columns``; :mod:`whale.formats`);
the rules are the same.

:func:`write_submission` validates every row first and writes atomically (a temp file in the
target folder, then ``os.replace``: :func:`whale.core.files.atomic_write`), so a crash never leaves a half-written CSV behind.
:func:`check_submission` reads a file back and lists every problem with its file and line.

Command line::

    python -m whale.submission check FILE [--sample sample_submission.csv] [--format happywhale2022]
    python -m whale.submission score FILE --solution test_solution.csv

``check`` prints ``OK: FILE (N rows)`` and exits 0, or prints the problems and exits 1 (2 when the
sample itself cannot be read). ``score`` (:func:`score_submission`) checks the file against the solution's images,
then prints its MAP@5 over all images, over the known and the open-set (``new_whale``) ones, and how often the
open label comes first against its true share: a threshold tuned locally, measured on a split whose answers you hold.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from whale import command
from whale.core.errors import DataError
from whale.core.files import atomic_write
from whale.formats import DEFAULT, FORMATS, get_format, read_header
from whale.metrics import as_labels

__all__ = ["N_LABELS", "read_sample_images", "write_submission", "check_submission", "score_submission",
           "submission_figures", "main"]

N_LABELS = 5
HEADER = ["Image", "Id"]
_MAX_NAMES = 10  # how many offending names an error message lists
_MAX_PRINTED = 50  # how many problems the CLI prints


def _some(names: Sequence[str]) -> str:
    shown = ", ".join(repr(n) for n in list(names)[:_MAX_NAMES])
    more = len(names) - _MAX_NAMES
    return shown + (f" ... and {more} more" if more > 0 else "")


def read_sample_images(sample: str | os.PathLike, image_column: str = "Image") -> list[str]:
    """Image names of a ``sample_submission.csv``, in file order.

    Args:
        sample: path to a CSV with an ``image_column`` column (``Image``; 2022: ``image``).

    Returns:
        The image names (str), one per data row.

    Raises:
        DataError: the file is missing, has no image column, or repeats an image.
    """
    sample = Path(sample)
    if not sample.is_file():
        raise DataError(f"{sample}: sample submission not found")
    try:
        return _read_sample_rows(sample, image_column)
    except (UnicodeDecodeError, csv.Error) as err:
        raise DataError(f"{sample}: not a UTF-8 CSV file ({err})") from None


def _read_sample_rows(sample: Path, image_column: str) -> list[str]:
    with open(sample, newline="", encoding="utf-8-sig") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if not header or image_column not in header:
            raise DataError(f"{sample}: line 1: expected a header with an {image_column!r} column, got {header}")
        col = header.index(image_column)
        images: list[str] = []
        first_line: dict[str, int] = {}
        for row in reader:
            if not row:
                continue
            if len(row) <= col or not row[col]:
                raise DataError(f"{sample}: line {reader.line_num}: no image name in {row}")
            name = row[col]
            if name in first_line:
                raise DataError(
                    f"{sample}: line {reader.line_num}: image {name!r} repeats line {first_line[name]}"
                )
            first_line[name] = reader.line_num
            images.append(name)
    return images


def _validate_rows(path: Path, images: Sequence[str], predictions: Sequence) -> list[list[str]]:
    if len(images) != len(predictions):
        raise DataError(
            f"{path}: {len(images)} images but {len(predictions)} predictions; expected one each"
        )
    seen: dict[str, int] = {}
    rows: list[list[str]] = []
    for i, (image, prediction) in enumerate(zip(images, predictions)):
        image = str(image)
        if not image or any(c in image for c in ',"\r\n') or image != image.strip():
            raise DataError(f"{path}: row {i}: bad image name {image!r} (empty, whitespace, comma or quote)")
        if image in seen:
            raise DataError(f"{path}: row {i}: image {image!r} already given in row {seen[image]}")
        seen[image] = i
        labels = as_labels(prediction, f"prediction for image {image!r}", DataError)
        bad = [lab for lab in labels if not lab or lab != lab.strip() or " " in lab or "," in lab]
        if bad:
            raise DataError(f"{path}: row {i}: image {image!r}: bad labels {bad} (empty, space or comma)")
        if len(labels) != N_LABELS:
            raise DataError(
                f"{path}: row {i}: image {image!r}: expected {N_LABELS} labels, got {len(labels)} {labels}"
            )
        if len(set(labels)) != len(labels):
            raise DataError(f"{path}: row {i}: image {image!r}: repeated labels in {labels}")
        rows.append(labels)
    return rows


def write_submission(
    path: str | os.PathLike,
    images: Sequence[str],
    predictions: Sequence[Sequence[str] | str],
    sample: str | os.PathLike | None = None,
    columns: Sequence[str] = HEADER,
) -> Path:
    """Write ``Image,Id`` rows (``columns``) atomically after checking them.

    Args:
        path: output CSV; its folder is created if needed.
        images: ``n`` distinct image names.
        predictions: ``n`` predictions, each 5 distinct labels (a sequence or a
            space-separated string).
        sample: optional ``sample_submission.csv``; rows are then written in its order and
            its image set must equal ``images`` exactly.
        columns: the header, image column first (:attr:`whale.formats.Format.submission_columns`).

    Returns:
        ``path`` as a ``Path``.

    Raises:
        DataError: lengths differ, an image repeats, a prediction is not 5 distinct
            non-empty labels, or images are missing from / extra to the sample (named).
    """
    path = Path(path)
    images = [str(im) for im in images]
    predictions = list(predictions)
    rows = _validate_rows(path, images, predictions)
    by_image = dict(zip(images, rows))
    order = images
    if sample is not None:
        order = read_sample_images(sample, columns[0])
        missing = [im for im in order if im not in by_image]
        wanted = set(order)
        extra = [im for im in images if im not in wanted]
        if missing or extra:
            parts = []
            if missing:
                parts.append(f"{len(missing)} sample images have no prediction: {_some(missing)}")
            if extra:
                parts.append(f"{len(extra)} images are not in the sample: {_some(extra)}")
            raise DataError(f"{path}: rows do not match {sample}: " + "; ".join(parts))
    def write(tmp: Path) -> None:
        with open(tmp, "w", newline="", encoding="utf-8") as fh:
            writer = csv.writer(fh, lineterminator="\n")
            writer.writerow(list(columns))
            for image in order:
                writer.writerow([image, " ".join(by_image[image])])

    atomic_write(path, write, fsync=True)
    return path


def check_submission(path: str | os.PathLike, sample: str | os.PathLike | None = None,
                     columns: Sequence[str] = HEADER) -> list[str]:
    """List the problems of a submission file; an empty list means it is valid.

    Checks: the file exists and is readable, header is exactly ``Image,Id`` (``columns``), every row has 2
    fields and a non-empty image, images are unique, each ``Id`` holds 5 distinct labels; with
    a sample: same row count, no image outside the sample, none missing, same order.

    Args:
        path: the submission CSV.
        sample: optional ``sample_submission.csv``.
        columns: the expected header, image column first (2022: ``image,predictions``).

    Returns:
        Human-readable problems (str), each naming the file and, where there is one, the line.

    Raises:
        DataError: the sample (not the submission) is missing or unreadable.
    """
    path = Path(path)
    columns = list(columns)
    image_col, labels_col = columns
    sample_images = read_sample_images(sample, image_col) if sample is not None else None
    if not path.is_file():
        return [f"{path}: file not found"]
    problems: list[str] = []
    try:
        with open(path, newline="", encoding="utf-8-sig") as fh:
            lines = list(_numbered_rows(fh))
    except (UnicodeDecodeError, csv.Error) as err:
        return [f"{path}: cannot be read as a UTF-8 CSV: {err}"]
    if not lines:
        return [f"{path}: empty file; expected the header {','.join(columns)} and one row per image"]
    header_line, header = lines[0]
    if header != columns:
        wrong = f"{path}: line {header_line}: expected the header {','.join(columns)}, got {','.join(header)!r}"
        if image_col not in header or labels_col not in header:
            return [wrong]
        problems.append(wrong)
    i_col, id_col = header.index(image_col), header.index(labels_col)

    first_line: dict[str, int] = {}
    images: list[tuple[int, str]] = []
    for line, row in lines[1:]:
        if not row:
            problems.append(f"{path}: line {line}: blank line")
            continue
        if len(row) != len(header):
            problems.append(f"{path}: line {line}: expected {len(header)} fields, got {len(row)}: {row}")
            if len(row) <= max(i_col, id_col):
                continue
        image = row[i_col]
        if not image.strip():
            problems.append(f"{path}: line {line}: empty image name")
            continue
        if image in first_line:
            problems.append(f"{path}: line {line}: image {image!r} already on line {first_line[image]}")
        else:
            first_line[image] = line
            images.append((line, image))
        labels = row[id_col].split()
        if len(labels) != N_LABELS:
            problems.append(
                f"{path}: line {line}: image {image!r} has {len(labels)} labels, expected {N_LABELS}"
            )
        repeated = sorted({lab for lab in labels if labels.count(lab) > 1})
        if repeated:
            problems.append(f"{path}: line {line}: image {image!r} repeats label(s) {repeated}")

    n_rows = len(lines) - 1
    if sample_images is not None:
        problems.extend(_compare_with_sample(path, Path(sample), n_rows, images, sample_images))
    return problems


def score_submission(path: str | os.PathLike, solution: str | os.PathLike) -> dict:
    """MAP@5 of a valid submission against a solution file (``train.csv``'s columns of a format: ``Image,Id``, or
    ``image,species,individual_id``), one row per test image.

    Returns:
        ``{"map5", "map5_known", "map5_open", "open_first", "open_share", "open_first_open", "open_first_missed",
        "open_first_found", "images", "known", "open", "open_label"}``: MAP@5 over all images, over those whose
        answer is a known individual and over the open-set ones (NaN where there are none), the share of images
        with the open label first, and its true share; then the open label first split by why, as shares of all
        images: open-set images, known ones whose individual is not among the five labels (placing the open label
        first cost them nothing) and known ones whose individual follows it (each lost a rank).

    Raises:
        DataError: an unreadable solution (naming it and the row), or a submission that is not valid for the
            solution's images (its problems listed).
    """
    from whale.formats import format_of_header

    path, solution = Path(path), Path(solution)
    try:
        with open(solution, newline="", encoding="utf-8-sig") as fh:
            rows = list(_numbered_rows(fh))
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise DataError(f"{solution}: cannot read the solution: {err}") from None
    if not rows:
        raise DataError(f"{solution}: empty file; expected a header and one row per test image")
    fmt = format_of_header(rows[0][1], f"{solution}: line {rows[0][0]}")
    i_col, id_col = rows[0][1].index(fmt.image_column), rows[0][1].index(fmt.id_column)
    truth: dict[str, str] = {}
    for line, row in rows[1:]:
        if len(row) <= max(i_col, id_col) or not row[i_col].strip() or not row[id_col].strip():
            raise DataError(f"{solution}: line {line}: expected an image and its individual, got {row}")
        truth[row[i_col]] = row[id_col]
    columns = fmt.submission_columns
    problems = check_submission(path, None, columns)
    with open(path, newline="", encoding="utf-8-sig") as fh:
        predicted = {} if problems else {r[0]: r[1].split() for _, r in list(_numbered_rows(fh))[1:]}
    missing = [n for n in truth if n not in predicted]
    extra = [n for n in predicted if n not in truth]
    if not problems and missing:
        problems.append(f"{path}: {len(missing)} images of {solution} are missing: {_some(missing)}")
    if not problems and extra:
        problems.append(f"{path}: {len(extra)} images are not in {solution}: {_some(extra)}")
    if problems:
        raise DataError("\n".join(problems[:_MAX_PRINTED]))
    return submission_figures(predicted, truth, fmt.open_label)


def submission_figures(predicted: dict[str, Sequence[str]], truth: dict[str, str], open_label: str) -> dict:
    """:func:`score_submission`'s figures for predictions already read (``{image: labels}``, every image of
    ``truth`` present; ``open_label`` the format's, e.g. :data:`whale.NEW_WHALE`)."""
    from whale.metrics import precision_at_k_per_image

    names = list(truth)
    answers = [truth[n] for n in names]
    ap = precision_at_k_per_image([predicted[n] for n in names], answers, N_LABELS)
    is_open = [a == open_label for a in answers]
    known = [x for x, o in zip(ap, is_open) if not o]
    opened = [x for x, o in zip(ap, is_open) if o]
    first = [bool(predicted[n]) and predicted[n][0] == open_label for n in names]
    # Why the open label came first, as shares of all images: an open-set image (right), a known one whose
    # individual is nowhere among the labels (nothing lost by it), or one listed after it (pushed down a rank).
    why = [("open" if o else "found" if a in predicted[n] else "missed") for n, a, o, f in
           zip(names, answers, is_open, first) if f]
    images = len(names) or float("nan")
    return {"map5": float(sum(ap) / len(ap)) if names else float("nan"),
            "map5_known": float(sum(known) / len(known)) if known else float("nan"),
            "map5_open": float(sum(opened) / len(opened)) if opened else float("nan"),
            "open_first": sum(first) / len(first) if names else float("nan"),
            "open_share": sum(is_open) / len(is_open) if names else float("nan"),
            "open_first_open": why.count("open") / images, "open_first_missed": why.count("missed") / images,
            "open_first_found": why.count("found") / images,
            "images": len(names), "known": len(known), "open": len(opened), "open_label": open_label}


def _numbered_rows(fh):
    """Yield ``(line number, fields)`` for each CSV record (line of its last physical line)."""
    reader = csv.reader(fh)
    for row in reader:
        yield reader.line_num, row


def _compare_with_sample(
    path: Path, sample: Path, n_rows: int, images: list[tuple[int, str]], sample_images: list[str]
) -> list[str]:
    problems = []
    if n_rows != len(sample_images):
        problems.append(f"{path}: {n_rows} rows, but {sample} has {len(sample_images)}")
    wanted = set(sample_images)
    for line, image in images:
        if image not in wanted:
            problems.append(f"{path}: line {line}: image {image!r} is not in {sample}")
    present = {image for _, image in images}
    missing = [im for im in sample_images if im not in present]
    if missing:
        problems.append(f"{path}: {len(missing)} images of {sample} are missing: {_some(missing)}")
    # Order is only meaningful once the image sets agree; report the first difference.
    if not missing and len(images) == len(sample_images):
        for (line, image), expected in zip(images, sample_images):
            if image != expected:
                problems.append(
                    f"{path}: line {line}: image {image!r}, but {sample} has {expected!r} here; "
                    "rows must follow the sample order"
                )
                break
    return problems


def _columns(path: Path, name: str | None) -> tuple[str, str]:
    """The submission columns of format ``name``, else of the format whose columns ``path``'s header has."""
    if name is not None:
        return get_format(name).submission_columns
    try:
        header = tuple(read_header(path))
    except DataError:  # missing or unreadable: check_submission says so
        return DEFAULT.submission_columns
    fits = [f.submission_columns for f in FORMATS.values() if f.submission_columns == header]
    return fits[0] if fits else DEFAULT.submission_columns


PROG = "python -m whale.submission"


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry: ``check FILE [--sample SAMPLE]``. Returns the exit status."""
    return command.main(PROG, add_arguments, run, argv)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``python -m whale.submission`` and ``whale submission`` (:mod:`whale.command`)."""
    parser.description = __doc__.splitlines()[0]
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="check a submission CSV")
    check.add_argument("file", type=Path)
    check.add_argument("--sample", type=Path, default=None, help="sample_submission.csv to compare with")
    check.add_argument("--format", choices=list(FORMATS), default=None,
                       help="competition format: its submission's columns (default: the one whose columns "
                            f"FILE's header has, else {DEFAULT.name})")
    score = sub.add_parser("score", help="a submission's MAP@5 against a solution you hold (a local split's answers)")
    score.add_argument("file", type=Path)
    score.add_argument("--solution", type=Path, required=True,
                       help="the test images' answers: train.csv's columns (Image,Id), one row per test image")


def run(args: argparse.Namespace) -> int:
    """``check``: 0 when the file is a valid submission, else 1; ``score``: its figures (0), a file that cannot be
    scored raises. Raises :class:`whale.core.errors.WhaleError` when a file cannot be read."""
    if args.command == "score":
        m = score_submission(args.file, args.solution)
        print(f"{args.file}: MAP@5 {m['map5']:.4f} over {m['images']} images (known {m['map5_known']:.4f} over "
              f"{m['known']}, {m['open_label']} {m['map5_open']:.4f} over {m['open']}); {m['open_label']} first "
              f"for {m['open_first']:.1%} (true share {m['open_share']:.1%}): {m['open_first_open']:.1%} "
              f"{m['open_label']}, {m['open_first_missed']:.1%} known whose individual is not among the five, "
              f"{m['open_first_found']:.1%} known whose individual it pushed down a rank")
        return 0
    problems = check_submission(args.file, args.sample, _columns(args.file, args.format))
    if problems:
        for problem in problems[:_MAX_PRINTED]:
            print(problem)
        if len(problems) > _MAX_PRINTED:
            print(f"... and {len(problems) - _MAX_PRINTED} more problems")
        return 1
    with open(args.file, newline="", encoding="utf-8-sig") as fh:
        n_rows = sum(1 for _ in csv.reader(fh)) - 1
    print(f"OK: {args.file} ({n_rows} rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
