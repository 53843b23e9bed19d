"""Duplicate detection (perceptual hash) and pseudo-label rounds, on hand-made and planted data."""

import json

import numpy as np
import pandas as pd
import pytest

from whale import NEW_WHALE
from whale.core.errors import ConfigError


def _popcount(x: int) -> int:
    return bin(x).count("1")


def test_hamming_and_close_pairs_against_a_loop():
    from whale.duplicates import close_pairs, hamming

    rng = np.random.default_rng(0)
    a = rng.integers(0, 2**63, 40, dtype=np.uint64)
    a[5] = a[3] ^ np.uint64(0b1011)  # 3 bits from a[3]
    a[7] = a[3]
    b = rng.integers(0, 2**63, 9, dtype=np.uint64)
    b[2] = a[1] ^ np.uint64(1 << 62)
    d = hamming(a, b)
    assert d.tolist() == [[_popcount(int(x) ^ int(y)) for y in b] for x in a]
    i, j, dist = close_pairs(a, None, threshold=3)
    want = [(x, y) for x in range(40) for y in range(x + 1, 40) if _popcount(int(a[x]) ^ int(a[y])) <= 3]
    assert sorted(zip(i.tolist(), j.tolist())) == want and {(3, 5), (3, 7), (5, 7)} <= set(want)
    q, g, _ = close_pairs(b, a, threshold=1)
    assert list(zip(q.tolist(), g.tolist())) == [(2, 1)]
    with pytest.raises(ValueError, match="threshold"):
        close_pairs(a, None, threshold=65)


def test_phash_survives_reencoding_but_not_another_image():
    import cv2

    from whale.duplicates import hamming, phash

    rng = np.random.default_rng(1)
    img = cv2.GaussianBlur(rng.integers(0, 256, (120, 160, 3), dtype=np.uint8), (0, 0), 3)
    ok, buf = cv2.imencode(".jpg", np.clip(img.astype(int) + 8, 0, 255).astype(np.uint8), [cv2.IMWRITE_JPEG_QUALITY, 60])
    copy = cv2.imdecode(buf, cv2.IMREAD_UNCHANGED)
    other = cv2.GaussianBlur(rng.integers(0, 256, (120, 160, 3), dtype=np.uint8), (0, 0), 3)
    h = np.array([phash(img), phash(copy), phash(other), phash(img[:, :, :1])], dtype=np.uint64)
    d = hamming(h, h)
    assert d[0, 1] <= 4 and d[0, 2] > 12
    assert phash(cv2.cvtColor(img, cv2.COLOR_RGB2GRAY)) == h[0]


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    from whale.data.synth import generate

    return generate(tmp_path_factory.mktemp("dup") / "data", n_ids=12, seed=2, size=64, progress=False, duplicates=6)


def test_planted_duplicates_are_found_with_their_kinds(planted):
    from whale.data import load_competition
    from whale.duplicates import find_duplicates

    comp = load_competition(planted)
    dups = find_duplicates(comp, progress=False)
    plants = pd.read_csv(planted / "planted_duplicates.csv")
    assert sorted(plants["Kind"]) == ["conflict", "conflict", "test", "test", "train", "train"]
    pairs = {frozenset(p) for p in zip(dups.train_pairs["Image_a"], dups.train_pairs["Image_b"])}
    conflicts = {frozenset(p) for p in zip(*dups.train_pairs[dups.train_pairs["conflict"]][["Image_a", "Image_b"]].T.values)}
    label = dict(zip(comp.train["Image"], comp.train["Id"]))
    for row in plants.itertuples():
        if row.Kind == "test":
            hit = dups.test_pairs[dups.test_pairs["Test"] == row.Image]
            assert row.Of in set(hit["Image"]) and label[row.Of] in set(hit["Id"])
        else:
            assert frozenset((row.Image, row.Of)) in pairs
            assert (frozenset((row.Image, row.Of)) in conflicts) == (row.Kind == "conflict")
    # nothing else: the other sightings of a whale are new photos, far from each other
    assert len(dups.train_pairs) == 4 and len(dups.test_pairs) == 2


def _dups(train_pairs, test_pairs=()):
    from whale.duplicates import Duplicates

    tt = pd.DataFrame(train_pairs, columns=["Image_a", "Id_a", "Image_b", "Id_b"])
    tt["distance"], tt["conflict"] = 0, tt["Id_a"] != tt["Id_b"]
    te = pd.DataFrame(list(test_pairs), columns=["Test", "Image", "Id", "distance"])
    return Duplicates(tt, te)


def test_merge_labels_and_drop_from_validation_by_hand():
    from whale.duplicates import drop_from_validation, merge_labels

    train = pd.DataFrame({"Image": list("abcdefg"),
                          "Id": ["w_x", "w_x", "w_y", "w_z", NEW_WHALE, "w_q", NEW_WHALE]})
    dups = _dups([("a", "w_x", "c", "w_y"), ("c", "w_y", "d", "w_z"), ("e", NEW_WHALE, "f", "w_q")])
    merged = merge_labels(train, dups)
    # w_x has the most images: w_y and w_z (joined through c~d) become w_x; e takes f's id
    assert list(merged["Id"]) == ["w_x", "w_x", "w_x", "w_x", "w_q", "w_q", NEW_WHALE]
    assert list(train["Id"])[2] == "w_y"  # a copy
    dropped = drop_from_validation(train, dups)
    assert list(dropped["Origin"]) == ["train", "train", "duplicate", "duplicate", "train", "duplicate", "train"]


def test_answer_test_puts_the_duplicate_id_first():
    from whale.duplicates import answer_test

    dups = _dups([], [("t1", "a", "w_a", 3), ("t1", "b", "w_b", 1), ("t2", "c", NEW_WHALE, 0)])
    preds = [[NEW_WHALE, "w_c", "w_a", "w_b", "w_d"], [NEW_WHALE, "w_a", "w_b", "w_c", "w_d"]]
    out = answer_test(["t1", "t2"], preds, dups)
    assert out == [["w_b", NEW_WHALE, "w_c", "w_a", "w_d"], preds[1]]


def test_duplicates_cli_writes_a_folder_that_never_validates_on_copies(planted, tmp_path, capsys):
    from whale.data import assign_folds, load_competition
    from whale.duplicates import main

    assert main(["--data", str(planted), "--out", str(tmp_path / "new"), "--drop-val", "--merge-labels",
                 "--report", str(tmp_path / "dups.csv")]) == 0
    assert "train/train duplicate pairs: 4 (2 with conflicting labels)" in capsys.readouterr().out
    comp = load_competition(tmp_path / "new")
    assert (comp.train["Origin"] == "duplicate").sum() == 4
    folds = assign_folds(comp.train, seed=0)
    assert (folds[comp.train["Origin"] == "duplicate"] == -1).all()
    assert NEW_WHALE not in set(comp.train[comp.train["Origin"] == "duplicate"]["Id"])  # conflicts merged
    assert len(pd.read_csv(tmp_path / "dups.csv")) == 6
    assert main(["--data", str(planted), "--merge-labels"]) == 2  # no --out: refused


# ------------------------------------------------------------------------------- pseudo
def _scores(comp, run, rng, confident: dict):
    """Write run/scores/test.npz: random low scores, ``confident`` test image -> (train image, score)."""
    from whale.data import ImageSet
    from whale.inference.scorefile import write_scores

    known = ImageSet.known(comp)
    s = rng.uniform(0.0, 0.5, (len(comp.test_images), len(known))).astype(np.float32)
    for test, (image, score) in confident.items():
        s[comp.test_images.index(test), known.names.index(image)] = score
    write_scores(run / "scores" / "test.npz", s, comp.test_images, known.names, known.ids)


def test_pseudo_rounds_add_confident_test_images_once(planted, tmp_path):
    from whale.data import assign_folds, load_competition
    from whale.pseudo import main, read_rounds

    comp = load_competition(planted)
    known = comp.train[comp.train["Id"] != NEW_WHALE]
    t = comp.test_images
    picks = {t[0]: (known["Image"].iloc[0], 0.97), t[1]: (known["Image"].iloc[1], 0.92),
             t[2]: (known["Image"].iloc[2], 0.80)}
    _scores(comp, tmp_path / "r1", np.random.default_rng(0), picks)
    assert main(["--runs", str(tmp_path / "r1"), "--data", str(planted), "--min-score", "0.9",
                 "--out", str(tmp_path / "round1")]) == 0
    new = load_competition(tmp_path / "round1")
    rows = new.train[new.train["Origin"] == "pseudo"]
    assert list(rows["Image"]) == [t[0], t[1]]
    assert list(rows["Id"]) == [known["Id"].iloc[0], known["Id"].iloc[1]]
    assert (tmp_path / "round1" / "train" / t[0]).is_file() and len(new.test_images) == len(t)
    assert (assign_folds(new.train, seed=0)[new.train["Origin"] == "pseudo"] == -1).all()
    rounds = read_rounds(tmp_path / "round1")
    assert [(a["image"], a["score"]) for a in rounds[0]["added"]] == [(t[0], 0.97), (t[1], 0.92)]

    # round 2 on the new folder: t[0] is already a training row and keeps its first label
    _scores(new, tmp_path / "r2", np.random.default_rng(1), {t[0]: (known["Image"].iloc[3], 0.99),
                                                             t[2]: (known["Image"].iloc[2], 0.95)})
    assert main(["--runs", str(tmp_path / "r2"), "--data", str(tmp_path / "round1"), "--min-score", "0.9",
                 "--out", str(tmp_path / "round2")]) == 0
    rounds = json.loads((tmp_path / "round2" / "pseudo_rounds.json").read_text())["rounds"]
    assert [r["round"] for r in rounds] == [1, 2] and [a["image"] for a in rounds[1]["added"]] == [t[2]]
    final = load_competition(tmp_path / "round2").train.set_index("Image")
    assert final.loc[t[0], "Id"] == known["Id"].iloc[0]


def test_pseudo_refuses_runs_trained_on_other_photos_under_the_same_names(planted, tmp_path):
    from whale.core.errors import DataError
    from whale.data import load_competition
    from whale.data.fingerprint import DATA_IMAGES, image_hashes
    from whale.pseudo import pseudo_round

    comp = load_competition(planted)
    _scores(comp, tmp_path / "r1", np.random.default_rng(0), {})
    hashes = image_hashes(planted)
    drawn = sorted(hashes)[0]
    (tmp_path / "r1" / DATA_IMAGES).write_text(json.dumps({**hashes, drawn: hashes[drawn][:2] + ["0" * 32]}))
    with pytest.raises(DataError, match=rf"{DATA_IMAGES}: --runs .*r1 was trained on other photos under the names "
                                        rf"of .*: 1 images differ in bytes \(e\.g\. {drawn}\)"):
        pseudo_round([tmp_path / "r1"], planted, 0.9, tmp_path / "round1", log=lambda *_: None)
    assert not (tmp_path / "round1").exists()
    (tmp_path / "r1" / DATA_IMAGES).write_text(json.dumps(hashes))  # its own data's bytes: the round runs
    pseudo_round([tmp_path / "r1"], planted, 0.9, tmp_path / "round1", log=lambda *_: None)


def test_pseudo_refuses_a_score_outside_0_1(planted):
    from whale.data import load_competition
    from whale.pseudo import pseudo_rows

    with pytest.raises(ConfigError, match="min-score"):
        pseudo_rows(load_competition(planted), [], [], [], 1.5)
