"""One identification from all the evidence (``whale score --matcher joint``, :mod:`whale.identify`): the shortlist
merge, every shortlisted pair verified once by each feature kind, the pair table against brute force, the check's
cross-fitting, the aggregation to individuals, a trained run of other data refused by name, and the command end to
end through ``whale ensemble`` (issue 68)."""
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("cv2")

from whale.core.errors import DataError  # noqa: E402
from whale.identify.check import (FLOOR, JointCheck, KindEvidence, column_names, identification_scores,  # noqa: E402
                                  pair_table, pairs_of, ranks)
from whale.identify.sources import merge, run_scores, top_photos  # noqa: E402
from whale.inference.scorefile import write_scores  # noqa: E402

KINDS = {"a.yaml": "features: {n_features: 300}\nsearch: {k: 4}\nverify: {shortlist: 3}\nselect: {keep: 1}\n"
                   "check: {model: gbm, rounds: 20, both_ways: true}\n",
         "b.yaml": "features: {n_features: 200, sigma: 1.6}\nverify: {shortlist: 3}\nselect: {keep: 1}\n"}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    from whale.data.synth import generate

    return generate(tmp_path_factory.mktemp("joint") / "data", n_ids=12, seed=3, size=96, progress=False)


@pytest.fixture(autouse=True)
def cache(tmp_path_factory, monkeypatch):
    root = tmp_path_factory.getbasetemp() / "joint-cache"
    monkeypatch.setenv("WHALE_CACHE", str(root))
    return root


def split_sets(data):
    from whale.data import ImageSet, fold_data, load_competition

    comp = load_competition(data)
    return fold_data(comp, 0, 0), ImageSet.known(comp), ImageSet.test(comp)


def fake_run(folder, data, informative=True, val_queries=None, identity=None, test_identity=None):
    """A trained run's score folder for fold 0 of ``data``: scores that know the answer (``informative``) plus noise;
    ``identity`` that of its ``val.npz`` (default run ``fake-run``, fold 0), ``test_identity`` its ``test.npz``'s."""
    fold, known, test = split_sets(data)
    rng = np.random.default_rng(0)

    def scores(q, g, ids):
        s = rng.random((len(q), len(g.names))).astype(np.float32) * 0.5
        if ids is not None and informative:
            s += 0.5 * (np.asarray(ids)[:, None] == np.asarray(g.ids)[None])
        return s

    queries = fold.val.names if val_queries is None else val_queries
    (folder / "scores").mkdir(parents=True)
    write_scores(folder / "scores" / "val.npz", scores(queries, fold.gallery, fold.val.ids[:len(queries)]), queries,
                 fold.gallery.names, fold.gallery.ids, query_ids=fold.val.ids[:len(queries)],
                 identity=identity or {"run_id": "fake-run", "fold": 0}, trained_on=fold.gallery.names)
    write_scores(folder / "scores" / "test.npz", scores(test.names, known, None), test.names, known.names, known.ids,
                 identity=test_identity)
    return folder


def joint_config(folder, extra=""):
    for name, text in KINDS.items():
        (folder / name).write_text(text)
    path = folder / "joint.yaml"
    path.write_text("keypoints: [a.yaml, b.yaml]\nshortlist: {votes: 4, runs: 4}\ncheck: {rounds: 30, folds: 3}\n"
                    + extra)
    return path


def test_the_shipped_joint_config_names_both_feature_kinds(tmp_path):
    from whale.core.errors import ConfigError
    from whale.identify.config import load_joint_config

    cfg = load_joint_config("configs/joint.yaml")
    assert [n for n, _ in cfg.kinds] == ["keypoints_checked", "keypoints_xfeat_checked"]
    assert cfg.kinds[1][1].features.detector == "xfeat" and (cfg.votes, cfg.runs, cfg.aggregate) == (40, 20, "max")
    one = load_joint_config("configs/joint_sift.yaml")  # RootSIFT alone, the rest as joint.yaml
    assert [n for n, _ in one.kinds] == ["keypoints_checked"] and one.to_dict() | {"keypoints": None} == \
        cfg.to_dict() | {"keypoints": None}
    bad = tmp_path / "j.yaml"
    bad.write_text("keypoints: [missing.yaml]\n")
    with pytest.raises(ConfigError, match=r"keypoints\[0\]: .*missing.yaml is not a file"):
        load_joint_config(bad)
    bad.write_text(f"keypoints: [{Path('configs/keypoints.yaml').resolve()}]\naggregate: mean\n")
    with pytest.raises(ConfigError, match="aggregate"):
        load_joint_config(bad)
    assert cfg.validation == "original" and "validation" not in cfg.to_dict()["check"]  # the shipped runs' hash kept
    assert load_joint_config("configs/joint.yaml", {"check.validation": "thinned"}).validation == "thinned"
    with pytest.raises(ConfigError, match="check.validation"):
        load_joint_config("configs/joint.yaml", {"check.validation": "thin"})


def test_the_shortlist_merges_every_source_once():
    votes = np.array([[0.0, 3.0, 2.0, 1.0], [5.0, 0.0, 0.0, 0.0]], np.float32)
    run = np.array([[0.9, 0.1, 0.8, 0.2], [0.1, 0.2, 0.3, 0.9]], np.float32)
    by_votes, by_run = top_photos(votes, 2), top_photos(run, 2)
    assert [sorted(v.tolist()) for v in by_votes] == [[1, 2], [0]]  # a photo without a vote proposes nothing
    assert [sorted(v.tolist()) for v in by_run] == [[0, 2], [2, 3]]
    assert [m.tolist() for m in merge(by_votes, by_run)] == [[0, 1, 2], [0, 2, 3]]


def test_each_shortlisted_pair_is_verified_once_by_each_kind(data):
    """A photo another source proposes is verified (it had votes but was outside this kind's own shortlist), and a
    photo proposed by several sources and by its own votes is verified once: one row per pair."""
    from whale.keypoints.config import parse_keypoint_config
    from whale.keypoints.matcher import KeypointMatcher
    from whale.keypoints.store import FeatureStore

    fold, _, _ = split_sets(data)
    cfg = parse_keypoint_config({"features": {"n_features": 300}, "verify": {"shortlist": 1}, "select": {"keep": 1}})
    store = FeatureStore(cfg)
    gallery = store.features(fold.gallery.paths, workers=1, progress=False)
    queries = store.features(fold.val.paths, workers=1, progress=False)
    matcher = KeypointMatcher(cfg, gallery, fold.gallery.ids)
    alone = matcher.match(queries, progress=False, describe=True)
    votes = matcher.votes(queries, progress=False)
    np.testing.assert_array_equal(votes, alone.votes)  # the votes-only pass is the match's own search
    also = [np.unique(np.r_[np.argsort(-v)[:6], np.argsort(-v)[:6]]) for v in votes]  # the own pick, twice
    both = matcher.match(queries, progress=False, describe=True, also=also)
    assert len(np.unique(both.pairs.index, axis=0)) == len(both.pairs.index)
    verified_alone = set(map(tuple, alone.pairs.index.tolist()))
    verified_both = set(map(tuple, both.pairs.index.tolist()))
    assert verified_alone <= verified_both and len(verified_both) > len(verified_alone)
    assert all(p in {(i, int(c)) for i, a in enumerate(also) for c in a} | verified_alone for p in verified_both)


def test_the_pair_table_matches_brute_force():
    rng = np.random.default_rng(1)
    ids = np.array(["a", "a", "b", "c", "c", "c"])
    kind = KindEvidence(rng.random((3, 6)).astype(np.float32), rng.random((3, 6)).astype(np.float32) * 5,
                        rng.integers(0, 9, (3, 6)).astype(np.int32))
    run = rng.random((3, 6)).astype(np.float32)
    pairs = pairs_of([np.array([0, 2]), np.array([5]), np.array([1, 3, 4])])
    rows = pair_table(pairs, [kind], [run], ids)
    names = column_names(["k"], ["r"])
    assert rows.shape == (6, len(names))
    col = {n: rows[:, j] for j, n in enumerate(names)}
    for r, (q, g) in enumerate(pairs.tolist()):
        assert col["k.p"][r] == pytest.approx(kind.scores[q, g])
        assert col["k.vote_rank"][r] == pytest.approx(np.log1p((kind.votes[q] > kind.votes[q, g]).sum()))
        best = {i: kind.scores[q, ids == i].max() for i in "abc"}
        assert col["k.id_p"][r] == pytest.approx(best[ids[g]])
        assert col["k.id_rank"][r] == pytest.approx(np.log1p(sum(v > best[ids[g]] for v in best.values())))
        assert col["r.gap"][r] == pytest.approx(run[q].max() - run[q, g])
        assert col["log_photos"][r] == pytest.approx(np.log((ids == ids[g]).sum()))
    np.testing.assert_array_equal(ranks(np.array([[0.1, 0.9, 0.5]])), [[2, 0, 1]])


def test_a_table_of_the_gallerys_own_photos_is_the_gallery_without_each_query():
    """``leave_out``: each query's row against brute force, the table of the gallery with its own photo removed."""
    rng = np.random.default_rng(2)
    ids = np.array(["a", "a", "b", "c", "c", "c", "d"])
    own = np.array([0, 3, 5, -1])  # queries: gallery photos 0, 3 and 5, and a new photo
    kind = KindEvidence(rng.random((4, 7)).astype(np.float32), rng.random((4, 7)).astype(np.float32) * 5,
                        rng.integers(0, 9, (4, 7)).astype(np.int32))
    for q, g in enumerate(own):  # what a match leaving the photo out gives its own column: the highest, to be ignored
        if g >= 0:
            kind.scores[q, g], kind.votes[q, g] = 1.0, 9.0
    run = rng.random((4, 7)).astype(np.float32)
    pairs = pairs_of([np.array([1, 2]), np.array([4, 6]), np.array([0, 3, 4]), np.array([0, 5])])
    rows = pair_table(pairs, [kind], [run], ids, leave_out=own, photos=False)
    assert rows.shape == (len(pairs), len(column_names(["k"], ["r"], photos=False)))
    for r, (q, g) in enumerate(pairs.tolist()):
        keep = np.flatnonzero(np.arange(7) != own[q])
        alone = KindEvidence(kind.scores[q:q + 1, keep], kind.votes[q:q + 1, keep], kind.inliers[q:q + 1, keep])
        want = pair_table(np.array([[0, int(np.flatnonzero(keep == g)[0])]]), [alone], [run[q:q + 1, keep]], ids[keep])
        np.testing.assert_allclose(rows[r], want[0, :-1], rtol=1e-6)  # all but log_photos
    with pytest.raises(ValueError, match="its own photo"):
        pair_table(np.array([[1, 3]]), [kind], [run], ids, leave_out=own, photos=False)
    with pytest.raises(ValueError, match="would tell the label"):  # the query's own whale is one photo short there
        pair_table(pairs, [kind], [run], ids, leave_out=own)


def test_a_check_fitted_without_cross_fitting_fits_once():
    rng = np.random.default_rng(0)
    rows, same = rng.random((60, 2)), np.arange(60) % 3 == 0
    check = JointCheck(rounds=5, folds=3).fit(rows, same, np.arange(60) // 4, cross_fit=False)
    assert not check.out_of_fold.any() and check.predict(rows).shape == (60,)


def test_the_checks_validation_scores_come_from_trees_that_never_saw_their_query():
    """Labels that are noise, one per query: trees fitted on every row learn them, the cross-fitted ones cannot."""
    rng = np.random.default_rng(0)
    query = np.repeat(np.arange(300), 8)
    rows = np.repeat(rng.random((300, 3)), 8, axis=0) + rng.normal(0, 1e-3, (2400, 3))
    same = np.repeat(rng.random(300) < 0.3, 8)
    check = JointCheck(rounds=200, leaf_nodes=31, learning_rate=0.3, folds=5).fit(rows, same, query)

    def auc(p):
        from sklearn.metrics import roc_auc_score

        return roc_auc_score(same, p)

    assert auc(check.predict(rows)) > 0.95
    assert abs(auc(check.out_of_fold) - 0.5) < 0.1
    assert check.pairs == (int(same.sum()), int((~same).sum()))
    # another table of the same queries (one row each here) is predicted by the trees that never saw its query
    np.testing.assert_allclose(check.cross_predict(rows, same, query, rows[::8], query[::8]), check.out_of_fold[::8])
    with pytest.raises(ValueError, match="same-individual and other pairs"):
        JointCheck().fit(rows, np.zeros(len(rows), bool), query)


def test_aggregation_to_individuals_max_and_noisy_or():
    ids = np.array(["a", "a", "b", "new_whale"])
    pairs = np.array([[0, 0], [0, 1], [0, 2], [1, 1]])
    p = np.array([0.5, 0.4, 0.3, 0.9])
    fallback = np.full((2, 4), 0.5, np.float32)
    best = identification_scores(pairs, p, ids, fallback, "max")
    np.testing.assert_allclose(best[0, :3], [0.5, 0.5, 0.3])
    noisy = identification_scores(pairs, p, ids, fallback, "noisy_or")
    np.testing.assert_allclose(noisy[0, :3], [1 - 0.5 * 0.6, 1 - 0.5 * 0.6, 0.3], rtol=1e-6)
    for out in (best, noisy):  # what no source shortlisted stays below every shortlisted pair
        assert out[1, 0] == pytest.approx(0.5 * FLOOR) and out[1, 1] == pytest.approx(0.9)
        assert out[0, 3] < FLOOR


def test_a_trained_run_of_other_data_is_refused_by_name(data, tmp_path, capsys):
    from whale.inference.__main__ import main

    fold, _, _ = split_sets(data)
    other = fake_run(tmp_path / "other", data, val_queries=[f"x{i}.jpg" for i in range(len(fold.val.names))])
    with pytest.raises(DataError, match=r"val\.npz: --with-run .*other scored other data: its queries are not"):
        run_scores(other, "val", fold.val.names, fold.gallery.names, 0)
    rc = main(["--matcher", "joint", "--config", str(joint_config(tmp_path)), "--with-run", str(other), "--data",
               str(data), "--fold", "0", "--out", str(tmp_path / "out"), "--quiet", "--workers", "1"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and str(other) in err and "scored other data" in err
    assert not (tmp_path / "out").exists()


def test_a_run_trained_on_other_photos_under_the_same_names_is_refused_by_its_bytes(data, tmp_path, capsys):
    """A split drawn again names its photos alike: the scores' names match, the run's record of the bytes does not."""
    import json

    from whale.data.fingerprint import DATA_IMAGES, image_hashes
    from whale.identify.sources import TrainedRun, check_photo_bytes
    from whale.inference.__main__ import main

    hashes = image_hashes(data)
    run = fake_run(tmp_path / "run", data)
    (run / DATA_IMAGES).write_text(json.dumps(hashes))
    check_photo_bytes([TrainedRun(run, run, str(run))], data)  # its own data: accepted
    other = fake_run(tmp_path / "other", data)
    drawn = sorted(hashes)[1]
    (other / DATA_IMAGES).write_text(json.dumps({**hashes, drawn: hashes[drawn][:2] + ["0" * 32]}))
    for source in (TrainedRun(other, other, str(other)), TrainedRun(run, other, f"{run}:{other}")):  # RUN, RUN:ALL
        with pytest.raises(DataError, match=rf"{DATA_IMAGES}: --with-run .*other was trained on other photos under "
                                            rf"the names of .*: 1 images differ in bytes \(e\.g\. {drawn}\)"):
            check_photo_bytes([source], data)
    rc = main(["--matcher", "joint", "--config", str(joint_config(tmp_path)), "--with-run", str(other), "--data",
               str(data), "--fold", "0", "--out", str(tmp_path / "out"), "--quiet", "--workers", "1"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and str(other / DATA_IMAGES) in err and drawn in err
    assert not (tmp_path / "out").exists()


def test_score_runs_record_their_photos_so_runs_of_other_photos_under_the_same_names_are_refused(data, tmp_path,
                                                                                                   capsys):
    """Keypoint score runs record the bytes they scored: one of a copy of the data with a photo changed (its names
    alike) is refused beside a run of the data, by ``whale ensemble`` and by the joint's ``--with-run``; a score file
    written alone into a run's folder, whose record the ensemble reads for it, is refused when the record differs."""
    import cv2

    from whale.ensemble.cli import main as ensemble_main
    from whale.ensemble.identity import check_same_photos
    from whale.identify.sources import TrainedRun, check_photo_bytes
    from whale.inference.__main__ import main
    from whale.inference.scorefile import file_photos

    other = tmp_path / "other"
    shutil.copytree(data, other)
    photo = sorted((other / "train").iterdir())[0]
    cv2.imwrite(str(photo), cv2.flip(cv2.imread(str(photo)), 1))
    joint_config(tmp_path)
    for name, folder in (("a", data), ("b", other)):
        assert main(["--matcher", "keypoints", "--config", str(tmp_path / f"{name}.yaml"), "--data", str(folder),
                     "--fold", "0", "--out", str(tmp_path / name), "--quiet", "--workers", "1"]) == 0
    check_photo_bytes([TrainedRun(tmp_path / "a", tmp_path / "a", "a")], data)  # its own data: accepted
    with pytest.raises(DataError, match=rf"b was scored on other photos under the names of .*: 1 images differ in "
                                        rf"bytes \(e\.g\. train/{photo.name}\); score it on this folder"):
        check_photo_bytes([TrainedRun(tmp_path / "b", tmp_path / "b", "b")], data)
    capsys.readouterr()
    assert ensemble_main([str(tmp_path / "a"), str(tmp_path / "b"), "--tune", "--out", str(tmp_path / "s.csv")]) == 2
    err = capsys.readouterr().err
    assert f"its run used other photos than {tmp_path / 'a'}" in err and f"train/{photo.name}" in err
    assert not (tmp_path / "s.csv").exists()
    # a score file written alone records nothing: beside a record of other photos it is refused, beside its own written
    single = ["--matcher", "keypoints", "--config", str(tmp_path / "a.yaml"), "--quiet", "--workers", "1"]
    assert main(single + ["--data", str(other), "--out", str(tmp_path / "a" / "alone.npz")]) == 2
    assert (f"{tmp_path / 'a' / 'data_images.json'} records other photos under the names of {other}'s (1 images "
            f"differ in bytes, e.g. train/{photo.name})") in capsys.readouterr().err
    assert not (tmp_path / "a" / "alone.npz").exists()
    assert main(single + ["--data", str(data), "--out", str(tmp_path / "a" / "alone.npz")]) == 0
    assert file_photos(tmp_path / "a" / "alone.npz") == {}  # the folder's record is its
    # written alone where nothing records its photos, the file holds them: the ensemble compares them too
    for name, folder in (("c", data), ("d", other)):
        (tmp_path / name).mkdir()
        assert main(single + ["--data", str(folder), "--out", str(tmp_path / name / "alone.npz")]) == 0
    assert file_photos(tmp_path / "d" / "alone.npz")[f"train/{photo.name}"] != \
        file_photos(tmp_path / "c" / "alone.npz")[f"train/{photo.name}"]
    check_same_photos([tmp_path / "a" / "test.npz", tmp_path / "c" / "alone.npz"])
    with pytest.raises(DataError, match=rf"d/alone\.npz: its run used other photos than .*a/test\.npz's under the "
                                        rf"same names \(1 images differ in bytes, e\.g\. train/{photo.name}\)"):
        check_same_photos([tmp_path / "a" / "test.npz", tmp_path / "d" / "alone.npz"])


def test_a_kept_pair_table_is_verified_again_when_the_photos_under_its_names_change(data, tmp_path, capsys):
    """The joint's kept pair tables name the data's photo bytes: a rerun on the same photos reads them back, one with
    a photo changed under its name verifies its pairs again."""
    import cv2

    from whale.inference.__main__ import main

    other = tmp_path / "other"
    shutil.copytree(data, other)
    run = fake_run(tmp_path / "lite0", other)
    argv = ["--matcher", "joint", "--config", str(joint_config(tmp_path)), "--with-run", str(run), "--data",
            str(other), "--fold", "0", "--out", str(tmp_path / "out"), "--workers", "1"]
    assert main(argv) == 0
    assert "read back" not in capsys.readouterr().out
    assert main(argv) == 0
    assert capsys.readouterr().out.count("verified by an earlier run of these settings read back") == 2
    photo = sorted((other / "train").iterdir())[0]
    cv2.imwrite(str(photo), cv2.flip(cv2.imread(str(photo)), 1))
    assert main(argv) == 0
    assert "verified by an earlier run" not in capsys.readouterr().out
    assert main(argv) == 0
    assert capsys.readouterr().out.count("verified by an earlier run of these settings read back") == 2


def test_a_folder_of_two_runs_is_refused_and_a_full_data_run_is_checked(data, tmp_path, capsys):
    from whale.identify.sources import check_runs
    from whale.inference.__main__ import main

    def stamp(run_id, fold, config="c1"):
        return {"run_id": run_id, "fold": fold, "config_hash": config}

    mixed = fake_run(tmp_path / "mixed", data, identity=stamp("r", 0), test_identity=stamp("all", -1))
    with pytest.raises(DataError, match=r"val\.npz was written by run r \(fold 0\), .*test\.npz by run all "
                                        r"\(fold -1\).*--with-run RUN:ALL"):
        check_runs([mixed])
    rc = main(["--matcher", "joint", "--config", str(joint_config(tmp_path)), "--with-run", str(mixed), "--data",
               str(data), "--fold", "0", "--out", str(tmp_path / "out"), "--quiet", "--workers", "1"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and str(mixed) in err and not (tmp_path / "out").exists()
    run = fake_run(tmp_path / "run", data, identity=stamp("r", 0), test_identity=stamp("r", 0))
    full = fake_run(tmp_path / "all", data, test_identity=stamp("all", -1))
    [paired] = check_runs([f"{run}:{full}"])
    assert paired.full and paired.path("val") == run and paired.path("test") == full
    assert not check_runs([run])[0].full
    for other, said in ((fake_run(tmp_path / "f0", data, test_identity=stamp("f", 0)), "is fold 0's run"),
                        (fake_run(tmp_path / "c2", data, test_identity=stamp("c", -1, "c2")), "of config c2"),
                        (fake_run(tmp_path / "none", data), "records no fold")):
        with pytest.raises(DataError, match=f"--with-run {run}:{other}: .*test\\.npz {said}"):
            check_runs([f"{run}:{other}"])


def test_joint_needs_a_fold_and_a_config(data, tmp_path, capsys):
    from whale.inference.__main__ import main

    with pytest.raises(SystemExit):
        main(["--matcher", "joint", "--data", str(data), "--out", str(tmp_path / "o")])
    assert "--matcher joint needs --config" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--matcher", "keypoints", "--with-run", "r", "--data", str(data), "--out", str(tmp_path / "o")])
    assert "--with-run goes with --matcher joint" in capsys.readouterr().err


def test_the_joint_command_writes_score_files_that_ensemble_and_submission_read(data, tmp_path, monkeypatch, capsys):
    from whale.ensemble.cli import main as ensemble_main
    from whale.inference.__main__ import main
    from whale.inference.scorefile import load_score_file
    from whale.submission import check_submission

    from whale.data.fingerprint import DATA_IMAGES, image_hashes, read_data_images

    run = fake_run(tmp_path / "lite0", data)
    (run / DATA_IMAGES).write_text(json.dumps(image_hashes(data)))  # as `whale train` records its photos
    out = tmp_path / "joint"
    assert main(["--matcher", "joint", "--config", str(joint_config(tmp_path, "aggregate: noisy_or\n")), "--with-run",
                 str(run), "--data", str(data), "--fold", "0", "--out", str(out), "--quiet", "--workers", "1"]) == 0
    val = load_score_file(out / "val.npz", need_query_ids=True)
    test = load_score_file(out / "test.npz")
    fold, known, tst = split_sets(data)
    assert list(val.query) == list(fold.val.names) and list(test.gallery) == list(known.names)
    assert val.identity["matcher"] == "joint" and val.identity["cross_fitted"] == 3
    assert ((val.scores > FLOOR) | (val.scores == 0)).any() and (val.scores < 1).all()
    meta = json.loads((out / "run.json").read_text())
    assert meta["matcher"] == "joint" and sum(meta["check_pairs"]) > 0 and meta["with_runs"] == [str(run)]
    for kind in ("a", "b"):  # each kind's own scores of the same pairs: the late fusion measured beside it
        assert (out / "kinds" / kind / "val.npz").is_file() and (out / "kinds" / kind / "test.npz").is_file()
    photos = {n: h[2] for n, h in image_hashes(data).items()}  # the bytes it scored, as the checks read them
    for folder in (out, out / "kinds" / "a", out / "kinds" / "b"):
        assert {n: h[2] for n, h in read_data_images(folder).items()} == photos
    sub = tmp_path / "s.csv"
    assert ensemble_main([str(out), "--tune", "--out", str(sub)]) == 0
    assert check_submission(sub) == []
    assert len(sub.read_text().splitlines()) == len(tst.names) + 1
    assert ensemble_main([str(out / "kinds" / "a"), str(out / "kinds" / "b"), "--tune", "--out",
                          str(tmp_path / "late.csv")]) == 0
    # the kept pair tables: the screen of checks and aggregations on validation reads them back
    from benchmarks.flukes import joint_screen
    from whale.identify.check import load_table

    table = load_table(out / "pairs_val.npz")
    assert table.rows.shape == (len(table.pairs), len(table.columns)) and table.fallback.shape == val.scores.shape
    assert table.columns[0] == "a.p" and f"run0:{run.name}.gap" in table.columns and len(table.key) == 16
    table_test_key = load_table(out / "pairs_test.npz").key
    rows_ = joint_screen.screen(out)
    assert {"joint, max", "joint, noisy_or", "without a", "without b"} <= set(rows_)
    assert all(0 <= r["known_ids_only"] <= 1 and 0 <= r["unfound_share"] <= 1 for r in rows_.values())
    # the same check on the validation thinned to one gallery photo per known query, with the runs it writes
    from benchmarks.flukes import joint_thin

    thin = joint_thin.screen(out, share=1.0, write=tmp_path / "thin", draws=2)
    assert {"fitted on validation", "fitted on thinned", "fitted on both", "fitted on thinned, the photo count too",
            "fitted on thinned, each individual's columns", "fitted on 2 thinned draws, each individual's columns",
            "a alone", "b alone"} <= set(thin)
    assert all(r["top5"] <= 1 and set(r) == set(thin["a alone"]) for r in thin.values())
    thinned_val = load_score_file(tmp_path / "thin" / "joint_thinned" / "val.npz")
    assert thinned_val.scores.shape == val.scores.shape and (tmp_path / "thin" / "a" / "val.npz").is_file()
    # where the known whales are lost, read from the same tables: no source finds what the merged shortlist lacks
    from benchmarks.flukes import joint_recall

    found = joint_recall.recall(out, data, depths=(1, 5))["val"]
    sources = [k for k in found if "(best " in k and "its own scores" not in k]
    assert len(sources) == 3 and f"run0:{run.name} (best 5, its own scores)" in found
    assert all(0 <= found[k] <= found["merged shortlist"] <= 1 for k in sources)
    assert found["joint: first"] <= found["joint: among the five ids"] and found["known queries"] > 0
    # where new_whale goes, by one threshold or each query's expected AP, read from the same score files
    from benchmarks.flukes import direct_pairs, new_decision
    from whale.identify.config import load_joint_config

    rule = new_decision.one_seed(out, data, 0.276, views=False)
    assert all(0 <= v <= 1 for v in rule.values())
    assert max(rule["threshold: test"], rule["expected AP: test"]) <= rule["oracle: test"]
    # the shortlisted pairs of the sampled queries matched directly, each pair counted once
    direct = direct_pairs.one_seed(out, data, load_joint_config(tmp_path / "joint.yaml").kinds[:1], 4, None)["a"]
    assert direct["pairs"] > 0 and sum(g["pairs"] for g in direct["groups"].values()) == direct["pairs"]
    assert all(0 <= g["share >= 15"] <= 1 and g["median"] <= g["p90"] for g in direct["groups"].values())
    # a run that changes only the aggregation verifies nothing again: the kept tables serve it
    from whale.keypoints.matcher import KeypointMatcher

    def never(*args, **kwargs):
        raise AssertionError("verified again")

    argv = ["--matcher", "joint", "--config", str(tmp_path / "joint.yaml"), "--with-run", str(run), "--data", str(data),
            "--fold", "0", "--out", str(out), "--quiet", "--workers", "1"]
    capsys.readouterr()
    with monkeypatch.context() as m:
        m.setattr(KeypointMatcher, "match", never)
        assert main(argv + ["--set", "aggregate=max"]) == 0
    assert capsys.readouterr().out.count("read back from") == 2
    assert load_table(out / "pairs_test.npz").key == table_test_key
    # killed before the test split's table was kept: the same command verifies the test split alone
    (out / "pairs_test.npz").unlink()
    assert main(argv) == 0
    said = capsys.readouterr().out
    assert said.count("read back from") == 1 and "joint test:" in said and load_table(out / "pairs_test.npz").key == \
        table_test_key
    # the test scores of a run trained on every known photo (RUN:ALL): the validation table serves, the test's is new
    full = fake_run(tmp_path / "all", data, test_identity={"run_id": "all", "fold": -1})
    assert main(argv[:5] + [f"{run}:{full}"] + argv[6:]) == 0
    said = capsys.readouterr().out
    assert said.count("read back from") == 1 and "joint test:" in said
    assert load_table(out / "pairs_test.npz").key != table_test_key
    assert json.loads((out / "run.json").read_text())["test_runs"] == [str(full)]
    assert load_score_file(out / "test.npz").identity["with_runs"] == [f"{run}:{full}"]
    # a keypoint run into the joint run's folder is refused
    assert main(["--matcher", "keypoints", "--data", str(data), "--out", str(out), "--quiet", "--workers", "1"]) == 2


def test_the_check_never_fits_the_individual_s_photo_count():
    """A validation query's individual always keeps two or more gallery photos (whale.data.folds), a test query's
    may keep one: the count is kept in the table but the check does not learn from it."""
    from whale.identify.check import NOT_FITTED, fitted_columns

    names = column_names(["k"], ["r"])
    used = [names[i] for i in fitted_columns(names)]
    assert "log_photos" in names and "log_photos" in NOT_FITTED
    assert used == [n for n in names if n != "log_photos"] and "r.score" in used and "k.p" in used


def test_each_individual_s_columns_match_brute_force():
    """check.columns: individuals (whale/identify/check.py): per (query, individual) of the shortlist, its verified
    and shortlisted photos, the verified share of its gallery photos, each kind's sum of p, the pair's gap to the
    query's best p and the individual's margin over the query's other individuals; a new_whale photo its own."""
    from whale.identify.check import check_rows, individual_columns

    rng = np.random.default_rng(4)
    ids = np.array(["a", "a", "a", "b", "b", "c", "new_whale", "new_whale"])
    kinds = [KindEvidence(rng.random((3, 8)).astype(np.float32), rng.random((3, 8)).astype(np.float32),
                          (rng.random((3, 8)) < 0.5).astype(np.float32) * 9) for _ in range(2)]
    pairs = pairs_of([np.array([0, 1, 3, 6, 7]), np.array([2, 4, 5]), np.array([0])])
    columns = column_names(["k", "x"], ["r"])
    rows = pair_table(pairs, kinds, [rng.random((3, 8)).astype(np.float32)], ids)
    extra, names = individual_columns(pairs, rows, columns, ids)
    assert names == ["id.verified", "id.shortlisted", "id.verified_share", "k.id_sum_p", "k.gap", "k.id_margin",
                     "x.id_sum_p", "x.gap", "x.id_margin"]
    col = {n: extra[:, j] for j, n in enumerate(names)}
    owner = [f"new{g}" if ids[g] == "new_whale" else ids[g] for g in range(8)]
    for r, (q, g) in enumerate(pairs.tolist()):
        mine = [int(h) for qq, h in pairs if qq == q and owner[h] == owner[g]]
        verified = sum(max(k.inliers[q, h] for k in kinds) > 0 for h in mine)
        assert col["id.verified"][r] == verified and col["id.shortlisted"][r] == len(mine)
        assert col["id.verified_share"][r] == pytest.approx(verified / sum(o == owner[g] for o in owner))
        for name, k in zip("kx", kinds):
            shortlisted = [int(h) for qq, h in pairs if qq == q]
            assert col[f"{name}.id_sum_p"][r] == pytest.approx(k.scores[q, mine].sum())
            assert col[f"{name}.gap"][r] == pytest.approx(k.scores[q, shortlisted].max() - k.scores[q, g])
            best = {o: (k.scores[q, [h for h in range(8) if owner[h] == o]].max() if o[:3] != "new" else
                        k.scores[q, int(o[3:])]) for o in {owner[h] for h in shortlisted}}
            others = [v for o, v in best.items() if o != owner[g]]
            assert col[f"{name}.id_margin"][r] == pytest.approx(best[owner[g]] - max(others) if others else 0.0)
    assert check_rows(pairs, rows, columns, ids).shape == (len(pairs), len(columns) - 1)  # pairs: no log_photos
    both = check_rows(pairs, rows, columns, ids, "individuals")
    np.testing.assert_array_equal(both, np.concatenate([rows, extra], axis=1))


def test_the_individuals_columns_are_fitted_only_on_a_thinned_validation():
    from whale.core.errors import ConfigError
    from whale.identify.config import load_joint_config

    with pytest.raises(ConfigError, match="check.columns: individuals needs check.validation: thinned"):
        load_joint_config("configs/joint.yaml", {"check.columns": "individuals"})
    cfg = load_joint_config("configs/joint.yaml", {"check.columns": "individuals", "check.validation": "thinned"})
    assert cfg.columns == "individuals" and cfg.to_dict()["check"]["columns"] == "individuals"
    assert "columns" not in load_joint_config("configs/joint.yaml").to_dict()["check"]  # the shipped runs' hash kept


def test_joint_recall_reads_each_source_from_the_pair_table():
    """benchmarks/flukes/joint_recall.py: a source's candidates are the pairs within its shortlist depth (a vote
    needed for a kind's), the merged shortlist every pair; a run's deeper recall comes from its full scores."""
    from benchmarks.flukes.joint_recall import depth_recall, missed_evidence, source_recall, top_ids_recall

    ids, truth = np.array(["a", "a", "b", "c"]), np.array(["a", "b", "c"])
    columns = column_names(["k"], ["r0"])
    pairs = np.array([[0, 1], [0, 2], [1, 0], [1, 2], [2, 3]])
    rows = np.zeros((len(pairs), len(columns)), np.float32)
    at = {c: i for i, c in enumerate(columns)}
    # (vote rank, votes, run rank, run score) of each pair; depth 2 for both sources
    for r, (vr, v, rr, sc) in enumerate([(0, 5, 5, 0.1), (1, 3, 0, 0.9), (0, 4, 1, 0.3), (2, 1, 1, 0.5),
                                         (0, 0, 9, 0.2)]):
        cells = [at["k.vote_rank"], at["k.log_votes"], at["r0.rank"], at["r0.score"]]
        rows[r, cells] = np.log1p([vr, v, rr]).tolist() + [sc]
    found = source_recall(pairs, rows, columns, ids, truth, n_votes=2, n_runs=2)
    assert found["k votes (best 2)"].tolist() == [True, False, False]  # q1's b is at vote rank 2; q2's c had no vote
    assert found["r0 (best 2)"].tolist() == [False, True, False]
    assert found["merged shortlist"].tolist() == [True, True, True]
    # q0 (a) and q1 (b) shortlisted but not among the five: q0's own photo verified (3 inliers), q1's not
    rows[:, at["k.inliers"]] = [3, 9, 4, 0, 5]
    missed, medians = missed_evidence(pairs, rows, columns, ids, truth, in_five=np.array([False, False, True]))
    assert [v.tolist() for v in missed.values()] == [[True, False, False], [False, True, False]]
    assert medians == {"k": (1.5, 6.5)}  # own photos' most inliers 3 and 0, the other individuals' 9 and 4
    hits = depth_recall(np.array([[0.1, 0.9, 0.5, 0.2]]), ids, ["b"], depths=(1, 2))
    assert hits[1].tolist() == [False] and hits[2].tolist() == [True]
    assert top_ids_recall(np.array([[0.1, 0.9, 0.5, 0.2]]), ids, ["b"], 1).tolist() == [False]
    assert top_ids_recall(np.array([[0.1, 0.9, 0.5, 0.2]]), ids, ["b"], 2).tolist() == [True]


def test_a_thinned_validation_is_the_table_without_the_hidden_photos():
    """whale/identify/thin.py (benchmarks/flukes/joint_thin.py's): a thinned query's rows are those of the gallery
    without its hidden photos (every rank and maximum again, brute force per query); the other queries' rows are
    untouched."""
    from whale.identify.thin import hidden_photos, mirror_share, thinned
    from whale.identify.check import PairTable

    rng = np.random.default_rng(3)
    ids = np.array(["a", "a", "a", "b", "b", "c", "new_whale"])
    truth = np.array(["a", "b", "c", "new_whale"])
    kind = KindEvidence(rng.random((4, 7)).astype(np.float32), rng.random((4, 7)).astype(np.float32) * 5,
                        rng.integers(0, 9, (4, 7)).astype(np.float32))
    run = rng.random((4, 7)).astype(np.float32)
    pairs = pairs_of([np.arange(7)] * 4)  # every pair shortlisted: the vote ranks are known whole
    columns = column_names(["k"], ["r"])
    table = PairTable(pairs, pair_table(pairs, [kind], [run], ids), np.full((4, 7), 0.5, np.float32), columns, "")
    hidden = {0: np.array([0, 2]), 1: np.array([4])}
    new_pairs, rows, fallback = thinned(table, hidden, {"k": kind.scores}, [run], ids)
    assert len(new_pairs) == len(pairs) - 3 and (fallback[0, [0, 2]] == 0).all() and fallback[2].min() == 0.5
    for r, (q, g) in enumerate(new_pairs.tolist()):
        keep = np.setdiff1d(np.arange(7), hidden.get(q, []))
        alone = KindEvidence(kind.scores[q:q + 1, keep], kind.votes[q:q + 1, keep], kind.inliers[q:q + 1, keep])
        want = pair_table(np.array([[0, int(np.flatnonzero(keep == g)[0])]]), [alone], [run[q:q + 1, keep]], ids[keep])
        np.testing.assert_allclose(rows[r], want[0], rtol=1e-6)  # log_photos too: the hidden photos not counted
    # each thinned known query keeps one photo of its individual; new whales and one-photo individuals never
    drawn = hidden_photos(ids, truth, 1.0, seed=0)
    assert set(drawn) == {0, 1} and len(drawn[0]) == 2 and len(drawn[1]) == 1
    assert all((ids[h] == truth[q]).all() for q, h in drawn.items())
    assert hidden_photos(ids, truth, 0.0, seed=0) == {}
    assert mirror_share(ids) == pytest.approx(0.5)  # a (3 photos) and b (2): one of the two has exactly two


def test_a_check_fitted_on_the_thinned_validation_writes_the_views_the_ensemble_fuses(data, tmp_path):
    """``check.validation: thinned``: the check fitted on the validation thinned as the test is drawn (the hidden
    photos out of the joint's own val.npz), and each kind's and trained run's thinned view under OUT/thinned (the
    same photos hidden, the test file as it was), so ``whale ensemble`` fuses them with the joint on one validation;
    then ``check.columns: individuals`` on the same pair tables and draw."""
    from whale.ensemble.cli import main as ensemble_main
    from whale.inference.__main__ import main
    from whale.inference.scorefile import load_score_file
    from whale.submission import check_submission

    run = fake_run(tmp_path / "lite0", data)
    argv = ["--matcher", "joint", "--config", str(joint_config(tmp_path)), "--with-run", str(run), "--data", str(data),
            "--fold", "0", "--quiet", "--workers", "1"]
    assert main(argv + ["--out", str(tmp_path / "plain")]) == 0
    out = tmp_path / "thin"
    assert main(argv + ["--out", str(out), "--set", "check.validation=thinned"]) == 0
    meta = json.loads((out / "run.json").read_text())
    fold, known, _ = split_sets(data)
    hidden = json.loads((out / "thinned" / "hidden.json").read_text())["hidden"]
    assert meta["thinned"]["queries"] == len(hidden) > 0 and meta["thinned"]["views"] == ["a", "b", "lite0"]
    assert meta["config_hash"] != json.loads((tmp_path / "plain" / "run.json").read_text())["config_hash"]
    truth = dict(zip(fold.val.names, fold.val.ids))
    for q, photos in hidden.items():  # each thinned query keeps exactly one gallery photo of its individual
        own = [g for g, i in zip(fold.gallery.names, fold.gallery.ids) if i == truth[q]]
        assert set(photos) < set(own) and len(own) - len(photos) == 1
    val = load_score_file(out / "val.npz")
    col = {g: i for i, g in enumerate(val.gallery)}
    row = {q: i for i, q in enumerate(val.query)}
    assert all(val.scores[row[q], col[g]] == 0 for q, photos in hidden.items() for g in photos)
    assert not np.array_equal(load_score_file(out / "test.npz").scores,
                              load_score_file(tmp_path / "plain" / "test.npz").scores)
    source = load_score_file(run / "scores" / "val.npz")
    view = load_score_file(out / "thinned" / "lite0" / "val.npz", need_query_ids=True)
    assert view.identity == source.identity and list(view.query_ids) == list(source.query_ids)
    for q, i in row.items():
        kept = [j for j, g in enumerate(view.gallery) if g not in hidden.get(q, ())]
        np.testing.assert_array_equal(view.scores[i, kept], source.scores[i, kept])
        assert all(view.scores[i, col[g]] == source.scores[i].min() for g in hidden.get(q, ()))
    assert (out / "thinned" / "lite0" / "test.npz").read_bytes() == (run / "scores" / "test.npz").read_bytes()
    assert (out / "thinned" / "a" / "test.npz").read_bytes() == (out / "kinds" / "a" / "test.npz").read_bytes()
    sub = tmp_path / "s.csv"
    assert ensemble_main([str(out / "thinned" / "a"), str(out / "thinned" / "b"), str(out / "thinned" / "lite0"),
                          str(out), "--tune", "--fusion", "logodds", "--out", str(sub)]) == 0
    assert check_submission(sub) == []
    # check.columns: individuals on the same pair tables (read back: nothing verified again), the same hidden photos
    both = tmp_path / "individuals"
    both.mkdir()
    for name in ("pairs_val.npz", "pairs_test.npz"):
        shutil.copy2(out / name, both / name)
    shutil.copytree(out / "kinds", both / "kinds")
    individuals = ["--set", "check.validation=thinned", "--set", "check.columns=individuals"]
    assert main(argv + ["--out", str(both)] + individuals) == 0
    assert json.loads((both / "thinned" / "hidden.json").read_text())["hidden"] == hidden
    assert "columns: individuals" in (both / "joint.yaml").read_text()
    assert json.loads((both / "run.json").read_text())["config_hash"] != meta["config_hash"]
    again = load_score_file(both / "val.npz")
    assert all(again.scores[row[q], col[g]] == 0 for q, photos in hidden.items() for g in photos)
    assert not np.array_equal(again.scores, val.scores)
    assert ensemble_main([str(both), "--tune", "--fusion", "logodds", "--out", str(tmp_path / "i.csv")]) == 0
    assert check_submission(tmp_path / "i.csv") == []


def test_the_centre_columns_leave_out_what_the_test_never_has():
    """benchmarks/flukes/centre_columns.py: a pair's individual's centre cosine, its rank among the centres the query
    sees and the gap to the query's best; missing (NaN) for an individual without a centre and for a thinned query's
    own, whose centre is also out of that query's ranks."""
    from benchmarks.flukes.centre_columns import centre_columns

    ids = np.array(["a", "a", "b", "c"])  # c: one photo, no centre
    classes = np.array(["a", "b"])
    cos = np.array([[0.9, 0.5], [0.2, 0.7]], np.float32)
    pairs = np.array([[0, 0], [0, 2], [0, 3], [1, 1], [1, 2]])
    cols = centre_columns(pairs, ids, cos, classes)
    np.testing.assert_allclose(cols[:2, 0], [0.9, 0.5])
    np.testing.assert_allclose(cols[:2, 1], np.log1p([0, 1]))
    np.testing.assert_allclose(cols[:2, 2], [0.0, 0.4], atol=1e-6)
    assert np.isnan(cols[2]).all()
    np.testing.assert_allclose(cols[3:, 0], [0.2, 0.7])
    left = centre_columns(pairs, ids, cos, classes, {1: "b"})  # query 1 thinned: its own whale b's centre unseen
    assert np.isnan(left[4]).all() and left[3, 1] == 0 and left[3, 2] == 0
    np.testing.assert_array_equal(left[:3], cols[:3])



def test_the_outline_columns_leave_out_hidden_photos_and_photos_without_a_curve():
    """benchmarks/flukes/edge_columns.py: a pair's outline cosine, its rank among the query's visible photos and the
    gap to the query's best; missing (NaN) where either photo has no curve, a hidden photo out of the ranks."""
    from benchmarks.flukes.edge_columns import edge_columns, similarities

    eq = np.array([[1.0, 0.0], [0.0, 1.0]], np.float32)
    eg = np.array([[1.0, 0.0], [0.6, 0.8], [0.0, 1.0], [0.8, 0.6]], np.float32)
    s = similarities(eq, eg, np.array([True, True]), np.array([True, True, True, False]), {1: np.array([2])})
    pairs = np.array([[0, 0], [0, 1], [0, 3], [1, 1], [1, 0]])
    cols = edge_columns(pairs, s)
    np.testing.assert_allclose(cols[:2, 0], [1.0, 0.6])
    np.testing.assert_allclose(cols[:2, 1], np.log1p([0, 1]))
    np.testing.assert_allclose(cols[:2, 2], [0.0, 0.4], atol=1e-6)
    assert np.isnan(cols[2]).all()  # photo 3 has no curve
    # query 1's best photo (2) is hidden from it: photo 1 ranks first and is its best
    np.testing.assert_allclose(cols[3], [0.8, 0.0, 0.0], atol=1e-6)
    np.testing.assert_allclose(cols[4], [0.0, np.log1p(1), 0.8], atol=1e-6)
    none = similarities(eq, eg, np.array([False, True]), np.ones(4, bool))
    assert np.isnan(edge_columns(pairs[:1], none)).all()

def test_a_kept_table_takes_a_run_s_new_scores_in_its_run_columns_alone():
    """benchmarks/flukes/joint_refit.py: the same pairs with a trained run's columns computed from other scores, every
    other column as kept."""
    from benchmarks.flukes.joint_refit import with_run
    from whale.identify.check import PairTable

    rng = np.random.default_rng(5)
    ids = np.array(["a", "a", "b", "c", "new_whale"])
    kind = KindEvidence(rng.random((3, 5)).astype(np.float32), rng.random((3, 5)).astype(np.float32),
                        rng.integers(0, 9, (3, 5)).astype(np.float32))
    old, new = rng.random((3, 5)).astype(np.float32), rng.random((3, 5)).astype(np.float32)
    pairs = pairs_of([np.array([0, 2, 3]), np.array([1, 4]), np.array([0, 1, 2, 3])])
    columns = column_names(["k"], ["run0:net"])
    table = PairTable(pairs, pair_table(pairs, [kind], [old], ids), np.zeros((3, 5), np.float32), columns, "key")
    again = with_run(table, new, ids)
    np.testing.assert_array_equal(again.rows, pair_table(pairs, [kind], [new], ids))
    assert again.key == "key" and (table.rows == pair_table(pairs, [kind], [old], ids)).all()
