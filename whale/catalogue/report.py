"""The review page of a batch's proposals: a static HTML report, and the decisions it exports.

:func:`write_report` turns ``proposals.json`` (what matching a new batch against the catalogue
proposes) into ``OUT/index.html``: per photo the query and its candidate individuals side by
side (the best image of each, its score and rank), the "possibly new" flag, the group of photos
of the batch that match each other, and, with ``heatmaps=True``, the paper's heatmaps
(:mod:`whale.explain.heatmap`) of the query and of every candidate image, and with ``matches=True``
the keypoint matcher's view of each pair (:mod:`whale.catalogue.matchview`: query and candidate side by
side, the verified keypoint matches drawn between them). Every image links to a larger copy (click to
enlarge). Images are JPEG files in ``OUT/thumbs/``, ``OUT/large/``, ``OUT/heatmaps/`` and
``OUT/matches/`` named by their content's hash, linked relatively: the folder is self-contained (no
``file://`` link to an original, no inline base64, no CDN), so it opens offline in any browser and can
be moved or zipped.

The page holds a form (per photo: one candidate = ``match``, ``new`` with a name, or ``skip``)
whose "Export decisions" button shows the decisions CSV in a text box and downloads it as
``decisions.csv``; ``OUT/decisions.csv`` is also written as a template (every photo ``skip``)
for those who prefer editing a file. :func:`read_decisions` reads either back, every row
checked against the proposals. docs/review.md describes the page and the format.

``proposals.json``::

    {"batch": str, "run": str, "threshold": float, "scale": "probability" | "score" (optional),
     "photos": [{"photo": str (relative to the file's folder, or absolute), "hash": str,
                 "possibly_new": bool, "group": int | null,
                 "candidates": [{"individual": str, "score": float, "probability": float | null (optional),
                                 "image": str (absolute)}]}]}

(:mod:`whale.catalogue.proposals`); a candidate's calibrated probability is shown as ``P(same)`` before its score.
"""
from __future__ import annotations

import csv
import html
import io
from dataclasses import dataclass, replace
from pathlib import Path

from whale import NEW_WHALE
from whale.catalogue.db import SIGHTING_COLUMNS
from whale.catalogue.page import PAGE_CSS, PAGE_JS
from whale.catalogue.proposals import Candidate, read_proposals
from whale.catalogue.thumbs import JPEG_QUALITY, LARGE, ReviewImages  # noqa: F401  (read from here too)
from whale.core.errors import DataError

DECISIONS = ("match", "new", "skip")
"""What a decisions row may say about its photo."""
HEADER = ("photo", "decision", "individual")
"""The decisions CSV's columns; any of :data:`~whale.catalogue.db.SIGHTING_COLUMNS` may follow them."""


@dataclass(frozen=True)
class Photo:
    """One photo of the batch. ``photo`` as the proposals spell it (the decisions' key), ``path``
    resolved; ``candidates`` one per individual (its best image, resolved), best score first."""

    photo: str
    path: Path
    hash: str
    possibly_new: bool
    group: int | None
    candidates: tuple[Candidate, ...]


@dataclass(frozen=True)
class ProposalsFile:
    """A batch's ``proposals.json`` read back and checked for review (:func:`load_proposals`): its ``path`` and each
    photo resolved (:class:`Photo`). What ``match`` wrote is :class:`whale.catalogue.proposals.Proposals`."""

    path: Path
    batch: str
    run: str
    threshold: float
    photos: tuple[Photo, ...]
    scale: str = "score"


@dataclass(frozen=True)
class Decision:
    """One row of a decisions file: ``individual`` is None for ``skip``; ``row`` counts the header as row 1;
    the sighting's columns None where the file has no such column or leaves it empty."""

    photo: str
    decision: str
    individual: str | None
    row: int
    date: str | None = None
    location: str | None = None
    encounter: str | None = None

    def sighting(self) -> dict[str, str]:
        """The sighting columns this row fills in."""
        return {c: getattr(self, c) for c in SIGHTING_COLUMNS if getattr(self, c) is not None}


def load_proposals(path) -> ProposalsFile:
    """Read and check ``proposals.json`` (:func:`whale.catalogue.proposals.read_proposals`: every
    error names the file and the key, ``photos[2].candidates[0].score``), paths resolved relative
    to the file's folder. A candidate individual listed twice for one photo keeps its best-scored
    image (the page shows the best image per individual).
    """
    path = Path(path)
    raw = read_proposals(path)
    photos = []
    for p in raw.photos:
        best: dict[str, Candidate] = {}
        for c in p.candidates:
            if c.individual not in best or c.score > best[c.individual].score:
                best[c.individual] = replace(c, image=str(path.parent / c.image))
        ranked = tuple(sorted(best.values(), key=lambda c: -c.score))
        photos.append(Photo(p.photo, path.parent / p.photo, p.hash, p.possibly_new, p.group, ranked))
    return ProposalsFile(path, raw.batch, raw.run, raw.threshold, tuple(photos), raw.scale)


def _threshold_text(props: ProposalsFile) -> str:
    """How the batch flagged "possibly new": a probability of the same whale, or (earlier batches) a score."""
    if props.scale == "probability":
        return f"possibly new below P(same) {props.threshold:.3f}"
    return f"threshold {props.threshold:.3f}"


def _e(text) -> str:
    return html.escape(str(text), quote=True)


def _enlarge(href: str, img: str) -> str:
    """``img`` as a link to ``href`` (the larger copy), opened beside the page."""
    return f'<a class="enlarge" href="{_e(href)}" target="_blank" title="click to enlarge">{img}</a>'


def _figure(images: ReviewImages, path: Path, caption: str, alt: str, cls: str, control: str = "",
            match: tuple[str, int] | None = None) -> str:
    heat = images.heatmap(path)
    if match is not None:  # the keypoint matcher's view: query | candidate, verified matches drawn
        cls += " with-match"
        imgs = _enlarge(match[0], f'<img class="match" src="{_e(match[0])}" alt="{_e("query beside " + alt)}">')
        caption += f'<br><span class="matches">{match[1]} verified keypoint matches</span>'
    else:
        imgs = _enlarge(images.large(path), f'<img src="{_e(images.thumb(path))}" alt="{_e(alt)}">')
    if heat:
        imgs += f'<img class="heat" src="{_e(heat)}" alt="{_e("heatmap of " + alt)}">'
    tag = "label" if control else "div"
    return (f'<figure class="{cls}"><{tag} class="pick">{imgs}<figcaption>{control}{caption}</figcaption>'
            f'</{tag}></figure>')


def _section(k: int, photo: Photo, images: ReviewImages, groups: dict[int, list[int]]) -> str:
    query = _figure(images, photo.path, f"query<br><small>{_e(photo.hash)}</small>", f"query {photo.photo}", "query")
    cands = []
    for rank, c in enumerate(photo.candidates, 1):
        radio = (f'<input type="radio" name="d{k}" value="match" data-individual="{_e(c.individual)}" '
                 f'aria-label="match {_e(c.individual)}">')
        cands.append(_figure(images, Path(c.image), f'#{rank} <b class="individual">{_e(c.individual)}</b><br>' + (
                                 "" if c.probability is None else  # first: the number a researcher decides on
                                 f'P(same) <span class="probability">{c.probability:.3f}</span> · ') +
                             f'score <span class="score">{c.score:.3f}</span>',
                             f"#{rank} {c.individual}",
                             "candidate", radio, images.match(photo.path, Path(c.image))))
    flags = '<span class="flag possibly-new">possibly new</span>' if photo.possibly_new else ""
    if photo.group is not None:
        others = [f'<a href="#p{j}">#{j}</a>' for j in groups[photo.group] if j != k]
        flags += (f'<span class="flag group" data-group="{photo.group}">group {photo.group}'
                  f'{": with " + ", ".join(others) if others else ""}</span>')
    none = '<p class="none">no candidate above the threshold</p>' if not photo.candidates else ""
    return f"""<section class="photo" id="p{k}" data-photo="{_e(photo.photo)}">
<h2>#{k} <span class="name">{_e(photo.photo)}</span> {flags}</h2>
<div class="row">{query}{''.join(cands)}</div>{none}
<div class="choice"><label><input type="radio" name="d{k}" value="new"> new individual:</label>
<input type="text" class="new-name" name="n{k}" placeholder="name" aria-label="name of the new individual">
<label><input type="radio" name="d{k}" value="skip" checked> skip</label></div>
</section>"""


def render_page(props: ProposalsFile, images: ReviewImages) -> str:
    """The page's HTML: every text escaped, every image a relative link made by ``images``."""
    groups: dict[int, list[int]] = {}
    for k, photo in enumerate(props.photos, 1):
        if photo.group is not None:
            groups.setdefault(photo.group, []).append(k)
    sections = "\n".join(_section(k, p, images, groups) for k, p in enumerate(props.photos, 1))
    n_new = sum(p.possibly_new for p in props.photos)
    title = f"Review of batch {props.batch}"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<title>{_e(title)}</title><style>{PAGE_CSS}</style></head>
<body><header><h1>{_e(title)}</h1>
<p>Run <code>{_e(props.run)}</code>, {_threshold_text(props)}: {len(props.photos)} photos,
{n_new} possibly new. Per photo pick the matching candidate, or name a new individual, or skip it;
then <em>Export decisions</em> (the CSV downloads as <code>decisions.csv</code> and shows below).</p></header>
<form id="review" onsubmit="return false">
{sections}
<footer><button type="button" id="export">Export decisions</button> <span id="export-status" role="status"></span>
<textarea id="decisions-csv" readonly rows="8" aria-label="decisions CSV"></textarea></footer>
</form><script>{PAGE_JS}</script></body></html>
"""


def template_csv(props: ProposalsFile) -> str:
    """The decisions CSV with every photo ``skip``."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(HEADER)
    writer.writerows([p.photo, "skip", ""] for p in props.photos)
    return out.getvalue()


def write_report(proposals_path, out_dir, heatmaps: bool = False, run_dir=None, thumb: int = 256,
                 checkpoint: str = "best", verbose: bool = False, matches=None) -> Path:
    """Write the review page of ``proposals_path`` into ``out_dir``; returns ``out_dir/index.html``.

    Also writes ``out_dir/thumbs/*.jpg`` (longest side ``thumb`` px) and ``out_dir/large/*.jpg`` (what a
    click enlarges to, longest side :data:`LARGE`), with ``heatmaps`` the
    heatmaps of run ``run_dir`` (its ``checkpoint``) in ``out_dir/heatmaps/*.jpg`` (``thumb``
    px squares, the model's view of the whole image), with ``matches`` (a
    :class:`whale.keypoints.FeatureStore`) the keypoint match view of every query and candidate in
    ``out_dir/matches/*.jpg`` (:mod:`whale.catalogue.matchview`), and ``out_dir/decisions.csv``: the
    template, unless one is there that is no longer the untouched template (a user's edits are
    never overwritten). Every file is written atomically.

    Raises:
        DataError: a bad proposals file, or an image that cannot be read (naming the photo's key).
        OutputError: ``out_dir`` cannot be written.
    """
    from whale.core.files import check_output, write_text_atomic
    from whale.core.progress import progress_bar

    if int(thumb) != thumb or thumb < 16:
        raise ValueError(f"thumb must be an integer of at least 16 pixels, got {thumb!r}")
    if heatmaps and run_dir is None:
        raise ValueError("heatmaps=True needs run_dir, the run whose branch draws them")
    out_dir = check_output(out_dir, "out_dir", folder=True)
    props = load_proposals(proposals_path)
    explainer = None
    if heatmaps:
        from whale.explain.cli import Explainer

        explainer = Explainer(run_dir, checkpoint)
    views = None
    if matches is not None:
        from whale.catalogue.matchview import MatchViews

        views = MatchViews(matches)
    images = ReviewImages(out_dir, int(thumb), explainer, views)
    for photo in progress_bar(props.photos, desc="review images", enabled=verbose):
        for path in [photo.path, *(Path(c.image) for c in photo.candidates)]:
            try:
                images.thumb(path)
                images.large(path)
                images.heatmap(path)
                if path != photo.path:
                    images.match(photo.path, path)
            except DataError as exc:
                raise DataError(f"{props.path}: photo {photo.photo!r}: {exc}") from None
    page = write_text_atomic(out_dir / "index.html", render_page(props, images))
    template, existing = template_csv(props), out_dir / "decisions.csv"
    if not existing.is_file() or _is_template(existing):
        write_text_atomic(existing, template)
    return page


def _is_template(path: Path) -> bool:
    """Whether ``path`` holds nothing but ``skip`` rows (a template, of these proposals or others)."""
    try:
        rows = list(csv.reader(io.StringIO(path.read_text(encoding="utf-8-sig"))))
    except (OSError, UnicodeDecodeError, csv.Error):
        return False
    return bool(rows) and tuple(rows[0]) == HEADER and all(r[1:] in (["skip", ""], ["skip"]) for r in rows[1:] if r)


def read_decisions(path, proposals, allow_unlisted: bool = False) -> list[Decision]:
    """The decisions CSV ``photo,decision,individual[,date,location,encounter]`` at ``path``, checked
    row by row against ``proposals``.

    ``proposals``: a :class:`ProposalsFile` or the path of ``proposals.json``. Each row names a photo
    of the proposals (as spelled there; at most one row per photo; photos without a row are left
    undecided, like ``skip``) and one of :data:`DECISIONS`: ``match`` with one of that photo's
    candidate individuals (any other name only with ``allow_unlisted=True``: a match the model did
    not propose; whoever applies it checks that the individual exists), ``new`` with the new
    individual's name (not ``new_whale``), ``skip`` with the individual empty. Any of the sighting
    columns (:data:`~whale.catalogue.db.SIGHTING_COLUMNS`, free text, in any order) may follow the
    three: ``accept`` records them with the photo's sighting. Fields are stripped
    of surrounding spaces; blank lines are ignored; a UTF-8 byte-order mark is accepted.

    Returns:
        the decisions in file order.

    Raises:
        DataError: naming the file and the row (the header is row 1) of the first bad row.
    """
    path = Path(path)
    props = proposals if isinstance(proposals, ProposalsFile) else load_proposals(proposals)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise DataError(f"{path}: decisions file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: not a readable UTF-8 text file ({exc})") from None
    try:
        rows = [(n, [f.strip() for f in r]) for n, r in enumerate(csv.reader(io.StringIO(text)), 1) if any(r)]
    except csv.Error as exc:
        raise DataError(f"{path}: not a CSV file ({exc})") from None
    extra = tuple(rows[0][1][len(HEADER):]) if rows else ()
    if (not rows or tuple(rows[0][1][:len(HEADER)]) != HEADER or len(set(extra)) < len(extra)
            or not set(extra) <= set(SIGHTING_COLUMNS)):
        raise DataError(f"{path} row 1: expected the header {','.join(HEADER)}, optionally followed by any of "
                        f"{','.join(SIGHTING_COLUMNS)}, received {','.join(rows[0][1]) if rows else 'an empty file'}")
    width = len(HEADER) + len(extra)
    photos = {p.photo: p for p in props.photos}
    by_name: dict[str, list] = {}
    for p in props.photos:
        by_name.setdefault(Path(p.photo).name, []).append(p)
    # A photo may also be named by its file name alone where that is unique in the batch.
    photos.update({n: ps[0] for n, ps in by_name.items() if len(ps) == 1 and n not in photos})
    out, seen = [], {}
    for n, fields in rows[1:]:
        def bad(message):
            return DataError(f"{path} row {n}: {message}")
        if len(fields) == 2 and not extra:
            fields.append("")
        if len(fields) != width:
            raise bad(f"expected {width} fields ({','.join(HEADER + extra)}), received {len(fields)}")
        name, decision, individual = fields[:3]
        sighting = {c: v for c, v in zip(extra, fields[3:]) if v}
        photo = photos.get(name)
        if photo is None:
            raise bad(f"photo {name!r} is not in {props.path}")
        name = photo.photo
        if name in seen:
            raise bad(f"photo {name!r} has a decision in row {seen[name]} already")
        seen[name] = n
        problem = decision_problem(photo, decision, individual, allow_unlisted)
        if problem:
            raise bad(problem)
        out.append(Decision(name, decision, individual or None, n, **sighting))
    return out


def decision_problem(photo: Photo, decision: str, individual: str, allow_unlisted: bool = False,
                     kinds: tuple[str, ...] = DECISIONS) -> str | None:
    """What is wrong with deciding ``decision`` (one of ``kinds``) with ``individual`` ("" for none) for
    ``photo``, or None: the one check of a decision, a decisions file's row (:func:`read_decisions`) or the
    review server's keypress (:mod:`whale.catalogue.server`, whose ``kinds`` add ``undo``)."""
    if decision not in kinds:
        return f"decision {decision!r}: expected one of {', '.join(kinds)}"
    if decision in ("skip", "undo"):
        return f"{decision} takes no individual, received {individual!r}" if individual else None
    if not individual:
        return f"{decision} needs an individual"
    if individual.startswith("new:"):
        return f"individual {individual!r}: the prefix 'new:' is reserved (the catalogue records new ones so)"
    if decision == "new" and individual == NEW_WHALE:
        return f"{NEW_WHALE!r} is the label of unknown individuals, not a name: choose another"
    if decision == "match" and not allow_unlisted and individual not in {c.individual for c in photo.candidates}:
        listed = ", ".join(c.individual for c in photo.candidates) or "none"
        return (f"{individual!r} is not a candidate of {photo.photo!r} (candidates: {listed}); a match the model "
                "did not propose needs allow_unlisted")
    return None
