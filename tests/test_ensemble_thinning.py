"""whale ensemble --thin-validation (whale.ensemble.thinning): the runs calibrated and the threshold tuned on their
validation thinned as the test is drawn, the same photos hidden in every run, the views kept beside the submission."""
import json

import numpy as np
import pytest

from benchmarks.flukes.thin_views import main as thin_views
from tests.test_ensemble import make_run, run_ensemble, synthetic
from whale import NEW_WHALE
from whale.core.errors import ConfigError, DataError

FLAGS = ["--tune", "--fusion", "logodds", "--tune-new-share", "0.276"]


def two_runs(root, seed=0, per_id=2):
    """Runs ``a`` and a noisier ``b`` of one split whose whales have ``per_id`` gallery photos each."""
    rng = np.random.default_rng(seed)
    val = synthetic(rng, 60, per_id=per_id, prefix="v")
    test = synthetic(rng, 40, per_id=per_id, prefix="t")
    runs = []
    for name, noise in (("a", 0.0), ("b", 0.25)):
        def noisy(t):
            return (np.clip(t[0] + rng.normal(0, noise, t[0].shape), 0, 1).astype(np.float32), *t[1:])
        runs.append(make_run(root, name, noisy(test)[:4], noisy(val)))
    return runs, val


def test_the_submission_is_the_one_of_the_runs_thinned_views(tmp_path):
    """One flag does what thin_views.py and a plain ensemble of its views do: the same photos hidden in each run's
    validation (one of the two of each known query's whale: the share is 1 here), the test files as they were, and
    the same submission and threshold, byte for byte."""
    runs, val = two_runs(tmp_path / "r0")
    sub = tmp_path / "sub.csv"
    lines = []
    assert run_ensemble([*runs, *FLAGS, "--thin-validation", "--out", sub], log=lines.append) == 0
    text = "\n".join(lines)
    assert "validation thinned as the test is drawn (share 1.000, seed 0)" in text
    views = tmp_path / "sub.thinned"
    record = json.loads((views / "hidden.json").read_text())
    assert record["seed"] == 0 and len(record["groups"]) == 1
    hidden = record["groups"][0]["hidden"]
    scores, query, gallery, gallery_ids, truth = val
    known = [q for q, t in zip(query, truth) if t != NEW_WHALE]
    assert sorted(hidden) == sorted(known)
    for q, names in hidden.items():  # one photo of its own whale, nothing else
        assert len(names) == 1 and gallery_ids[gallery.index(names[0])] == truth[query.index(q)]
    for i, run in enumerate(runs):
        view = views / f"{i}-{run.name}"
        assert (view / "test.npz").read_bytes() == (run / "scores" / "test.npz").read_bytes()
        with np.load(run / "scores" / "val.npz") as z0, np.load(view / "val.npz") as z1:
            before, after = z0["scores"], z1["scores"]
        for q, names in hidden.items():
            r, c = query.index(q), gallery.index(names[0])
            assert after[r, c] == before[r].min()
            before[r, c] = before[r].min()
        assert (after == before).all()

    assert thin_views(["--out", str(tmp_path / "bench{S}"), "--seeds", "0",
                       "--run", f"a={tmp_path}/r{{S}}/a", "--run", f"b={tmp_path}/r{{S}}/b"]) == 0
    plain = tmp_path / "plain.csv"
    assert run_ensemble([tmp_path / "bench0" / "a", tmp_path / "bench0" / "b", *FLAGS, "--out", plain],
                        log=lambda s: None) == 0
    assert sub.read_bytes() == plain.read_bytes()
    tuned = [json.loads(p.read_text())["threshold"] for p in (tmp_path / "sub.threshold.json",
                                                                tmp_path / "plain.threshold.json")]
    assert tuned[0] == tuned[1]

    unthinned, orig = tmp_path / "orig.csv", []  # without the flag: the validation tuned on is another one
    assert run_ensemble([*runs, *FLAGS, "--out", unthinned], log=orig.append) == 0

    def expected(text):
        return [line for line in text.splitlines() if line.strip().startswith("expected MAP@5 from validation")]
    assert expected(text) and expected(text) != expected("\n".join(orig))
    assert not (tmp_path / "orig.thinned").exists()
    again = []  # a second run rewrites its views: the same submission
    assert run_ensemble([*runs, *FLAGS, "--thin-validation", "--out", sub], log=again.append) == 0
    assert sub.read_bytes() == plain.read_bytes()


def test_runs_of_other_folds_get_their_own_draw(tmp_path):
    first, _ = two_runs(tmp_path / "f0", seed=1)
    second, _ = two_runs(tmp_path / "f1", seed=2)
    for run in second:  # another fold's validation: other query names
        with np.load(run / "scores" / "val.npz") as z:
            arrays = {k: z[k] for k in z.files}
        arrays["query"] = np.char.add("x", arrays["query"])
        np.savez(run / "scores" / "val.npz", **arrays)
    runs = [first[0], second[0]]
    assert run_ensemble([*runs, *FLAGS, "--thin-validation", "--out", tmp_path / "s.csv"], log=lambda s: None) == 0
    groups = json.loads((tmp_path / "s.thinned" / "hidden.json").read_text())["groups"]
    assert [g["runs"] for g in groups] == [[str(runs[0])], [str(runs[1])]]
    assert all(q.startswith("x") for q in groups[1]["hidden"]) and not any(q.startswith("x") for q in groups[0]["hidden"])


def test_what_it_cannot_thin_is_refused_by_name(tmp_path):
    runs, _ = two_runs(tmp_path)
    with pytest.raises(ConfigError, match="--thin-validation changes what is read from the validation files"):
        run_ensemble([*runs, "--fusion", "scores", "--threshold", "0.5", "--thin-validation",
                      "--out", tmp_path / "s.csv"], log=lambda s: None)
    (tmp_path / "mine.thinned").mkdir()
    with pytest.raises(ConfigError, match=r"mine.thinned, which exists and is not an earlier view folder"):
        run_ensemble([*runs, *FLAGS, "--thin-validation", "--out", tmp_path / "mine.csv"], log=lambda s: None)
    (runs[1] / "run.json").write_text(json.dumps({"matcher": "joint", "thinned": {"share": 1.0}}))
    with pytest.raises(DataError, match=r"b/run.json: its validation was thinned, but .*b/thinned/hidden.json"):
        run_ensemble([*runs, *FLAGS, "--thin-validation", "--out", tmp_path / "s.csv"], log=lambda s: None)


def test_a_joint_run_thinned_by_the_same_draw_is_read_as_it_is_and_another_draw_refused(tmp_path):
    """A joint run fitted on a thinned validation (``check.validation: thinned``) cannot be thinned again: it is
    fused as it is where it hid the photos this draw hides, and refused by name where it hid others."""
    runs, _ = two_runs(tmp_path)
    assert run_ensemble([runs[0], *FLAGS, "--thin-validation", "--out", tmp_path / "a.csv"], log=lambda s: None) == 0
    drawn = json.loads((tmp_path / "a.thinned" / "hidden.json").read_text())["groups"][0]
    joint = runs[1]  # stands for a joint run: its validation thinned by the same draw, by its own record
    (joint / "run.json").write_text(json.dumps({"matcher": "joint", "thinned": {"share": drawn["share"]}}))
    (joint / "thinned").mkdir()
    (joint / "thinned" / "hidden.json").write_text(json.dumps({"share": drawn["share"], "seed": 0,
                                                                "hidden": drawn["hidden"]}))
    lines = []
    assert run_ensemble([runs[0], joint, *FLAGS, "--thin-validation", "--out", tmp_path / "s.csv"],
                        log=lines.append) == 0
    assert any(f"{joint}: thinned by this draw already" in line for line in lines)
    assert not (tmp_path / "s.thinned" / "1-b").exists() and (tmp_path / "s.thinned" / "0-a" / "val.npz").is_file()
    assert any(line.strip().startswith(f"adding {joint / 'scores' / 'val.npz'}") for line in lines)
    with pytest.raises(ConfigError, match=r"--thin-seed 5: .*b fitted its check on a validation thinned by another "
                                          r"draw \(seed 0, .*give --thin-seed 0"):
        run_ensemble([runs[0], joint, *FLAGS, "--thin-validation", "--thin-seed", "5", "--out", tmp_path / "t.csv"],
                     log=lambda s: None)
