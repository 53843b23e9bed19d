"""benchmarks/humpback.py's learned path: ``--keypoint-runs`` and ``--learned-runs`` reuse earlier runs' score files
of the same split only."""
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import humpback  # noqa: E402


def fake_source(root: Path, counts=(1,) * 8 + (3,) * 6 + (5,) * 4, seed=0) -> Path:
    """test_bench_humpback's fake source, with enough individuals of 3 and 5 photos for a fold to train on."""
    from tests.test_bench_humpback import fake_source as make

    return make(root, counts, seed)


def _matcher_files(comp: Path, run: Path) -> None:
    """Score files as ``whale score --matcher keypoints --fold 0`` writes them for ``comp`` (random scores)."""
    from whale.data import ImageSet, fold_data, load_competition
    from whale.inference.scorefile import write_scores

    c = load_competition(comp)
    data, known = fold_data(c, 0, 0), ImageSet.known(c)
    rng = np.random.default_rng(0)
    write_scores(run / "val.npz", rng.random((len(data.val), len(data.gallery))).astype(np.float32),
                 data.val.names, data.gallery.names, data.gallery.ids, query_ids=data.val.ids)
    write_scores(run / "test.npz", rng.random((len(c.test_images), len(known))).astype(np.float32),
                 c.test_images, known.names, known.ids)
    (run / "run.json").write_text(json.dumps({"data": str(comp), "matcher": "keypoints"}))


def test_keypoint_runs_are_taken_for_their_own_split_only(tmp_path):
    src = fake_source(tmp_path / "src")
    comps = {s: humpback.build_split(src, tmp_path / f"seed{s}" / "data", s, log=lambda m: None)[0] for s in (0, 1)}
    _matcher_files(comps[0], tmp_path / "seed0" / "keypoints")
    assert humpback.earlier_run_of(tmp_path, 0, comps[0]) == tmp_path / "seed0" / "keypoints"
    copy = shutil.copytree(comps[0], tmp_path / "copy" / "data")  # the same split written elsewhere
    assert humpback.earlier_run_of(tmp_path, 0, copy) == tmp_path / "seed0" / "keypoints"
    with pytest.raises(ValueError, match="another split"):
        humpback.earlier_run_of(tmp_path, 0, comps[1])
    with pytest.raises(ValueError, match="--keypoint-runs: .* found none"):
        humpback.earlier_run_of(tmp_path, 1, comps[1])


def test_learned_runs_are_found_by_their_scores_folder_and_split(tmp_path):
    """A trained run keeps its score files in ``scores/`` (what ``whale ensemble`` reads): found there."""
    src = fake_source(tmp_path / "src")
    comps = {s: humpback.build_split(src, tmp_path / f"seed{s}" / "data", s, log=lambda m: None)[0] for s in (0, 1)}
    run = tmp_path / "seed0" / "learned"
    _matcher_files(comps[0], run / "scores")
    (run / "scores" / "run.json").rename(run / "run.json")
    assert humpback.earlier_run_of(tmp_path, 0, comps[0], "learned") == run
    with pytest.raises(ValueError, match="another split"):
        humpback.earlier_run_of(tmp_path, 0, comps[1], "learned")
    with pytest.raises(ValueError, match="--learned-runs: .* found none"):
        humpback.earlier_run_of(tmp_path, 1, comps[1], "learned")
