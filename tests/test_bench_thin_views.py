"""benchmarks/flukes/thin_views.py: each run's validation thinned as the test is drawn, the same photos hidden in
every run of a seed, the test file as it was."""
import json

import numpy as np
import pytest

from benchmarks.flukes.thin_views import main
from tests.test_ensemble import make_run, synthetic
from whale import NEW_WHALE


def test_each_run_s_view_hides_the_same_photos_from_each_known_query(tmp_path):
    rng = np.random.default_rng(0)
    val = synthetic(rng, 40, per_id=2, prefix="v")  # every whale has two gallery photos: each known query keeps one
    test = synthetic(rng, 30, per_id=2, prefix="t")
    for name, noise in (("a", 0.0), ("b", 0.1)):
        make_run(tmp_path, f"{name}0", test[:4], (val[0] + np.float32(noise), *val[1:]))
    assert main(["--out", str(tmp_path / "views{S}"), "--seeds", "0",
                 "--run", f"a={tmp_path}/a{{S}}", "--run", f"b={tmp_path}/b{{S}}"]) == 0
    scores, query, gallery, gallery_ids, truth = val
    record = json.loads((tmp_path / "views0" / "hidden.json").read_text())
    assert record["share"] == 1.0
    mask = np.zeros(scores.shape, bool)
    for q, names in record["hidden"].items():
        mask[query.index(q), [gallery.index(g) for g in names]] = True
    for q, t in enumerate(truth):  # one of the two photos of its whale hidden from a known query, nothing else
        own = gallery_ids == t
        assert mask[q].sum() == (0 if t == NEW_WHALE else 1) and not mask[q][~own].any()
    for name, noise in (("a", 0.0), ("b", 0.1)):  # the same photos hidden in each run, scored at its row's lowest
        before = scores + np.float32(noise)
        with np.load(tmp_path / "views0" / name / "val.npz") as z:
            after = z["scores"]
        assert (after[~mask] == before[~mask]).all()
        assert (after[mask] == np.repeat(before.min(axis=1), mask.sum(axis=1))).all()
        assert (tmp_path / "views0" / name / "test.npz").read_bytes() == \
            (tmp_path / f"{name}0" / "scores" / "test.npz").read_bytes()


def test_runs_of_another_split_are_refused_by_name(tmp_path):
    rng = np.random.default_rng(1)
    make_run(tmp_path, "a0", synthetic(rng, 10, prefix="t")[:4], synthetic(rng, 20, prefix="v"))
    make_run(tmp_path, "b0", synthetic(rng, 10, prefix="t")[:4], synthetic(rng, 21, prefix="v"))
    with pytest.raises(SystemExit, match=r"b0/scores/val.npz: not the validation queries and gallery of .*a0"):
        main(["--out", str(tmp_path / "v{S}"), "--run", f"a={tmp_path}/a{{S}}", "--run", f"b={tmp_path}/b{{S}}"])
