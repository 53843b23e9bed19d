"""``whale catalogue``: keep a photo-ID catalogue, match new photos against it, record decisions.

    whale catalogue add CAT --photos DIR --labels LABELS.csv [--boxes BOXES.csv]
    whale catalogue match CAT --run RUN --photos NEW_DIR [--top 10] [--batch NAME] [--rematch]
    whale catalogue match CAT --method keypoints --photos NEW_DIR       # no training: the keypoint matcher
    whale catalogue match CAT --method joint --photos NEW_DIR [--run RUN] [--outline]   # every keypoint kind, one check
    whale catalogue review CAT --batch NAME [--heatmaps]      # HTML report; exports decisions.csv
    whale catalogue review CAT --batch NAME --serve [--port P] # keyboard review, each decision saved at once
    whale catalogue accept CAT --batch NAME --decisions decisions.csv [--date D --location L]

``init`` creates an empty catalogue (``add`` creates one too), ``index`` scores the catalogue's
photos with a run (``match`` does it first; only new photos are scored), ``export`` writes the
catalogue as a folder ``add`` reads back (photos, sightings, boxes, individuals, decisions),
``check`` verifies every stored photo and feature against its hash, ``remove`` takes a photo or an
individual out (after a confirmation; ``--yes`` for scripts), ``status`` counts rows.
docs/catalogue.md: the database, what is guaranteed (kills, concurrent commands, bad photos,
redecisions), measured figures.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from whale import command
from whale.catalogue import sql
from whale.catalogue.db import SIGHTING_COLUMNS
from whale.core.errors import DataError
from whale.ranking.stored import probability_arg


def _open(args, create: bool = False):
    from whale.catalogue.db import Catalogue

    return Catalogue.create(args.catalogue, exist_ok=True) if create else Catalogue.open(args.catalogue)


def _run_of(args, cat):
    from whale.catalogue.features import RunFeatures

    run = args.run or cat.meta("run")
    if run is None:
        raise DataError(f"{args.catalogue}: no run indexed yet; give --run RUN")
    checkpoint = args.checkpoint or (cat.meta("checkpoint") if not args.run else None) or "best"
    return RunFeatures(Path(run), checkpoint, verbose=not args.quiet)


def _init(args) -> str:
    from whale.catalogue.db import Catalogue

    Catalogue.create(args.catalogue).close()
    return f"created catalogue {args.catalogue}"


def _add(args) -> str:
    from whale.catalogue.db import DB_NAME
    from whale.catalogue.ingest import add_photos

    root = Path(args.catalogue)
    before = None if not root.is_dir() else set(root.iterdir())
    created = not (root / DB_NAME).exists()
    try:
        with _open(args, create=True) as cat:
            n = add_photos(cat, args.labels, args.photos, args.boxes, by=args.by, progress=not args.quiet)
            total = cat.counts()
    except BaseException:
        if created:  # the catalogue this add created, empty: a failed add leaves none
            _remove_created(root, before)
        raise
    return (f"added {n['added']} photos ({n['new_individuals']} new individuals, {n['duplicates']} already held, "
            f"{n['skipped_new_whale']} new_whale rows skipped); catalogue: {total['images']} photos of "
            f"{total['individuals']} individuals")


def _remove_created(root: Path, before: set[Path] | None) -> None:
    """Remove the catalogue a failed ``add`` created, if it is still empty: what appeared in ``root``
    (whose entries were ``before``; None: the folder was not there, so it goes too)."""
    import os
    import shutil

    from whale.catalogue.db import Catalogue, acquire_lock

    try:
        fd = acquire_lock(root)  # under the lock: no other command is writing into it now (one waiting finds it gone)
    except DataError:
        return
    try:
        with Catalogue.open(root) as cat:
            if any(cat.counts()[t] for t in ("individuals", "images", "batches", "decisions")):
                return  # another command filled it meanwhile: not this add's to remove
        if before is None:
            shutil.rmtree(root, ignore_errors=True)
            return
        for entry in set(root.iterdir()) - before:
            shutil.rmtree(entry, ignore_errors=True) if entry.is_dir() else entry.unlink(missing_ok=True)
    except DataError:
        pass
    finally:
        os.close(fd)


def _index(args) -> str:
    from whale.catalogue.features import update_index

    with _open(args) as cat:
        run = _run_of(args, cat)
        n = update_index(cat, run)
    return (f"indexed with {run.run_dir} ({run.checkpoint}, fingerprint {run.fingerprint}): {n['scored']} photos "
            f"scored, {n['kept']} kept, {n['dropped']} features of another run dropped")


def _match(args) -> str:
    from whale.catalogue.match import check_batch, match_batch

    log = None if args.quiet else print
    with _open(args) as cat:
        batch = check_batch(cat, args.photos, args.batch, args.rematch)  # before the backend loads (seconds)
        kept = sql.decision_count(cat.conn, batch)
        for flag, given in (("--joint-config", args.joint_config), ("--outline", args.outline)):
            if given is not None and args.method != "joint":
                raise DataError(f"{flag} goes with --method joint")
        if args.method == "keypoints":
            from whale.catalogue.keypoints import match_keypoints
            from whale.keypoints import load_keypoint_config

            if args.run is not None:
                raise DataError("--method keypoints matches without a run: drop --run (or choose another --method)")
            proposals, path = match_keypoints(cat, load_keypoint_config(args.keypoint_config), args.photos, batch,
                                              args.top, args.threshold, args.boxes, args.rematch, not args.quiet,
                                              log=log)
        elif args.method == "joint":
            from whale.catalogue.features import RunFeatures
            from whale.catalogue.joint import joint_config, match_joint

            if args.keypoint_config is not None:
                raise DataError("--keypoint-config goes with --method keypoints; --method joint reads its feature "
                                "kinds from --joint-config")
            cfg = joint_config(args.joint_config)
            run = None if args.run is None else RunFeatures(Path(args.run), args.checkpoint or "best",
                                                            verbose=not args.quiet)
            outline = None
            if args.outline is not None:
                from whale.catalogue.outline import outline_config

                outline = outline_config(None if args.outline is True else args.outline)
            proposals, path = match_joint(cat, cfg, args.photos, batch, args.top, args.threshold, args.boxes,
                                          args.rematch, run, not args.quiet, log=log, outline=outline)
        else:
            proposals, path = match_batch(cat, _run_of(args, cat), args.photos, batch, args.top, args.method,
                                          args.threshold, args.boxes, args.pool, rematch=args.rematch, log=log)
        photos = {p.photo for p in proposals.photos}
        outside = len(sql.decided_photos(cat.conn, batch) - photos)
    n_new = sum(p.possibly_new for p in proposals.photos)
    groups = {p.group for p in proposals.photos if p.group is not None}
    said = (f"; re-matched: its {kept} decisions are kept" + (f" ({outside} of them for photos no longer in "
            "the batch)" if outside else "")) if args.rematch and kept else ""
    below = (f"P(same whale) below {proposals.threshold:.3f}" if proposals.scale == "probability" else
             f"score below {proposals.threshold:.3f}: the catalogue cannot be calibrated")
    return (f"wrote {path}: {len(proposals.photos)} photos, {n_new} possibly new ({below}), {len(groups)} groups "
            f"of photos matching each other{said}")


def _review(args) -> str:
    from whale.catalogue.proposals import read_proposals
    from whale.catalogue.report import write_report

    with _open(args) as cat:
        rel = sql.batch_proposals_file(cat.conn, args.batch)
    if rel is None:
        raise DataError(f"{args.catalogue}: no batch {args.batch!r}; run `whale catalogue match` first")
    path = Path(args.catalogue) / rel
    out = Path(args.out) if args.out else path.parent / "review"
    from whale.catalogue.joint import RUN as JOINT
    from whale.catalogue.keypoints import RUN, batch_config, store_of

    run = read_proposals(path).run
    matches = None
    if args.matches or run in (RUN, JOINT):  # the keypoint matcher's view, as the batch was matched (joint: its
        # first feature kind's settings, kept beside the batch as a keypoint batch's are)
        matches = store_of(args.catalogue, batch_config(args.catalogue, args.batch))
    if args.heatmaps and run in (RUN, JOINT):
        raise DataError(f"batch {args.batch!r} was matched by {run}, not a trained run: its page shows the "
                        "keypoint matches; --heatmaps needs a run's batch")
    if args.serve:
        from whale.catalogue.server import serve

        return serve(args.catalogue, args.batch, out, args.port or 0, by=args.by, matches=matches,
                     verbose=not args.quiet, sighting={c: getattr(args, c) for c in SIGHTING_COLUMNS})
    # The heatmaps are drawn by the run that matched the batch (recorded in its proposals).
    written = write_report(path, out, args.heatmaps, run_dir=run if args.heatmaps else None,
                           verbose=not args.quiet, matches=matches)
    return f"wrote {written}: open it in a browser; fill in the form, export decisions.csv, then `accept`"


def _check_review(parser, args) -> None:
    serving = [f"--{name}" for name in ("port", "by", *SIGHTING_COLUMNS) if getattr(args, name) is not None]
    if serving and not args.serve:
        parser.error(f"{', '.join(serving)}: only with --serve")
    if args.serve and args.heatmaps:
        parser.error("--heatmaps draws them on the static page: review without --serve")


def _accept(args) -> str:
    from whale.catalogue.decisions import accept

    with _open(args) as cat:
        n = accept(cat, args.batch, args.decisions, by=args.by, redecide=args.redecide,
                   sighting={c: getattr(args, c) for c in SIGHTING_COLUMNS}, allow_unlisted=args.allow_unlisted)
    undone = f" ({n['undone']} of them undoing an earlier decision: photo removed)" if n["undone"] else ""
    return (f"recorded batch {args.batch}: {n['matched']} matched, {n['new']} new individuals' photos, "
            f"{n['skipped']} skipped{undone}, {n['unchanged']} already decided so")


def _export(args) -> str:
    from whale.catalogue.export import export

    with _open(args) as cat:
        return "wrote " + ", ".join(str(p) for p in export(cat, args.out))


def _check(args) -> str:
    from whale.catalogue.repair import check

    with _open(args) as cat:
        counts, problems = check(cat)
    checked = ", ".join(f"{v} {k}" for k, v in counts.items())
    if problems:
        for problem in problems:
            print(problem.line())
        raise DataError(f"{args.catalogue}: {len(problems)} problems in {checked} (listed above)")
    return f"checked {checked}: every photo and feature matches its hash"


def _remove(args) -> str:
    from whale.catalogue.repair import remove, removal

    with _open(args) as cat:
        plan = removal(cat, args.what)
        print("\n".join(plan.describe()), flush=True)
        if not args.yes:
            try:
                answer = input("remove these? [y/N] ")
            except EOFError:
                raise DataError(f"{args.catalogue}: remove asks for a confirmation and none could be read; "
                                "add --yes to remove without asking") from None
            if answer.strip().lower() not in ("y", "yes"):
                return "nothing removed"
        remove(cat, plan)
    return f"removed {len(plan.photos)} photos" + (f" and {len(plan.emptied)} individuals" if plan.emptied else "")


def _status(args) -> str:
    with _open(args) as cat:
        counts = cat.counts()
        run = cat.meta("run")
    return " ".join(f"{k}={v}" for k, v in counts.items()) + (f" run={run}" if run else "")


PROG = "python -m whale.catalogue"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The subcommands and flags of ``python -m whale.catalogue`` and ``whale catalogue`` (:mod:`whale.command`)."""
    p.description, p.formatter_class = __doc__, argparse.RawDescriptionHelpFormatter
    sub = p.add_subparsers(dest="command", required=True)

    def subcommand(name, fn, help):
        s = sub.add_parser(name, help=help)
        s.add_argument("catalogue", help="catalogue folder")
        s.add_argument("--quiet", action="store_true", help="no progress bars")
        s.set_defaults(fn=fn)
        return s

    subcommand("init", _init, "create an empty catalogue")
    s = subcommand("add", _add, "add identified photos (creates the catalogue if needed)")
    s.add_argument("--photos", required=True, help="folder of the photos")
    s.add_argument("--labels", required=True, help="CSV image,individual[,date,location,encounter] or Kaggle train.csv")
    s.add_argument("--boxes", help="CSV Image,x0,y0,x1,y1 (default: whole photos)")
    s.add_argument("--by", help="who adds them (default: $USER)")
    for name, fn, help in (("index", _index, "score the catalogue's new photos with a run"),
                           ("match", _match, "propose individuals for a folder of new photos")):
        s = subcommand(name, fn, help)
        s.add_argument("--run", help="trained run folder (default: the run indexed last" +
                       ("; --method joint: none unless given)" if name == "match" else ")"))
        s.add_argument("--checkpoint", help="best, last, snapshot-<size> or a .keras file (default: best)")
    s.add_argument("--photos", required=True, help="folder of new photos")
    s.add_argument("--batch", help="batch name (default: the folder's name)")
    s.add_argument("--top", type=int, default=10, help="individuals proposed per photo")
    s.add_argument("--method", default="auto", choices=("auto", "exact", "prune", "faiss", "keypoints", "joint"),
                   help="how the catalogue is searched (docs/catalogue.md); keypoints: the training-free "
                        "keypoint matcher, no --run; joint: every feature kind of --joint-config verifies one "
                        "shortlist (their votes, and --run's best photos when given: the run only proposes), one "
                        "check fitted on the catalogue's own photos, each left out, gives P(same whale)")
    s.add_argument("--keypoint-config", help="with --method keypoints: its settings (default configs/keypoints.yaml's)")
    s.add_argument("--joint-config",
                   help="with --method joint: the joint identification's settings (default configs/joint.yaml, "
                        "relative to the folder the command runs in)")
    s.add_argument("--outline", nargs="?", const=True, metavar="FILE",
                   help="with --method joint: the trailing edge's learned outline proposes candidates too (its net "
                        "trained on the catalogue, kept until it changes; FILE: its settings, default "
                        "configs/outline.yaml); like --run it only proposes")
    s.add_argument("--pool", type=int, default=300, help="images re-scored per photo by prune/faiss")
    s.add_argument("--threshold", type=probability_arg,
                   help="possibly new when the best candidate's probability of being the same whale is below this "
                        "probability (default 0.5), calibrated on the catalogue's own photos (each matched against "
                        "the others; kept in CAT/calibration/ until the catalogue changes); a number in [0, 1] or "
                        "an ensemble's NAME.threshold.json of calibrated fusion (a score threshold file, a run's "
                        "scores/threshold.json among them, is refused: a score is not a probability)")
    s.add_argument("--boxes", help="CSV Image,x0,y0,x1,y1 of the new photos (default: whole photos)")
    s.add_argument("--rematch", action="store_true",
                   help="replace the proposals of an existing batch (its decisions are kept)")
    s = subcommand("review", _review, "write the batch's HTML review page, or serve it (--serve)")
    s.add_argument("--batch", required=True)
    s.add_argument("--out", help="folder (default: CAT/batches/BATCH/review)")
    s.add_argument("--heatmaps", action="store_true", help="draw the paper's heatmaps beside the photos")
    s.add_argument("--matches", action="store_true",
                   help="draw the keypoint matches of every query and candidate (always for a keypoint batch)")
    s.add_argument("--serve", action="store_true",
                   help="serve the keyboard-driven page on 127.0.0.1 and save each decision to the catalogue at once")
    s.add_argument("--port", type=int, help="with --serve: the port (default: a free one, printed)")
    s.add_argument("--by", help="with --serve: who decides (default: $USER)")
    for column in SIGHTING_COLUMNS:
        s.add_argument(f"--{column}", help=f"with --serve: the sightings' {column}, as accept's --{column}")
    command.check_with(s, _check_review)
    s = subcommand("accept", _accept, "record a reviewer's decisions")
    s.add_argument("--batch", required=True)
    s.add_argument("--decisions", required=True,
                   help="CSV photo,decision,individual[,date,location,encounter] (match / new / skip)")
    for column in SIGHTING_COLUMNS:
        s.add_argument(f"--{column}", help=f"the batch's sighting {column} (a row's own {column} column wins)")
    s.add_argument("--by", help="who decided (default: $USER)")
    s.add_argument("--redecide", action="store_true",
                   help="record a decision that differs from an earlier one (and undo what that one did)")
    s.add_argument("--allow-unlisted", action="store_true",
                   help="let 'match' name an individual that is not among the photo's candidates")
    s = subcommand("export", _export, "write the catalogue as a folder `add` reads back (photos and CSVs)")
    s.add_argument("--out", required=True, help="folder")
    subcommand("check", _check, "verify every stored photo and feature against its hash")
    s = subcommand("remove", _remove, "remove a photo or an individual (asks first)")
    s.add_argument("what", metavar="PHOTO|INDIVIDUAL",
                   help="an individual, or a photo: its hash (or its first 6+ hex digits), file or source path")
    s.add_argument("--yes", action="store_true", help="remove without asking")
    subcommand("status", _status, "rows per table")


def run(args: argparse.Namespace) -> int:
    """Run the subcommand ``args`` name and print its one-line summary."""
    print(args.fn(args))
    return 0


def main(argv=None) -> int:
    """``whale catalogue``; 2 on bad input (:func:`whale.command.main`)."""
    return command.main(PROG, add_arguments, run, argv)


if __name__ == "__main__":
    sys.exit(main())
