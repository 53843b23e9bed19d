"""Kaggle kernels: one script kernel per (config, fold), and the code dataset they import.

A training run of the paper's schedule takes days; a Kaggle GPU session lasts hours. Each
kernel therefore trains until its time budget nears, leaves its run folder (checkpoints, log,
config) in ``/kaggle/working/run`` (kept as the version's output) and is pushed again: it
lists *itself* under ``kernel_sources``, so the next version finds the previous version's
output under ``/kaggle/input/<kernel-slug>/run`` and resumes from it
(:mod:`whale.kaggle.entry`).

Writes, per fold, ``OUT/fold{K}/kernel-metadata.json`` (the Kaggle CLI's push format) and a
short entry script ``OUT/fold{K}/run.py``; and a code dataset folder holding the toolkit as a
pure-Python wheel plus the ``configs/*.yaml`` files (flat, so ``kaggle datasets create`` needs
no ``--dir-mode``)::

    python -m whale.kaggle.kernels make --config configs/densenet121.yaml --folds 0 1 2 3 \\
        --competition humpback-whale-identification --code-dataset USER/whale-code \\
        [--user USER] [--playground-dataset USER/playground | --playground-competition SLUG] \\
        [--boxes-dataset USER/boxes] [--time-budget-hours 8.5] --out kernels/densenet121
    python -m whale.kaggle.kernels code-dataset --id USER/whale-code --out build/whale-code
    python -m whale.kaggle.kernels check kernels/densenet121/fold0 ...

Metadata rules checked by :func:`validate_metadata` (those of ``kaggle kernels push``): ``id``
is ``owner/slug`` (lowercase letters, digits, hyphens; slug 5-50 characters), ``title`` has
5-50 characters and slugifies to the slug, ``code_file`` is set, ``language`` is one of
python/r/rmarkdown, ``kernel_type`` script or notebook, sources are ``owner/slug`` strings.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from pathlib import Path

from whale.errors import ConfigError, run_cli
from whale.files import git_revision

METADATA_FILE = "kernel-metadata.json"
DATASET_METADATA_FILE = "dataset-metadata.json"
ENTRY_FILE = "run.py"
REQUIRED_FIELDS = ("id", "title", "code_file", "language", "kernel_type")
LANGUAGES = ("python", "r", "rmarkdown")
KERNEL_TYPES = ("script", "notebook")
BOOL_FIELDS = ("is_private", "enable_gpu", "enable_tpu", "enable_internet")
LIST_FIELDS = ("dataset_sources", "competition_sources", "kernel_sources", "model_sources")
DEFAULT_BUDGET_HOURS = 8.5
DEFAULT_SCORE_MARGIN_MINUTES = 45.0

_SLUG = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
_OWNER = re.compile(r"^[a-z0-9]+(?:[-_][a-z0-9]+)*$")
_MIN_LEN, _MAX_LEN = 5, 50


def slugify(text: str) -> str:
    """Kaggle's URL slug of a title: lowercase, every run of other characters -> one hyphen."""
    return re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-")


def kernel_slug(config_name: str, fold: int) -> str:
    """``whale-<config>-fold-<K>`` (``-full`` for fold -1, trained on everything)."""
    part = "full" if int(fold) == -1 else f"fold-{int(fold)}"
    return f"whale-{slugify(config_name)}-{part}"


def kernel_title(config_name: str, fold: int) -> str:
    """A title that slugifies to :func:`kernel_slug` (Kaggle links titles and slugs)."""
    part = "full" if int(fold) == -1 else f"fold {int(fold)}"
    return f"whale {slugify(config_name)} {part}"


def kernel_folder(fold: int) -> str:
    """``fold{K}``, or ``full`` for fold -1."""
    return f"fold{int(fold)}" if int(fold) >= 0 else "full"


def _split_ref(ref: str) -> tuple[str, str]:
    owner, _, slug = str(ref).partition("/")
    return owner, slug


def _check_ref(ref, field: str, owner_required: bool = True) -> list[str]:
    """Problems of one ``owner/slug`` reference (datasets, kernels)."""
    if not isinstance(ref, str) or (owner_required and ref.count("/") != 1):
        return [f"{field}: expected 'owner/slug', received {ref!r}"]
    owner, slug = _split_ref(ref)
    problems = []
    if not _OWNER.match(owner):
        problems.append(f"{field}: owner {owner!r} of {ref!r} must be lowercase letters, digits, hyphens")
    if not _SLUG.match(slug):
        problems.append(f"{field}: slug {slug!r} of {ref!r} must be lowercase letters, digits and "
                        "single hyphens")
    return problems


def validate_metadata(meta: dict, folder: str | Path | None = None) -> list[str]:
    """Problems of a ``kernel-metadata.json`` dict (empty list = valid for ``kaggle kernels push``).

    With ``folder`` given, the ``code_file`` must also exist inside it.
    """
    if not isinstance(meta, dict):
        return [f"expected a JSON object, received {type(meta).__name__}"]
    problems = [f"missing required field {f!r}" for f in REQUIRED_FIELDS if not meta.get(f)]
    kid, title = meta.get("id"), meta.get("title")
    if kid:
        problems += _check_ref(kid, "id")
        slug = _split_ref(kid)[1] if isinstance(kid, str) else ""
        if not _MIN_LEN <= len(slug) <= _MAX_LEN:
            problems.append(f"id: slug {slug!r} must have {_MIN_LEN}-{_MAX_LEN} characters, has {len(slug)}")
        if title and slugify(title) != slug:
            problems.append(f"title {title!r} resolves to slug {slugify(title)!r}, not to the id's {slug!r}")
    if title is not None and (not isinstance(title, str) or not _MIN_LEN <= len(title.strip()) <= _MAX_LEN):
        problems.append(f"title: expected {_MIN_LEN}-{_MAX_LEN} characters, received {title!r}")
    if meta.get("language") and meta["language"] not in LANGUAGES:
        problems.append(f"language: expected one of {', '.join(LANGUAGES)}, received {meta['language']!r}")
    if meta.get("kernel_type") and meta["kernel_type"] not in KERNEL_TYPES:
        problems.append(f"kernel_type: expected one of {', '.join(KERNEL_TYPES)}, "
                        f"received {meta['kernel_type']!r}")
    code = meta.get("code_file")
    if code and meta.get("kernel_type") == "script" and meta.get("language") == "python" \
            and not str(code).endswith(".py"):
        problems.append(f"code_file: a python script kernel needs a .py file, received {code!r}")
    if code and folder is not None and not (Path(folder) / code).is_file():
        problems.append(f"code_file: {Path(folder) / code} does not exist")
    for f in BOOL_FIELDS:
        if f in meta and not isinstance(meta[f], bool) and meta[f] not in ("true", "false"):
            problems.append(f"{f}: expected true or false, received {meta[f]!r}")
    for f in LIST_FIELDS:
        if f not in meta:
            continue
        if not isinstance(meta[f], list):
            problems.append(f"{f}: expected a list, received {meta[f]!r}")
            continue
        for i, ref in enumerate(meta[f]):
            if f == "competition_sources":
                if not isinstance(ref, str) or not _SLUG.match(ref):
                    problems.append(f"{f}[{i}]: expected a competition slug, received {ref!r}")
            elif f != "model_sources":
                problems += _check_ref(ref, f"{f}[{i}]")
    if meta.get("enable_gpu") in (True, "true") and meta.get("enable_tpu") in (True, "true"):
        problems.append("enable_gpu and enable_tpu: a kernel gets one accelerator, both are true")
    return problems


def build_metadata(config_name: str, fold: int, user: str, code_dataset: str, competition: str,
                   playground_dataset: str | None = None, playground_competition: str | None = None,
                   extra_datasets: tuple[str, ...] = ()) -> dict:
    """The ``kernel-metadata.json`` dict of one fold's kernel (private, GPU, no internet)."""
    kid = f"{user}/{kernel_slug(config_name, fold)}"
    datasets = [code_dataset] + [d for d in (playground_dataset, *extra_datasets) if d]
    competitions = [competition] + ([playground_competition] if playground_competition else [])
    return {
        "id": kid,
        "title": kernel_title(config_name, fold),
        "code_file": ENTRY_FILE,
        "language": "python",
        "kernel_type": "script",
        "is_private": True,
        "enable_gpu": True,
        "enable_tpu": False,
        "enable_internet": False,
        "dataset_sources": list(dict.fromkeys(datasets)),
        "competition_sources": list(dict.fromkeys(competitions)),
        # Itself: the next version reads this version's output and resumes from it.
        "kernel_sources": [kid],
        "model_sources": [],
    }


_ENTRY_TEMPLATE = '''\
"""Kaggle kernel {kid}: config {config!r}, fold {fold}.

Generated by `python -m whale.kaggle.kernels make`; regenerate rather than edit. Trains until the time
budget nears, keeps /kaggle/working/run as this version's output, and resumes from the previous
version's output (this kernel is its own kernel source). Push new versions until
/kaggle/working/run/STATUS says finished.
"""
import glob
import os
import subprocess
import sys
import tempfile
import time

STARTED = time.time()
ROOT = os.environ.get("WHALE_KAGGLE_ROOT", "/kaggle")
CODE_DATASET = {code_slug}
ARGS = [
{args}
]


def code_path(root=ROOT, slug=CODE_DATASET):
    """A folder to put on sys.path so that `import whale` finds the attached code dataset."""
    inp = os.path.join(root, "input")
    bases = [os.path.join(inp, slug)] + sorted(glob.glob(os.path.join(inp, "*", "*", slug)))
    for base in filter(os.path.isdir, bases):
        packages = sorted(glob.glob(os.path.join(base, "*.whl")) + glob.glob(os.path.join(base, "*.tar.gz")))
        if packages:  # offline install into a scratch folder (nothing to download, nothing in working/)
            target = tempfile.mkdtemp(prefix="whale-code-")
            subprocess.check_call([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                                   "--no-index", "--no-build-isolation", "--target", target, packages[-1]])
            return target
        if os.path.isfile(os.path.join(base, "whale", "__init__.py")):  # the source tree
            return base
        if os.path.isfile(os.path.join(base, "__init__.py")):  # the package folder itself
            parent = tempfile.mkdtemp(prefix="whale-code-")
            os.symlink(base, os.path.join(parent, "whale"))
            return parent
    raise SystemExit(f"whale code not found in {{bases[0]}}: attach the code dataset {{slug!r}}")


if __name__ == "__main__":
    sys.path.insert(0, code_path())
    from whale.kaggle.entry import main

    status = main(ARGS + ["--started", repr(STARTED)] + sys.argv[1:])
    sys.exit(0 if status in (0, 3) else status)  # 3 = paused: a normal end, the output is kept
'''


def entry_script(kid: str, config_name: str, fold: int, code_dataset: str, args: list[str]) -> str:
    """Text of the kernel's ``run.py``: find the code, then ``whale.kaggle.entry.main(args)``."""
    lines, i = [], 0
    while i < len(args):  # one "--flag", "value" pair per line
        pair = [args[i]] + ([args[i + 1]] if i + 1 < len(args) and not args[i + 1].startswith("--") else [])
        lines.append("    " + ", ".join(json.dumps(str(a)) for a in pair) + ",")
        i += len(pair)
    return _ENTRY_TEMPLATE.format(kid=kid, config=config_name, fold=fold,
                                  code_slug=json.dumps(_split_ref(code_dataset)[1]), args="\n".join(lines))


def _ref_slug(ref: str | None) -> str | None:
    return None if ref is None else (_split_ref(ref)[1] if "/" in ref else ref)


def make_kernels(config: str | Path, folds, competition: str, code_dataset: str, out: str | Path,
                 user: str | None = None, playground_dataset: str | None = None,
                 playground_competition: str | None = None, boxes_dataset: str | None = None,
                 extra_datasets: tuple[str, ...] = (), time_budget_hours: float = DEFAULT_BUDGET_HOURS,
                 score_margin_minutes: float = DEFAULT_SCORE_MARGIN_MINUTES) -> list[Path]:
    """Write ``out/fold{K}/{kernel-metadata.json, run.py}`` for every fold; returns the folders.

    ``config`` is a YAML file (validated here; the kernel loads the file of the same name from
    the code dataset). ``user`` defaults to the owner of ``code_dataset``.

    Raises:
        ValueError: bad references or a metadata problem (message lists them all).
    """
    from whale.config import load_config

    config = Path(config)
    cfg = load_config(config)
    name = config.stem
    user = user or _split_ref(code_dataset)[0]
    if playground_dataset and playground_competition:
        raise ConfigError("give --playground-dataset or --playground-competition, not both")
    has_playground = playground_dataset or playground_competition
    if any(s.dataset == "playground" for s in cfg.stages) and not has_playground:
        raise ConfigError(f"{config}: the schedule has 'dataset: playground' stages; give "
                         "--playground-dataset OWNER/SLUG or --playground-competition SLUG")
    refs = [("--code-dataset", code_dataset)] + [(f, r) for f, r in (
        ("--playground-dataset", playground_dataset), ("--boxes-dataset", boxes_dataset)) if r]
    refs += [("--extra-dataset", r) for r in extra_datasets]
    problems = [p for flag, r in refs for p in _check_ref(r, flag)]
    problems += _check_ref(f"{user}/whale", "--user")
    if problems:
        raise ConfigError("; ".join(problems))
    extra = tuple(r for r in (boxes_dataset, *extra_datasets) if r)
    folders = []
    for fold in folds:
        meta = build_metadata(name, fold, user, code_dataset, competition, playground_dataset,
                              playground_competition, extra)
        args = ["--config", name, "--fold", str(int(fold)), "--competition", competition,
                "--kernel", meta["id"], "--code-dataset", _ref_slug(code_dataset),
                "--time-budget-hours", f"{time_budget_hours:g}",
                "--score-margin-minutes", f"{score_margin_minutes:g}"]
        playground = _ref_slug(playground_dataset) or playground_competition
        if playground:
            args += ["--playground", playground]
        if boxes_dataset:
            args += ["--boxes", _ref_slug(boxes_dataset)]
        folder = Path(out) / kernel_folder(fold)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / ENTRY_FILE).write_text(entry_script(meta["id"], name, int(fold), code_dataset, args))
        (folder / METADATA_FILE).write_text(json.dumps(meta, indent=2) + "\n")
        problems = validate_metadata(meta, folder)
        if problems:
            raise ConfigError(f"{folder / METADATA_FILE}: " + "; ".join(problems))
        folders.append(folder)
    return folders


# ------------------------------------------------------------------------------ code dataset


def build_wheel(repo_root: str | Path, out_dir: str | Path) -> Path:
    """The toolkit's wheel ``whale-<version>-py3-none-any.whl``, built by the standard backend.

    ``pip wheel`` runs setuptools on ``pyproject.toml`` (dependencies declared there are not
    installed: the kernel installs with ``--no-deps --no-index`` and ships what Kaggle lacks).
    The build happens on a copy of ``pyproject.toml``, ``README.md`` and ``whale/``, so the
    checkout gets no ``build/`` or ``*.egg-info`` folders.
    """
    import subprocess
    import tempfile

    repo_root, out_dir = Path(repo_root), Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="whale-build-") as tmp:
        stage = Path(tmp) / "src"
        stage.mkdir()
        for name in ("pyproject.toml", "README.md"):
            shutil.copyfile(repo_root / name, stage / name)
        shutil.copytree(repo_root / "whale", stage / "whale",
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyo"))
        built = Path(tmp) / "dist"
        res = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-index",
                              "--no-build-isolation", "--wheel-dir", str(built), str(stage)],
                             capture_output=True, text=True)
        wheels = sorted(built.glob("whale-*.whl"))
        if res.returncode != 0 or len(wheels) != 1:
            raise RuntimeError(f"building the whale wheel from {repo_root / 'pyproject.toml'} failed "
                               f"(pip wheel exit {res.returncode}): {(res.stderr or res.stdout)[-2000:]}")
        return Path(shutil.copy2(wheels[0], out_dir / wheels[0].name))


def build_code_dataset(out: str | Path, dataset_id: str, repo_root: str | Path | None = None,
                       extra_files: tuple[str | Path, ...] = ()) -> Path:
    """Folder to upload as the kernels' code dataset: the wheel, ``*.yaml`` configs, metadata.

    Flat on purpose: ``kaggle datasets create/version -p OUT`` uploads it without ``--dir-mode``.
    ``extra_files`` are copied in too (e.g. keras.applications ``*_notop.h5`` weight files,
    which :mod:`whale.kaggle.entry` puts into the Keras cache so ``weights: imagenet`` works
    offline). Old wheels in ``out`` are removed.
    """
    problems = _check_ref(dataset_id, "dataset id")
    if problems:
        raise ConfigError("; ".join(problems))
    repo_root = Path(repo_root) if repo_root else Path(__file__).resolve().parents[2]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.whl"):
        old.unlink()
    build_wheel(repo_root, out)
    for cfg in sorted((repo_root / "configs").glob("*.yaml")):
        shutil.copyfile(cfg, out / cfg.name)
    for f in extra_files:
        shutil.copyfile(f, out / Path(f).name)
    meta = {"title": _split_ref(dataset_id)[1], "id": dataset_id, "licenses": [{"name": "CC0-1.0"}],
            "description": f"whale toolkit code and configs, git revision {git_revision(repo_root)}"}
    (out / DATASET_METADATA_FILE).write_text(json.dumps(meta, indent=2) + "\n")
    return out


# ----------------------------------------------------------------------------------- CLI


def _parse(argv):
    p = argparse.ArgumentParser(prog="python -m whale.kaggle.kernels", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    m = sub.add_parser("make", help="write kernel folders (kernel-metadata.json + run.py) per fold")
    m.add_argument("--config", required=True, help="configs/NAME.yaml (the kernel loads NAME.yaml "
                   "from the code dataset)")
    m.add_argument("--folds", type=int, nargs="+", required=True, help="folds 0..3, -1 = all data")
    m.add_argument("--competition", default="humpback-whale-identification")
    m.add_argument("--code-dataset", required=True, help="OWNER/SLUG of the code dataset")
    m.add_argument("--user", help="Kaggle user owning the kernels (default: the code dataset's owner)")
    m.add_argument("--playground-dataset", help="OWNER/SLUG of a Kaggle-format PlayGround dataset")
    m.add_argument("--playground-competition",
                   help="or the PlayGround as a competition, e.g. whale-categorization-playground")
    m.add_argument("--boxes-dataset", help="OWNER/SLUG of a dataset holding bounding_boxes.csv")
    m.add_argument("--extra-dataset", action="append", default=[],
                   help="another dataset to attach (e.g. Keras weight files); repeatable")
    m.add_argument("--time-budget-hours", type=float, default=DEFAULT_BUDGET_HOURS)
    m.add_argument("--score-margin-minutes", type=float, default=DEFAULT_SCORE_MARGIN_MINUTES,
                   help="stop training this long before the budget ends (time to write scores)")
    m.add_argument("--out", required=True, help="kernels/NAME")
    c = sub.add_parser("code-dataset", help="build the code dataset folder (wheel + configs)")
    c.add_argument("--id", required=True, help="OWNER/SLUG of the code dataset")
    c.add_argument("--out", required=True, help="folder to upload with kaggle datasets create/version")
    c.add_argument("--extra-file", action="append", default=[], help="also copy this file in")
    k = sub.add_parser("check", help="validate kernel folders")
    k.add_argument("folders", nargs="+")
    return p.parse_args(argv)


def main(argv=None) -> int:
    """``python -m whale.kaggle.kernels``; 2 on bad input (:func:`whale.errors.run_cli`)."""
    return run_cli(run, argv, "python -m whale.kaggle.kernels")


def run(argv=None) -> int:
    """What :func:`main` runs; raises :class:`whale.errors.WhaleError` on bad input."""
    args = _parse(argv)
    if args.command == "make":
        folders = make_kernels(args.config, args.folds, args.competition, args.code_dataset, args.out,
                               user=args.user, playground_dataset=args.playground_dataset,
                               playground_competition=args.playground_competition,
                               boxes_dataset=args.boxes_dataset, extra_datasets=tuple(args.extra_dataset),
                               time_budget_hours=args.time_budget_hours,
                               score_margin_minutes=args.score_margin_minutes)
        for f in folders:
            print(f"wrote {f / METADATA_FILE} and {f / ENTRY_FILE}; push with: kaggle kernels push -p {f}")
        return 0
    if args.command == "code-dataset":
        out = build_code_dataset(args.out, args.id, extra_files=tuple(args.extra_file))
        print(f"wrote {out}: upload with `kaggle datasets create -p {out}` (first time) or "
              f"`kaggle datasets version -p {out} -m MESSAGE`")
        return 0
    bad = 0
    for folder in map(Path, args.folders):
        try:
            meta = json.loads((folder / METADATA_FILE).read_text())
            problems = validate_metadata(meta, folder)
        except (OSError, json.JSONDecodeError) as e:
            problems = [str(e)]
        bad += bool(problems)
        print(f"{folder}: " + ("ok" if not problems else "; ".join(problems)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
