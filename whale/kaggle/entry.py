"""What a Kaggle kernel runs: train one fold in time-boxed sessions that resume each other.

Called by the kernel's ``run.py`` (written by :mod:`whale.kaggle.kernels`) with the config name, fold
and budget baked in. Layout it expects (``KAGGLE_ROOT`` is ``/kaggle``, or the environment
variable ``WHALE_KAGGLE_ROOT`` for local runs)::

    KAGGLE_ROOT/input/<competition>/             train.csv, train/, test/, sample_submission.csv
    KAGGLE_ROOT/input/<code-dataset>/            whale wheel (or source) + <config>.yaml
    KAGGLE_ROOT/input/<kernel-slug>/run/         the previous version's output (kernel source)
    KAGGLE_ROOT/working/run/                     this version's run folder = its output

Newer Kaggle images may mount sources one level deeper (``input/datasets/<owner>/<slug>``,
``input/competitions/<slug>``, ``input/notebooks/<owner>/<slug>``); those places are searched too.

One session: copy the previous version's run folder into ``working/run`` (checkpoints, log,
config, mined negatives), train with :func:`whale.training.trainer.train_fold` (``resume=True``) until
``started + budget - score margin``, and write ``working/run/STATUS``: ``running`` while it
trains, then ``paused`` (push a new version to go on), ``finished`` (``scores/val.npz`` and
``scores/test.npz`` written) or ``failed``. ``working/run/kaggle_run.json`` records the kernel
and one entry per session.

PlayGround once (``make --pretrain``): the pre-training kernel runs with ``--pretrain`` (the config's
leading PlayGround stages, no main data; ``finished`` when ``done.json`` is written); each fold
kernel runs with ``--init-from-kernel SLUG`` and starts from that kernel's finished output
``KAGGLE_ROOT/input/<slug>/run`` (attached as a kernel source) after those stages.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from whale import command
from whale.core.errors import DataError, WhaleError
from whale.core.files import write_json_atomic, write_text_atomic

RUN_DIR = "run"
STATUS_FILE = "STATUS"
RECORD_FILE = "kaggle_run.json"
PAUSED, FINISHED, RUNNING, FAILED = "paused", "finished", "running", "failed"


def kaggle_root() -> Path:
    """``/kaggle``, or ``$WHALE_KAGGLE_ROOT`` (a fake Kaggle root for local tests)."""
    return Path(os.environ.get("WHALE_KAGGLE_ROOT", "/kaggle"))


def _slug(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


def source_candidates(input_dir: Path, ref: str) -> list[Path]:
    """Where an attached source ``ref`` (``slug`` or ``owner/slug``) may be mounted."""
    input_dir, slug = Path(input_dir), _slug(ref)
    found = [input_dir / slug, input_dir / "competitions" / slug]
    found += sorted(input_dir.glob(f"*/*/{slug}"))  # datasets/<owner>/<slug>, notebooks/<owner>/<slug>
    return list(dict.fromkeys(p for p in found if p.is_dir()))


def find_source(input_dir: Path, ref: str, marker: str | None = None, what: str = "source") -> Path:
    """The mounted folder of ``ref`` (holding ``marker`` when given).

    Raises:
        DataError: not attached; the message lists what ``input_dir`` holds.
    """
    for path in source_candidates(input_dir, ref):
        if marker is None or (path / marker).exists():
            return path
    held = sorted(p.name for p in Path(input_dir).iterdir()) if Path(input_dir).is_dir() else []
    raise DataError(f"{input_dir}: expected the {what} {ref!r} mounted as {_slug(ref)}/"
                    f"{'' if marker is None else ' with ' + marker}; received {held or 'nothing'} "
                    "(attach it to the kernel: kernel-metadata.json sources)")


def find_previous_run(input_dir: Path, kernel: str) -> Path | None:
    """The previous version's ``run/`` folder (this kernel attached as its own source), or None.

    A folder whose ``kaggle_run.json`` names another kernel is skipped.
    """
    for base in source_candidates(input_dir, kernel):
        run = base / RUN_DIR
        record = _read_json(run / RECORD_FILE)
        if run.is_dir() and (record is None or record.get("kernel") in (None, kernel)):
            return run
    return None


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError):
        return None


def epochs_done(run_dir: Path) -> int:
    """Epochs recorded by the run folder's last checkpoint (0 if none)."""
    state = _read_json(Path(run_dir) / "checkpoints" / "last.json")
    return int(state.get("epochs_done", 0)) if state else 0


def restore_previous(previous: Path | None, run_dir: Path, log=print) -> bool:
    """Copy ``previous`` into ``run_dir`` unless ``run_dir`` is already as far; True if copied.

    Copies file contents only (the input mount is read-only; the copies must be writable).
    """
    if previous is None:
        return False
    if run_dir.exists() and epochs_done(run_dir) >= epochs_done(previous):
        log(f"{run_dir} already holds epoch {epochs_done(run_dir)}; not copying {previous}")
        return False
    if run_dir.exists():
        shutil.rmtree(run_dir)
    shutil.copytree(previous, run_dir, copy_function=shutil.copyfile)
    log(f"resuming from the previous version's output {previous} (epoch {epochs_done(run_dir)})")
    return True


def resolve_config(name: str, search: list[Path], run_dir: Path, log=print) -> Path:
    """The YAML for ``name``: a path, ``NAME.yaml`` in a searched folder, or the run's own copy.

    Raises:
        WhaleError: nothing found (the message lists the places searched).
    """
    if Path(name).suffix in (".yaml", ".yml") and Path(name).is_file():
        return Path(name)
    stem = Path(name).stem
    places = [d / f"{stem}.yaml" for d in search] + [d / "configs" / f"{stem}.yaml" for d in search]
    for path in places:
        if path.is_file():
            return path
    if (run_dir / "config.yaml").is_file():
        log(f"config {stem}.yaml not found in the code dataset; using the resumed run's config.yaml")
        return run_dir / "config.yaml"
    raise WhaleError(f"config {name!r}: expected one of {', '.join(map(str, places))}; none exists")


def with_boxes(data_dir: Path, boxes_dir: Path, scratch: Path) -> Path:
    """A view of ``data_dir`` (symlinks) plus ``bounding_boxes.csv`` taken from ``boxes_dir``."""
    from whale.data import BOXES_CSV

    csvs = [boxes_dir / BOXES_CSV] if (boxes_dir / BOXES_CSV).is_file() else sorted(boxes_dir.glob("*.csv"))
    if len(csvs) != 1:
        raise DataError(f"{boxes_dir}: expected {BOXES_CSV} (or a single .csv), received "
                        f"{[p.name for p in csvs] or 'no csv'}")
    view = Path(scratch) / "competition"
    view.mkdir(parents=True, exist_ok=True)
    for entry in data_dir.iterdir():
        if entry.name != BOXES_CSV and not (view / entry.name).exists():
            (view / entry.name).symlink_to(entry.resolve())
    shutil.copyfile(csvs[0], view / BOXES_CSV)
    return view


def install_keras_weights(input_dir: Path, log=print) -> list[Path]:
    """Copy attached keras.applications ``*_notop.h5`` files into the Keras cache.

    ``keras.applications.*(weights="imagenet")`` then finds them there instead of downloading
    (kernels run without internet). Looks two and four levels under ``input_dir``.
    """
    home = Path(os.environ.get("KERAS_HOME", Path.home() / ".keras")) / "models"
    copied = []
    for f in sorted(set(input_dir.glob("*/*_notop.h5")) | set(input_dir.glob("*/*/*/*_notop.h5"))):
        target = home / f.name
        if not target.exists():
            home.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, target)
            copied.append(target)
            log(f"keras weights: {f} -> {target}")
    return copied


def with_attached_weights(cfg, input_dir: Path, log=print):
    """``cfg`` with ``model.weights`` pointed at the attached file of that name, when the path
    it gives does not exist (a converted ``*.weights.h5`` shipped as a dataset); unchanged
    otherwise. Looks two and four levels under ``input_dir``, like :func:`install_keras_weights`."""
    import dataclasses

    weights = cfg.model.weights
    if weights in (None, "imagenet") or Path(weights).is_file():
        return cfg
    name = Path(weights).name
    found = sorted(set(input_dir.glob(f"*/{name}")) | set(input_dir.glob(f"*/*/*/{name}")))
    if not found:
        log(f"model.weights {weights}: no file {name} in the datasets under {input_dir}; attach the "
            "converted weights as a dataset (kernels make --extra-dataset OWNER/SLUG)")
        return cfg
    log(f"model.weights: {weights} -> {found[0]}")
    return dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, weights=str(found[0])))


def write_status(run_dir: Path, status: str, detail: str = "") -> None:
    """``run_dir/STATUS``: the status word on the first line, ``detail`` after it."""
    write_text_atomic(run_dir / STATUS_FILE, status + "\n" + (detail + "\n" if detail else ""))


def read_status(run_dir: Path) -> str | None:
    """The status word of ``run_dir/STATUS``, or None."""
    try:
        return (Path(run_dir) / STATUS_FILE).read_text().split("\n", 1)[0].strip()
    except OSError:
        return None


def _record(run_dir: Path, args, session: dict) -> None:
    old = _read_json(run_dir / RECORD_FILE) or {}
    sessions = [s for s in old.get("sessions", []) if s.get("started") != session["started"]]
    write_json_atomic(run_dir / RECORD_FILE, {
        "kernel": args.kernel, "config": args.config, "fold": args.fold,
        "competition": args.competition, "sessions": sessions + [session]})


PROG = "python -m whale.kaggle.entry"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``python -m whale.kaggle.entry``, which a kernel's ``run.py`` bakes in (:mod:`whale.command`)."""
    p = parser
    p.description, p.formatter_class = __doc__, argparse.RawDescriptionHelpFormatter
    p.add_argument("--config", required=True, help="config name (NAME.yaml in the code dataset) or path")
    p.add_argument("--fold", type=int, help="the fold (required unless --pretrain)")
    p.add_argument("--pretrain", action="store_true",
                   help="train the config's leading PlayGround stages only (run_fold.py --pretrain)")
    p.add_argument("--init-from-kernel", help="slug of the finished pre-training kernel to start from (its output "
                                              "attached as a kernel source)")
    p.add_argument("--competition", default="humpback-whale-identification")
    p.add_argument("--kernel", required=True, help="this kernel's id OWNER/SLUG (its own source)")
    p.add_argument("--code-dataset", help="slug of the code dataset (searched for the config)")
    p.add_argument("--playground", help="slug of the PlayGround dataset or competition")
    p.add_argument("--boxes", help="slug of a dataset holding bounding_boxes.csv")
    p.add_argument("--time-budget-hours", type=float, default=8.5,
                   help="wall-clock hours this session may use, counted from --started")
    p.add_argument("--score-margin-minutes", type=float, default=45.0,
                   help="training stops this long before the budget ends, to leave time for scoring")
    p.add_argument("--verbose", type=int, default=2, help="Keras verbosity (2: one line per epoch)")
    p.add_argument("--started", type=float, help=argparse.SUPPRESS)  # time.time() at run.py's start
    p.add_argument("--max-epochs", type=int, help=argparse.SUPPRESS)  # tests: stop after N epochs
    command.check_with(p, _check_fold_or_pretrain)


def _check_fold_or_pretrain(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if (args.fold is None) != args.pretrain or (args.pretrain and not args.playground):
        parser.error("give --fold K or --pretrain --playground SLUG")


def _parse(argv) -> argparse.Namespace:
    """``argv`` parsed by :func:`add_arguments`'s flags; arguments it does not know are noted on stderr and
    ignored (the kernel's ``run.py`` passes its own command line on), not refused as by the other commands."""
    parser = command.Parser(prog=PROG)
    add_arguments(parser)
    args, unknown = parser.parse_checked_known_args(argv)
    if unknown:
        print(f"whale.kaggle.entry: ignoring arguments {unknown}", file=sys.stderr)
    return args


def find_pretrained(input_dir: Path, slug: str) -> Path:
    """The finished output ``run/`` of the pre-training kernel ``slug`` (attached as a kernel source).

    Raises:
        DataError: not attached, or its STATUS is not ``finished`` (push it until it is).
    """
    run = find_source(input_dir, slug, RUN_DIR, "pre-training kernel output") / RUN_DIR
    status = read_status(run)
    if status != FINISHED:
        raise DataError(f"{run / STATUS_FILE}: the pre-training kernel {slug!r} is {status or 'not started'}, "
                        "not finished: push new versions of it until its STATUS says finished, then this fold")
    return run


def main(argv=None) -> int:
    """The kernel's ``run.py`` calls this: parse ``argv`` (default ``sys.argv[1:]``) and :func:`run` the session.

    Errors keep their traceback, for the kernel's log (the other commands' :func:`whale.command.main` makes
    bad input one line).
    """
    return run(_parse(argv))


def run(args: argparse.Namespace) -> int:
    """Run one session; returns 0 when the schedule is finished, 3 when paused (as run_fold.py)."""
    started = args.started or time.time()
    root = kaggle_root()
    input_dir, run_dir = root / "input", root / "working" / RUN_DIR
    say = lambda msg: print(f"[whale {time.strftime('%H:%M:%S')}] {msg}", flush=True)  # noqa: E731

    data_dir = None if args.pretrain else find_source(input_dir, args.competition, "train.csv", "competition")
    code_dirs = source_candidates(input_dir, args.code_dataset) if args.code_dataset else []
    previous = find_previous_run(input_dir, args.kernel)
    if previous is None:
        say(f"no previous output of {args.kernel} under {input_dir}: starting a new run")
    restore_previous(previous, run_dir, log=say)

    from whale.config import load_config
    from whale.training.schedule import schedule_epochs

    from whale.training.pretrain import pretrain_config

    cfg_path = resolve_config(args.config, code_dirs, run_dir, log=say)
    cfg = with_attached_weights(load_config(cfg_path), input_dir, log=say)
    if args.pretrain:
        cfg = pretrain_config(cfg, str(cfg_path))
    if args.init_from_kernel:
        cfg = dataclasses.replace(cfg, init_from=str(find_pretrained(input_dir, args.init_from_kernel)))
    total = len(schedule_epochs(cfg))
    before = epochs_done(run_dir)
    old_cfg = run_dir / "config.yaml"
    same_cfg = old_cfg.is_file() and old_cfg.read_text() == cfg.to_yaml()
    if old_cfg.is_file() and not same_cfg:
        say(f"note: {cfg_path} differs from the resumed run's config.yaml; training goes on with {cfg_path}")
    session = {"started": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(started)),
               "epochs_before": before, "resumed_from": str(previous) if previous else None}

    outputs = run_dir / ("done.json" if args.pretrain else "scores/test.npz")
    if read_status(run_dir) == FINISHED and same_cfg and outputs.is_file():
        say(f"{args.kernel} already finished ({before} of {total} epochs); nothing to do")
        _finish_message(args, run_dir, before, total, finished=True, say=say)
        return 0

    install_keras_weights(input_dir, log=say)
    if args.boxes and data_dir is not None:
        data_dir = with_boxes(data_dir, find_source(input_dir, args.boxes, what="boxes dataset"),
                              Path(tempfile.mkdtemp(prefix="whale-data-")))
    playground = (find_source(input_dir, args.playground, "train.csv", "PlayGround dataset")
                  if args.playground else None)
    deadline = started + 3600.0 * args.time_budget_hours - 60.0 * args.score_margin_minutes
    say(f"{args.kernel}: config {cfg_path}, {'PlayGround pre-training' if args.pretrain else f'fold {args.fold}'}, "
        f"data {playground if args.pretrain else data_dir}; epoch {before} of "
        f"{total} done; training until {time.strftime('%H:%M:%S', time.localtime(deadline))} "
        f"({(deadline - time.time()) / 3600:.2f} h left)")
    write_status(run_dir, RUNNING)
    _record(run_dir, args, {**session, "status": RUNNING})

    from whale.training.trainer import train_fold, train_pretrain

    common = dict(resume=True, deadline=deadline, max_epochs=args.max_epochs, verbose=args.verbose, log=say)
    try:
        if args.pretrain:
            result = train_pretrain(cfg, playground, run_dir, source=str(cfg_path), **common)
        else:
            result = train_fold(cfg, data_dir, args.fold, run_dir, playground=playground, **common)
    except BaseException as e:
        write_status(run_dir, FAILED, f"{type(e).__name__}: {e}")
        _record(run_dir, args, {**session, "status": FAILED, "error": f"{type(e).__name__}: {e}",
                                "epochs_after": epochs_done(run_dir)})
        raise
    status = FINISHED if result.finished else PAUSED
    write_status(run_dir, status, f"epoch {result.epochs_done} of {total}")
    _record(run_dir, args, {**session, "status": status, "epochs_after": result.epochs_done,
                            "ended": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
                            "best_val_map5": result.best_val_map5})
    _finish_message(args, run_dir, result.epochs_done, total, result.finished, say,
                    trained=result.epochs_done - before)
    return 0 if result.finished else 3


def _finish_message(args, run_dir: Path, done: int, total: int, finished: bool, say,
                    trained: int | None = None) -> None:
    folder = "pretrain" if args.pretrain else f"fold{args.fold}" if args.fold >= 0 else "full"
    this = "" if trained is None else f" (this version trained {trained})"
    if finished and args.pretrain:
        say(f"FINISHED: {args.kernel} ran all {total} PlayGround epochs{this}. STATUS = finished.\n  Next: push "
            f"the fold kernels (kaggle kernels push -p kernels/{args.config}/foldK); each starts from this output.")
    elif finished:
        say(f"FINISHED: {args.kernel} ran all {total} epochs{this}. STATUS = finished; scores in "
            f"{run_dir / 'scores'} (val.npz, test.npz).\n  Next: kaggle kernels output {args.kernel} "
            f"-p runs/{args.config}/{folder}  and run ensemble.py on the score files.")
    else:
        say(f"PAUSED: {args.kernel} at epoch {done} of {total}{this}. STATUS = paused; checkpoint in "
            f"{run_dir / 'checkpoints'}.\n  Next: when this version has completed, push a new version "
            f"(kaggle kernels push -p kernels/{args.config}/{folder}); it resumes from this output.")


if __name__ == "__main__":
    sys.exit(main())
