"""kernel-metadata.json: the fields of one fold's kernel and the rules of ``kaggle kernels push``.

Checked by :func:`validate_metadata`: ``id`` is ``owner/slug`` (lowercase letters, digits,
hyphens; slug 5-50 characters), ``title`` has 5-50 characters and slugifies to the slug,
``code_file`` is set, ``language`` is one of python/r/rmarkdown, ``kernel_type`` script or
notebook, sources are ``owner/slug`` strings, ``machine_shape`` (when set) is one of
:data:`MACHINE_SHAPES` and matches ``enable_gpu`` / ``enable_tpu``.
"""

from __future__ import annotations

import re
from pathlib import Path

ENTRY_FILE = "run.py"
METADATA_FILE = "kernel-metadata.json"
REQUIRED_FIELDS = ("id", "title", "code_file", "language", "kernel_type")
LANGUAGES = ("python", "r", "rmarkdown")
KERNEL_TYPES = ("script", "notebook")
BOOL_FIELDS = ("is_private", "enable_gpu", "enable_tpu", "enable_internet")
LIST_FIELDS = ("dataset_sources", "competition_sources", "kernel_sources", "model_sources")
# kernel-metadata.json "machine_shape" (Kaggle CLI >= 1.7; `kaggle kernels push --accelerator` takes the
# same names): the accelerator of the session. Without it a GPU kernel gets Kaggle's default GPU.
MACHINE_SHAPES = {"NvidiaTeslaT4": "GPU T4 x2", "NvidiaTeslaP100": "GPU P100", "TpuV5E8": "TPU v5e-8"}
GPU_SHAPES = ("NvidiaTeslaT4", "NvidiaTeslaP100")
DEFAULT_MACHINE_SHAPE = "NvidiaTeslaT4"

_SLUG = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
_OWNER = re.compile(r"^[a-z0-9]+(?:[-_][a-z0-9]+)*$")
_MIN_LEN, _MAX_LEN = 5, 50


def slugify(text: str) -> str:
    """Kaggle's URL slug of a title: lowercase, every run of other characters -> one hyphen."""
    return re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-")


PRETRAIN = "pretrain"
"""The "fold" of a PlayGround pre-training kernel (``run_fold.py --pretrain``): its slug part and folder."""


def _part(fold: int | str, sep: str) -> str:
    if fold == PRETRAIN:
        return PRETRAIN
    return "full" if int(fold) == -1 else f"fold{sep}{int(fold)}"


def kernel_slug(config_name: str, fold: int | str) -> str:
    """``whale-<config>-fold-<K>`` (``-full`` for fold -1, trained on everything; ``-pretrain``)."""
    return f"whale-{slugify(config_name)}-{_part(fold, '-')}"


def kernel_title(config_name: str, fold: int | str) -> str:
    """A title that slugifies to :func:`kernel_slug` (Kaggle links titles and slugs)."""
    return f"whale {slugify(config_name)} {_part(fold, ' ')}"


def kernel_folder(fold: int | str) -> str:
    """``fold{K}``, ``full`` for fold -1, ``pretrain`` for the PlayGround pre-training kernel."""
    return _part(fold, "")


def split_ref(ref: str) -> tuple[str, str]:
    """``OWNER/SLUG`` -> ``(owner, slug)``; without a slash the whole text is the owner and the slug is empty."""
    owner, _, slug = str(ref).partition("/")
    return owner, slug


def check_ref(ref, field: str, owner_required: bool = True) -> list[str]:
    """Problems of one ``owner/slug`` reference (datasets, kernels)."""
    if not isinstance(ref, str) or (owner_required and ref.count("/") != 1):
        return [f"{field}: expected 'owner/slug', received {ref!r}"]
    owner, slug = split_ref(ref)
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
        problems += check_ref(kid, "id")
        slug = split_ref(kid)[1] if isinstance(kid, str) else ""
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
                problems += check_ref(ref, f"{f}[{i}]")
    gpu, tpu = meta.get("enable_gpu") in (True, "true"), meta.get("enable_tpu") in (True, "true")
    if gpu and tpu:
        problems.append("enable_gpu and enable_tpu: a kernel gets one accelerator, both are true")
    shape = meta.get("machine_shape")
    if shape not in (None, ""):
        if shape not in MACHINE_SHAPES:
            problems.append(f"machine_shape: expected one of {', '.join(MACHINE_SHAPES)}, received {shape!r}")
        elif (shape in GPU_SHAPES) != gpu or (shape not in GPU_SHAPES) != tpu:
            problems.append(f"machine_shape: {shape!r} ({MACHINE_SHAPES[shape]}) needs "
                            f"{'enable_gpu' if shape in GPU_SHAPES else 'enable_tpu'} true and the other false")
    return problems


def build_metadata(config_name: str, fold: int | str, user: str, code_dataset: str, competition: str | None,
                   playground_dataset: str | None = None, playground_competition: str | None = None,
                   extra_datasets: tuple[str, ...] = (), machine_shape: str = DEFAULT_MACHINE_SHAPE,
                   kernel_sources: tuple[str, ...] = ()) -> dict:
    """The ``kernel-metadata.json`` dict of one fold's kernel (private, GPU ``machine_shape``, no internet).

    ``kernel_sources``: other kernels whose output it reads (a fold's PlayGround pre-training kernel);
    ``competition`` None: no main data (the pre-training kernel).
    """
    kid = f"{user}/{kernel_slug(config_name, fold)}"
    datasets = [code_dataset] + [d for d in (playground_dataset, *extra_datasets) if d]
    competitions = [c for c in (competition, playground_competition) if c]
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
        "machine_shape": machine_shape,
        "dataset_sources": list(dict.fromkeys(datasets)),
        "competition_sources": list(dict.fromkeys(competitions)),
        # Itself: the next version reads this version's output and resumes from it.
        "kernel_sources": [kid, *kernel_sources],
        "model_sources": [],
    }
