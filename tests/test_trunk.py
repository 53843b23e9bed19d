"""A branch cut into a frozen trunk and a trained top (whale.models.trunk), the trunk's maps kept by photo content
(whale.inference.trunk), and a trunk run trained, scored and resumed through the trainer."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from whale.core.errors import ConfigError

pytestmark = pytest.mark.backend

TRUNK_CONFIG = {
    "name": "trunk-test", "seed": 1, "model": {"branch": "tiny", "weights": None, "channels": 1},
    "trunk": {"layer": "last_bn", "views": 2}, "objective": "arcface", "batch": {"ids": 4, "per_id": 2},
    "mining_interval": 1, "mining": "exact", "workers": 1,
    "stages": [{"epochs": 1, "k": 1000.0, "lr": 1.0e-3, "image_size": 32},
               {"epochs": 1, "k": 1000.0, "lr": 3.0e-4, "image_size": 32}],
}


@pytest.fixture(scope="module")
def competition(tmp_path_factory):
    from whale.data.synth import generate

    return generate(tmp_path_factory.mktemp("trunk") / "data", n_ids=12, seed=2, size=64, progress=False)


def test_the_trunk_then_the_top_is_the_branch(backend):
    from whale.models import build_branch
    from whale.models.trunk import split_branch

    branch = build_branch("tiny", (32, 64, 1))
    trunk, top = split_branch(branch, "last_bn")
    x = np.random.default_rng(0).uniform(0, 255, (3, 32, 64, 1)).astype(np.float32)
    np.testing.assert_allclose(top.predict_on_batch(trunk.predict_on_batch(x)), branch.predict_on_batch(x),
                               atol=1e-5)
    assert top.name == "branch" and not trunk.trainable and trunk.output_shape[1:] == (4, 8, 32)
    lite = build_branch("efficientnet_lite0", (32, 64, 3))
    with pytest.raises(ConfigError, match=r"'block6d_project_bn' is not a layer .* the last that fit: .*top_conv"):
        split_branch(lite, "block6d_project_bn")  # inside a residual block: the rest needs two inputs


def _photos(folder: Path, n: int = 4) -> list[Path]:
    import cv2

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(3)
    paths = []
    for i in range(n):
        paths.append(folder / f"p{i}.png")
        cv2.imwrite(str(paths[-1]), rng.integers(0, 255, (40, 70), dtype=np.uint8))
    return paths


_TRUNK = []


def _maps(cache, views=2, layer="last_bn"):
    """Maps through one tiny trunk (built once: a random branch, the same weights for every cache)."""
    from whale.inference.trunk import TrunkMaps
    from whale.models import build_branch
    from whale.models.trunk import split_branch

    if not _TRUNK:
        _TRUNK.append(split_branch(build_branch("tiny", (32, 64, 1)), "last_bn")[0])
    return TrunkMaps(_TRUNK[0], (32, 64), 1, 0.05, "box", views, "paper", {"branch": "tiny", "layer": layer},
                     cache=cache, progress=False)


def _in_a_mapped_file(array) -> bool:
    import mmap

    while array is not None:
        if isinstance(array, (np.memmap, mmap.mmap)):
            return True
        array = array.obj if isinstance(array, memoryview) else getattr(array, "base", None)
    return False


def test_maps_are_kept_by_content_and_read_back_without_the_trunk(backend, tmp_path):
    paths = _photos(tmp_path / "photos")
    shutil.copyfile(paths[0], tmp_path / "photos" / "renamed.png")  # the same photo under another name
    maps = _maps(tmp_path / "cache")
    store = maps.store(paths + [tmp_path / "photos" / "renamed.png"], views=True)
    assert len(store) == 5 and store[0].shape == (3, 4, 8, 32) and store[0].dtype == np.float16
    np.testing.assert_array_equal(store[0], store[4])
    assert not np.array_equal(store[0][1], store[0][2]) and not np.array_equal(store[0][0], store[0][1])
    files = sorted(p.name for p in maps.folder.glob("*.npz"))
    assert len(files) == 8 and json.loads((maps.folder / "trunk.json").read_text())["layer"] == "last_bn"

    again = _maps(tmp_path / "cache")  # a new process: read from disk, never through the trunk
    again.trunk = None
    np.testing.assert_array_equal(again.store(paths, views=True)[2], store[2])
    fresh = _maps(tmp_path / "elsewhere")  # the views are drawn from each photo's content: the same anywhere
    np.testing.assert_array_equal(fresh.store(paths, views=True)[1], store[1])
    assert _maps(None, views=3).fingerprint() != maps.fingerprint() != _maps(None, layer="x").fingerprint()

    assert not again.notes
    # a photo's maps are held once, in the mapped file, not the process's own memory: both kinds view the training
    # store's array, a second store and a plain store of the same photos hand out those pages again
    assert np.shares_memory(store[1], maps.store(paths, views=True)[1]) and _in_a_mapped_file(store[1])
    assert np.shares_memory(maps.store(paths)[1], store[1])
    assert not store[1].flags.writeable


def test_a_damaged_or_altered_map_file_is_computed_again_with_a_note_never_used(backend, tmp_path):
    from whale.core.sealed import read_sealed, write_sealed

    paths = _photos(tmp_path / "photos")
    maps = _maps(tmp_path / "cache")
    store = maps.store(paths, views=True)
    expected = np.concatenate([m for m in store])
    views = sorted(maps.folder.glob("*.views.npz"))
    victim, other = views[0], views[1]
    good = victim.read_bytes()
    zeros = np.zeros((2, 4, 8, 32), np.float16)
    nan = read_sealed(victim)["maps"].copy()
    nan[0, 0, 0, 0] = np.nan
    key = victim.name.split(".")[0]
    damage = {  # what was done to the file -> what the note says
        "zero bytes": (lambda: victim.write_bytes(b""), "an empty file"),
        "zero-filled": (lambda: victim.write_bytes(bytes(len(good))), "not a readable archive"),
        "cut short": (lambda: victim.write_bytes(good[:len(good) // 2]), "not a readable archive"),
        "a map of zeros, no hash": (lambda: np.savez(victim, maps=zeros), "records no content hash"),
        "bytes flipped": (lambda: victim.write_bytes(good[:-300] + bytes(b ^ 0x55 for b in good[-300:-200])
                                                     + good[-200:]), "not a readable archive"),
        "another photo's maps": (lambda: victim.write_bytes(other.read_bytes()), "does not hold this photo's maps"),
        "wrong shape": (lambda: write_sealed(victim, {"maps": zeros[:, :3], "photo": np.asarray(key),
                                                      "kind": np.asarray("views")}), "expected float16 [2, 4, 8, 32]"),
        "NaN": (lambda: write_sealed(victim, {"maps": nan, "photo": np.asarray(key), "kind": np.asarray("views")}),
                "not finite"),
    }
    for what, (harm, says) in damage.items():
        harm()
        again = _maps(tmp_path / "cache")
        np.testing.assert_array_equal(np.concatenate([m for m in again.store(paths, views=True)]), expected)
        assert len(again.notes) == 1 and str(victim) in again.notes[0] and says in again.notes[0], (what, again.notes)
        assert victim.read_bytes() == good, what  # computed again and replaced: the same bytes as a clean run's


def test_a_trunk_run_trains_scores_and_scores_again_from_the_cache(backend, competition, tmp_path, monkeypatch):
    from whale.config import config_from_dict
    from whale.inference.scorefile import load_score_file
    from whale.inference.trunk import TrunkMaps
    from whale.training.rescore import score_fold
    from whale.training.trainer import train_fold

    cfg = config_from_dict(TRUNK_CONFIG)
    lines = []
    res = train_fold(cfg, competition, 0, tmp_path / "run", verbose=0, log=lines.append,
                     trunk_cache=tmp_path / "cache")
    assert res.finished and any("through the trunk" in line for line in lines)
    test = load_score_file(tmp_path / "run" / "scores" / "test.npz")
    assert test.scores.shape[0] == len(list((competition / "test").iterdir()))

    computed = []
    real = TrunkMaps._compute
    monkeypatch.setattr(TrunkMaps, "_compute", lambda self, *a: computed.append(a) or real(self, *a))
    shutil.move(tmp_path / "run" / "scores", tmp_path / "first")
    score_fold(tmp_path / "run", competition, 0, cfg, trunk_cache=tmp_path / "cache", log=lambda *_: None)
    assert not computed  # every map came from the cache the training filled
    again = load_score_file(tmp_path / "run" / "scores" / "test.npz")
    np.testing.assert_array_equal(again.scores, test.scores)
    from whale.explain.cli import Explainer

    with pytest.raises(ConfigError, match="a trunk run .*whale explain draws heatmaps of a whole branch"):
        Explainer(tmp_path / "run")

    # scored again with trunk.gallery_views: each gallery photo the mean of its plain and augmented views' features
    from whale.config import config_hash
    from whale.data import ImageSet, load_competition
    from whale.inference.runs import RunScorer, load_run_model

    views = config_from_dict({**TRUNK_CONFIG, "trunk": {**TRUNK_CONFIG["trunk"], "gallery_views": True}})
    assert config_hash(config_from_dict(TRUNK_CONFIG)) == config_hash(
        config_from_dict({**TRUNK_CONFIG, "trunk": {**TRUNK_CONFIG["trunk"], "gallery_views": False}}))
    lines.clear()
    score_fold(tmp_path / "run", competition, 0, views, trunk_cache=tmp_path / "cache", log=lines.append)
    assert any("trunk.gallery_views: true" in line for line in lines)
    averaged = load_score_file(tmp_path / "run" / "scores" / "test.npz")
    assert averaged.identity["config_hash"] == config_hash(views) != test.identity["config_hash"]
    assert averaged.scores.shape == test.scores.shape and not np.array_equal(averaged.scores, test.scores)
    model, _ = load_run_model(tmp_path / "run", "best")
    scorer = RunScorer.for_config(model, views, verbose=False, trunk_cache=tmp_path / "cache")
    known = ImageSet.known(load_competition(competition))
    store = scorer.trunk.store(known.paths[:3], known.boxes[:3], views=True)
    branch = model.get_layer("branch")
    by_hand = np.stack([np.asarray(branch(np.asarray(store[i], np.float32))).mean(0) for i in range(3)])
    np.testing.assert_allclose(scorer.gallery_features(known.paths[:3], known.boxes[:3])[0, 0], by_hand, rtol=1e-4,
                               atol=1e-5)
    np.testing.assert_allclose(scorer.features(known.paths[:3], known.boxes[:3])[0, 0],
                               np.stack([np.asarray(branch(np.asarray(store[i][:1], np.float32)))[0]
                                         for i in range(3)]), rtol=1e-4, atol=1e-5)

    # a catalogue indexed with a run whose config.yaml sets gallery_views keeps each photo by its views;
    # the photos it matches stay plain
    from whale.catalogue.features import RunFeatures

    shutil.copytree(tmp_path / "run", tmp_path / "views_run", ignore=shutil.ignore_patterns("scores*"))
    views.to_yaml(tmp_path / "views_run" / "config.yaml")
    run = RunFeatures(tmp_path / "views_run", verbose=False)
    mine = run.scorer.trunk.store(known.paths[:3], known.boxes[:3], views=True)  # no cache: computed again
    for i in range(3):  # a trunk without pretrained weights is built from the run's seed: the cached maps again
        np.testing.assert_allclose(np.asarray(mine[i], np.float32), np.asarray(store[i], np.float32), atol=1e-2)
    np.testing.assert_allclose(run.gallery_features(known.paths[:3], known.boxes[:3])[0, 0], by_hand, rtol=1e-4,
                               atol=1e-5)
    np.testing.assert_allclose(run.features(known.paths[:3], known.boxes[:3])[0, 0],
                               np.stack([np.asarray(branch(np.asarray(mine[i][:1], np.float32)))[0]
                                         for i in range(3)]), rtol=1e-4, atol=1e-5)


def test_a_weightless_trunk_is_built_from_the_runs_seed_leaving_the_callers_streams_alone(backend):
    import random

    import keras

    from whale.config import config_from_dict
    from whale.inference.trunk import TrunkMaps

    cfg = config_from_dict(TRUNK_CONFIG)

    def trunk_weights():
        return [np.asarray(w) for w in TrunkMaps.for_config(cfg, progress=False)[0].trunk.weights]

    random.seed(11)
    np.random.seed(12)
    first = trunk_weights()
    after = random.random(), np.random.random()
    random.seed(11)
    np.random.seed(12)
    assert after == (random.random(), np.random.random())  # the build drew nothing from the caller's streams
    random.seed(99)  # another state: the same weights again
    again = trunk_weights()
    keras.utils.set_random_seed(cfg.seed)  # ... and the ones a trunk built after the global seed had
    from whale.imagesize import input_size
    from whale.models import build_branch
    from whale.models.trunk import split_branch

    size = input_size(cfg.stages[0].image_size, cfg.aspect)
    branch = build_branch(cfg.model.branch, (*size, cfg.model.channels), weights=None,
                          options=cfg.model.branch_options())
    former = [np.asarray(w) for w in split_branch(branch, cfg.trunk.layer)[0].weights]
    assert len(first) == len(again) == len(former) > 0
    for a, b, c in zip(first, again, former):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)

def test_what_a_trunk_run_cannot_do_is_refused_by_name():
    from whale.config import config_from_dict

    two_sizes = json.loads(json.dumps(TRUNK_CONFIG))
    two_sizes["stages"][1]["image_size"] = 48
    with pytest.raises(ConfigError, match=r"stages\[\]\.image_size: expected one image size for a trunk run"):
        config_from_dict(two_sizes)
    with pytest.raises(ConfigError, match="flip_ids: expected false for a trunk run"):
        config_from_dict({**TRUNK_CONFIG, "flip_ids": True})
    with pytest.raises(ConfigError, match="tta: expected no test-time views"):
        config_from_dict({**TRUNK_CONFIG, "tta": ["zoom"]})
    assert config_from_dict({k: v for k, v in TRUNK_CONFIG.items() if k != "trunk"}).trunk.layer is None
    with pytest.raises(ConfigError, match="trunk.gallery_views: expected false without a trunk layer and its views"):
        config_from_dict({**TRUNK_CONFIG, "trunk": {"layer": "last_bn", "views": 0, "gallery_views": True}})


def test_the_imagenet_reference_is_the_shipped_configs_branch_untrained(backend, tmp_path):
    """benchmarks/flukes/humpback.py's ``imagenet`` row: configs/flukes_lite0_cpu.yaml's branch as it comes (ImageNet
    weights, its trunk's maps through the rest of the backbone), unit features, cosine scores."""
    from benchmarks.common import FrozenBranchMethod
    from whale.models import build_branch

    paths = _photos(tmp_path / "photos", 3)
    method = FrozenBranchMethod(Path(__file__).parents[1] / "configs" / "flukes_lite0_cpu.yaml", tmp_path / "cache")
    f = method.features(paths)
    assert f.shape == (3, 1280) and np.allclose(np.linalg.norm(f, axis=1), 1.0, atol=1e-5)
    s = method.scores(f, f)
    assert s.shape == (3, 3) and np.allclose(np.diag(s), 1.0, atol=1e-4)
    whole = build_branch("efficientnet_lite0", (224, 448, 1), weights="imagenet")  # the branch, uncut
    from whale.data import crop_size_for
    from whale.data.augment import build_view
    from whale.data.images import load_crop

    crop = load_crop(paths[0], None, crop_size_for((224, 448)), channels=1, margin=0.05, crop="content")
    g = whole.predict_on_batch(build_view("plain", (224, 448), 1)(crop)[None].astype(np.float32))[0]
    np.testing.assert_allclose(f[0], g / np.linalg.norm(g), atol=2e-3)  # the maps are float16


def test_mapped_rows_hand_out_views_of_one_file_across_chunks_and_refuse_other_shapes(tmp_path):
    from whale.core.mapped import MappedRows

    rng = np.random.default_rng(0)
    rows = MappedRows((3, 4), np.float16, folder=tmp_path / "maps", chunk_bytes=5 * 3 * 4 * 2)  # 5 rows a chunk
    blocks = [rng.standard_normal((n, 3, 4)).astype(np.float16) for n in (1, 3, 2, 7, 1)]  # 7: a chunk of its own
    views = [rows.append(b) for b in blocks]
    assert rows.rows == 14
    for block, view in zip(blocks, views):  # every view still what was appended, after the file grew
        np.testing.assert_array_equal(view, block)
        assert view.dtype == np.float16 and not view.flags.writeable and _in_a_mapped_file(view)
    assert not np.shares_memory(views[0], views[1])
    assert list((tmp_path / "maps").iterdir()) == []  # the file has no name: nothing left behind
    rows.random_access()  # read in no order from now on: the same values, and appends go on
    later = rows.append(blocks[0])
    for block, view in zip(blocks + blocks[:1], views + [later]):
        np.testing.assert_array_equal(view, block)
    with pytest.raises(ValueError, match=r"expected rows of shape \[3, 4\], got an array of shape \[2, 3, 5\]"):
        rows.append(np.zeros((2, 3, 5), np.float16))


def test_the_store_memory_benchmark_reads_the_same_maps_every_way(tmp_path, capsys):
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "trunk_store_memory", Path(__file__).resolve().parents[1] / "benchmarks" / "speed" / "trunk_store_memory.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.main(["--photos", "12", "--views", "2", "--shape", "2,3,4"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    rows = result["rows"]
    assert set(rows) == {"former", "memory", "mapped"} and set(result["over_memory"]) == {"former", "mapped"}
    assert len({r["checksum"] for r in rows.values()}) == 1  # one epoch's reads gave the same values every way
    assert all(r["maps_mb"] == 12 * 3 * 24 * 2 / 2 ** 20 for r in rows.values())


def test_a_full_disk_is_one_error_naming_the_folder_never_a_write_into_a_mapped_page(tmp_path, monkeypatch):
    import errno
    import os

    from whale.core.errors import OutputError
    from whale.core.mapped import MappedRows

    if not hasattr(os, "posix_fallocate"):
        pytest.skip("no posix_fallocate here: the blocks are not reserved")

    def full(fd, offset, size):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full)
    rows = MappedRows((4, 4), np.float16, folder=tmp_path / "cache", flag="--trunk-cache")
    with pytest.raises(OutputError, match=rf"{tmp_path / 'cache'} \(a mapped file of .* MB more\): cannot write "
                                          r"\(No space left on device\); free some space or choose another "
                                          r"--trunk-cache"):
        rows.append(np.zeros((2, 4, 4), np.float16))
