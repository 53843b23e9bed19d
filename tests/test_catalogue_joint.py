"""``whale catalogue match --method joint``: every feature kind of a joint config verifies one shortlist per new
photo (their votes and a run's best photos), one check fitted on the catalogue's own photos (each left out of its own
row) gives P(same whale); on a small catalogue of drawn flukes against the keypoint method, the pairs each kind
verifies, the leave-one-out fit, the kept pair table, the review page and the refusals."""
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("cv2")
pytest.importorskip("sklearn")

from whale.catalogue.db import Catalogue, file_hash  # noqa: E402
from whale.catalogue.proposals import read_proposals  # noqa: E402
from whale.cli import main  # noqa: E402
from tests.test_catalogue import _csv  # noqa: E402
from tests.test_keypoint_selection import photo  # noqa: E402
from tests.test_keypoints import write  # noqa: E402

SHOTS = {0: 3, 1: 3, 2: 3, 3: 3, 4: 3, 5: 3, 6: 3, 7: 1}
"""The catalogue: photos per individual, as many of each whale (a count that tells a left-out photo's own whale from
the others would teach the check a rule no new photo follows); ``w7`` has one: its photo gives negatives only."""
BATCH = [(0, 5), (1, 5), (2, 5), (5, 5), (7, 5), (20, 0), (21, 0), (21, 1)]
"""The batch: new photos of five catalogued whales, one of an unknown whale and two of another."""
KINDS = {"a.yaml": "features: {n_features: 400}\nsearch: {k: 4}\nverify: {shortlist: 3}\n"
                   "select: {keep: 1}\ncheck: {model: gbm, rounds: 20, both_ways: true}\n",
         "b.yaml": "features: {n_features: 300, sigma: 1.6}\nverify: {shortlist: 3}\nselect: {keep: 1}\n"}
JOINT = "keypoints: [a.yaml, b.yaml]\nshortlist: {votes: 4, runs: 3}\ncheck: {rounds: 30, folds: 3}\n"


def drawn_catalogue(root: Path) -> tuple[Path, Path, dict]:
    """``(catalogue, batch folder, {photo content hash: individual number})``: :data:`SHOTS` added to a catalogue,
    :data:`BATCH` written beside it, with the joint config (:data:`KINDS`, :data:`JOINT`) in ``root``."""
    rows, truth = [], {}
    for individual, shots in SHOTS.items():
        for shot in range(shots):
            path = write(root / "known" / f"w{individual}_{shot}.png", photo(individual, shot))
            rows.append([path.name, f"w{individual}"])
            truth[file_hash(path)] = individual
    for individual, shot in BATCH:
        truth[file_hash(write(root / "new" / f"w{individual}_{shot}.png", photo(individual, shot)))] = individual
    labels = _csv(root / "labels.csv", ["image", "individual"], rows)
    cat = root / "cat"
    assert main(["catalogue", "add", str(cat), "--photos", str(root / "known"), "--labels", str(labels),
                 "--quiet"]) == 0
    for name, text in KINDS.items():
        (root / name).write_text(text)
    (root / "joint.yaml").write_text(JOINT)
    return cat, root / "new", truth


def proposals(cat: Path, batch: str):
    from whale.catalogue import sql

    with Catalogue.open(cat) as c:
        return read_proposals(cat / sql.batch_proposals_file(c.conn, batch))


@pytest.fixture(scope="module")
def matched(tmp_path_factory):
    """The drawn catalogue with batch ``k`` matched by ``--method keypoints`` (the first kind's settings) and ``j``
    by ``--method joint``."""
    root = tmp_path_factory.mktemp("catjoint")
    cat, new, truth = drawn_catalogue(root)
    assert main(["catalogue", "match", str(cat), "--method", "keypoints", "--keypoint-config", str(root / "a.yaml"),
                 "--photos", str(new), "--batch", "k", "--top", "3", "--quiet"]) == 0
    assert main(["catalogue", "match", str(cat), "--method", "joint", "--joint-config", str(root / "joint.yaml"),
                 "--photos", str(new), "--batch", "j", "--top", "3", "--quiet"]) == 0
    return root, cat, new, truth


def test_a_joint_match_proposes_probabilities_and_finds_the_whales_the_keypoint_method_finds(matched, capsys):
    root, cat, new, truth = matched
    joint, keypoints = proposals(cat, "j"), proposals(cat, "k")
    assert joint.run == "joint" and joint.scale == "probability" and joint.threshold == 0.5
    assert len(joint.photos) == len(BATCH)
    for ph in joint.photos:
        assert 1 <= len(ph.candidates) <= 3 and len({c.individual for c in ph.candidates}) == len(ph.candidates)
        assert all(0 <= c.probability <= 1 and c.score == c.probability for c in ph.candidates)
        assert [c.score for c in ph.candidates] == sorted((c.score for c in ph.candidates), reverse=True)
        assert ph.possibly_new == (ph.candidates[0].probability < 0.5)
    first = {ph.hash: ph.candidates[0].individual for ph in joint.photos}
    found = [ph.hash for ph in keypoints.photos if ph.candidates[0].individual == f"w{truth[ph.hash]}"]
    assert len(found) >= 4  # the keypoint method finds the catalogued whales of this batch
    assert sum(first[h] == f"w{truth[h]}" for h in found) >= len(found) - 1
    known = [ph for ph in joint.photos if truth[ph.hash] in SHOTS and SHOTS[truth[ph.hash]] > 1]
    assert sum(not ph.possibly_new for ph in known) >= len(known) - 1  # whales with photos to learn from
    unknown = [ph for ph in joint.photos if truth[ph.hash] not in SHOTS]
    assert all(ph.candidates[0].probability < max(p.candidates[0].probability for p in known) for ph in unknown)
    # each candidate's image is a photo of that individual, the one of its best pair
    with Catalogue.open(cat) as c:
        from whale.catalogue import sql

        owner = {Path(f).name: ind for _, ind, f, _, _ in sql.photos(c.conn)}
    assert all(owner[Path(cand.image).name] == cand.individual for ph in joint.photos for cand in ph.candidates)
    # beside the proposals: the first kind's settings (the review draws its matches) and the joint config
    from whale.catalogue.keypoints import batch_config
    from whale.keypoints import load_keypoint_config

    assert batch_config(cat, "j").config_hash() == load_keypoint_config(root / "a.yaml").config_hash()
    assert (cat / "batches" / "j" / "joint.yaml").is_file()
    assert main(["catalogue", "check", str(cat)]) == 0  # every kind's feature files tied to their photos
    # the review page of a joint batch draws the keypoint matches of every candidate; heatmaps need a run's batch
    assert main(["catalogue", "review", str(cat), "--batch", "j", "--quiet"]) == 0
    page = (cat / "batches" / "j" / "review" / "index.html").read_text(encoding="utf-8")
    assert page.count('class="match"') == sum(len(ph.candidates) for ph in joint.photos)
    capsys.readouterr()
    assert main(["catalogue", "review", str(cat), "--batch", "j", "--heatmaps", "--quiet"]) == 2
    assert "matched by joint, not a trained run" in capsys.readouterr().err
    from whale.catalogue.joint import batch_config_hash
    from whale.catalogue.reviewdata import review_data

    with Catalogue.open(cat) as c:
        data = review_data(c, "j", root / "served")
    assert data["method"] == "joint" and data["config_hash"] == batch_config_hash(cat, "j") and data["scale"] == \
        "probability"


def test_the_check_is_fitted_on_the_catalogues_photos_each_left_out_of_its_own_row(matched):
    from whale.catalogue.calibration import CALIBRATION_DIR
    from whale.identify.check import load_table

    root, cat, _, _ = matched
    (kept,) = (cat / CALIBRATION_DIR).glob("*.npz")
    table = load_table(kept)
    with Catalogue.open(cat) as c:
        from whale.catalogue import sql

        individuals = np.array([r[1] for r in sql.photos(c.conn)])
    q, g = table.pairs[:, 0], table.pairs[:, 1]
    assert len(table.pairs) and (q != g).all()  # never a photo against itself
    assert set(q) == set(range(len(individuals)))  # every catalogue photo a query
    assert table.columns[0] == "a.p" and not any(c.startswith("run") for c in table.columns)
    assert "log_photos" not in table.columns  # the query's own whale is one photo short: it would tell the label
    same = individuals[q] == individuals[g]
    assert not same[individuals[q] == "w7"].any()  # the one-photo whale's photo: negatives only
    assert same.sum() >= 20 and (~same).sum() >= 20


def test_every_shortlisted_pair_is_verified_once_by_every_kind_and_the_run_only_proposes(tmp_path, monkeypatch):
    """With a run: each kind matches the batch once, verifying the one merged shortlist (every kind's votes and the
    run's best photos); the run's catalogue scores never reach the check; its new features are indexed."""
    from whale.catalogue.joint import left_out_table, match_joint
    from whale.identify.sources import shortlist_of
    from whale.keypoints.matcher import KeypointMatcher

    cat, new, truth = drawn_catalogue(tmp_path)
    run = FakeRun(tmp_path / "run", truth)
    calls = []
    real_match, real_votes = KeypointMatcher.match, KeypointMatcher.votes

    def match(self, queries, *args, **kw):
        result = real_match(self, queries, *args, **{**kw, "describe": True})
        calls.append(("match", self.cfg.features.n_features, kw.get("leave_out"), kw.get("also"), result))
        return result

    def votes(self, queries, *args, **kw):
        result = real_votes(self, queries, *args, **kw)
        calls.append(("votes", self.cfg.features.n_features, kw.get("leave_out"), None, result))
        return result

    monkeypatch.setattr(KeypointMatcher, "match", match)
    monkeypatch.setattr(KeypointMatcher, "votes", votes)
    import whale.catalogue.joint as joint_mod

    fitted = []
    monkeypatch.setattr(joint_mod, "left_out_table",
                        lambda *a, **k: fitted.append(a[1]) or left_out_table(*a, **k))
    from whale.catalogue.joint import joint_config

    cfg = joint_config(tmp_path / "joint.yaml")
    with Catalogue.open(cat) as c:
        props, _ = match_joint(c, cfg, new, "r", top=3, run=run, progress=False)
        from whale.catalogue import sql

        assert sql.feature_counts(c.conn, run.fingerprint)[0] == sum(SHOTS.values())  # indexed with the proposals
    batch = [c for c in calls if c[2] is None and (c[0] == "votes" or c[3] is not None)]
    kinds = sorted({c[1] for c in batch})
    assert kinds == [300, 400] and len(fitted) == 1
    assert [c[1] for c in batch if c[0] == "match"] in ([400, 300], [300, 400])  # the batch matched once per kind
    also = [c[3] for c in batch if c[0] == "match"]
    assert all(len(x) == len(y) and all(np.array_equal(a, b) for a, b in zip(x, y)) for x, y in zip(also, also[1:]))
    run_scores = run.batch_scores
    expected = shortlist_of([c[4] for c in batch if c[0] == "votes"], [run_scores], cfg.votes, cfg.runs)
    assert all(np.array_equal(a, e) for a, e in zip(also[0], expected))
    assert all(len(np.unique(a)) == len(a) for a in also[0])  # each pair once
    for *_, result in (c for c in batch if c[0] == "match"):
        assert len(np.unique(result.pairs.index, axis=0)) == len(result.pairs.index)  # one row per verified pair
        verified = {tuple(p) for p in np.argwhere(result.inliers > 0).tolist()}
        own = {(i, int(j)) for i, row in enumerate(result.votes) for j in np.argsort(-row)[:3]}
        assert verified <= own | {(i, int(j)) for i, a in enumerate(also[0]) for j in a}
    run_best = [set(np.argsort(-row)[:cfg.runs].tolist()) for row in run_scores]
    assert all(b <= set(a.tolist()) for a, b in zip(also[0], run_best))  # the run's best photos are verified too
    # the check's fit: the catalogue's photos left out of their own row, shortlisted by the kinds' votes alone
    left = [c for c in calls if c[2] is not None and (c[0] == "votes" or c[3] is not None)]
    assert len(left) == 4 and all(np.array_equal(c[2], np.arange(sum(SHOTS.values()))) for c in left)
    fit_also = [c[3] for c in left if c[0] == "match"]
    expected = shortlist_of([c[4] for c in left if c[0] == "votes"], [], cfg.votes, 0)
    assert all(np.array_equal(a, e) for x in fit_also for a, e in zip(x, expected))
    assert all(i not in a for i, a in enumerate(expected))  # never a photo against itself
    assert run.catalogue_scored == 0  # the run never scored the catalogue against itself
    assert props.run == "joint" and len(props.photos) == len(BATCH)


class FakeRun:
    """A trained run as the catalogue uses it (:class:`whale.catalogue.features.RunFeatures`), whose features are its
    photo's individual, one-hot: it knows every catalogued whale, as a run trained on the catalogue does."""

    def __init__(self, folder: Path, truth: dict):
        folder.mkdir(parents=True, exist_ok=True)
        self.run_dir, self.checkpoint, self.fingerprint = folder, "best", "fake00000000run"
        self.truth = truth
        self.catalogue_scored = 0
        self.batch_scores = None
        self.scorer = self

    def features(self, paths, boxes) -> np.ndarray:
        f = np.zeros((1, 1, len(paths), 32), np.float32)
        for i, p in enumerate(paths):
            f[0, 0, i, self.truth[file_hash(p)]] = 1.0
        return f

    gallery_features = features  # the catalogue's photos as its queries: no views

    def matrix(self, fq: np.ndarray, fg: np.ndarray) -> np.ndarray:
        if fq.shape[2] == fg.shape[2]:
            self.catalogue_scored += 1
        s = fq[0, 0] @ fg[0, 0].T + 0.01 * np.arange(fg.shape[2])[None]  # ties broken: a distinct order
        self.batch_scores = s
        return s


def test_a_second_match_reads_the_catalogues_pair_table_back(matched, monkeypatch, capsys):
    import whale.catalogue.joint as joint_mod

    root, cat, new, _ = matched

    def never(*args, **kwargs):
        raise AssertionError("the catalogue matched against itself again")

    with monkeypatch.context() as m:
        m.setattr(joint_mod, "left_out_table", never)
        assert main(["catalogue", "match", str(cat), "--method", "joint", "--joint-config", str(root / "joint.yaml"),
                     "--photos", str(new), "--batch", "j2", "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert "pair table read back from" in out and "P(same whale) below 0.500" in out
    assert [ph.candidates for ph in proposals(cat, "j2").photos] == [ph.candidates for ph in proposals(cat, "j").photos]


def test_a_subset_of_the_gallery_left_out_of_its_own_rows_reads_both_ways_within_its_queries(matched):
    """The check of a both-ways config on some of the gallery's photos (a catalogue larger than the calibration's
    draw): each pair's reverse is the pair of the photo that is a query, never a gallery index read as a query."""
    from whale.catalogue.joint import joint_config
    from whale.catalogue.keypoints import store_of
    from whale.keypoints import KeypointMatcher

    root, cat, _, _ = matched
    name, cfg = joint_config(root / "joint.yaml").kinds[0]
    with Catalogue.open(cat) as c:
        from whale.catalogue import sql
        from whale.catalogue.ingest import image_path

        rows = sql.photos(c.conn)
        paths = [image_path(c, r[2]) for r in rows]
    ids = np.array([r[1] for r in rows])
    gallery = store_of(cat, cfg).features(paths, progress=False, digests=[r[0] for r in rows])
    matcher = KeypointMatcher(cfg, gallery, ids)
    full = matcher.match(gallery, progress=False, leave_out=np.arange(len(gallery)), describe=True)
    some = np.array([0, 2, 3, 5, 8, 9, 12, 15])
    part = matcher.match([gallery[i] for i in some], progress=False, leave_out=some, describe=True)
    assert (part.pairs.index[:, 0] < len(some)).all()
    width = part.pairs.rows.shape[1] // 2
    at = {tuple(k): r for k, r in zip(full.pairs.index.tolist(), full.pairs.rows)}
    for (i, c), row in zip(part.pairs.index.tolist(), part.pairs.rows):
        whole = at[(int(some[i]), c)]
        np.testing.assert_allclose(row[:width], whole[:width])  # the forward direction as in the whole gallery
        if c in some:
            np.testing.assert_allclose(row[width:], whole[width:])  # the reverse: photo c's own match
        else:
            assert not row[width:].any()  # photo c was not a query: no reverse


def test_bad_joint_configs_runs_and_catalogues_are_refused_by_name(matched, tmp_path, capsys):
    root, cat, new, _ = matched
    base = ["catalogue", "match", str(cat), "--method", "joint", "--photos", str(new), "--quiet"]

    def refused(argv, *said):
        capsys.readouterr()
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and all(s in err for s in said), err

    refused(base + ["--batch", "x1", "--joint-config", str(tmp_path / "none.yaml")], "none.yaml: no joint config")
    bad = tmp_path / "bad.yaml"
    bad.write_text("keypoints: [missing.yaml]\n")
    refused(base + ["--batch", "x2", "--joint-config", str(bad)], "bad.yaml", "keypoints[0]", "missing.yaml")
    bad.write_text(f"keypoints: [{root / 'a.yaml'}]\nshortlist: {{votes: 4, pool: 3}}\n")
    refused(base + ["--batch", "x3", "--joint-config", str(bad)], "bad.yaml", "pool")
    bad.write_text(f"keypoints: [{root / 'a.yaml'}]\ncheck: {{validation: thinned, columns: individuals}}\n")
    refused(base + ["--batch", "x3b", "--joint-config", str(bad)], "bad.yaml", "check.validation: thinned",
            "a catalogue's check is fitted on its own photos")
    joint = ["--joint-config", str(root / "joint.yaml")]
    refused(base + ["--batch", "x4", "--run", str(tmp_path / "notarun")] + joint, "notarun")
    refused(base + ["--batch", "x5", "--keypoint-config", str(root / "a.yaml")] + joint, "--keypoint-config")
    refused(["catalogue", "match", str(cat), "--method", "keypoints", "--photos", str(new), "--batch", "x6",
             "--quiet"] + joint, "--joint-config goes with --method joint")
    # a catalogue of one photo per whale has no same-whale pair to fit the check on: refused before any extraction
    small = tmp_path / "small"
    labels = _csv(tmp_path / "one.csv", ["image", "individual"], [[f"w{i}_0.png", f"w{i}"] for i in range(3)])
    assert main(["catalogue", "add", str(small), "--photos", str(root / "known"), "--labels", str(labels),
                 "--quiet"]) == 0
    refused(["catalogue", "match", str(small), "--method", "joint", "--photos", str(new), "--quiet"] + joint,
            str(small), "two photos of one whale", "--method keypoints")
    assert not (small / "keypoints").exists() and not list((small / "batches").glob("*/proposals-*.json"))
    assert not (cat / "batches" / "x4").exists()


SELECTING = ("features: {n_features: 400}\nsearch: {k: 4}\nverify: {shortlist: 3}\nselect: {keep: 0.3}\n"
             "check: {model: gbm, rounds: 20}\n")
"""A feature kind that selects its keypoints (the real configs do; :data:`KINDS` keep every one) with a check."""


def test_each_kinds_selector_and_check_are_kept_beside_the_catalogue_and_read_back_until_it_changes(
        tmp_path, monkeypatch, capsys):
    """A catalogue match fits each kind's keypoint selector and check once (``CAT/keypoints/<kind>/selectors/``):
    a second match reads both back and proposes the same; ``--method keypoints`` shares the selector with its own
    check; a photo added makes a new catalogue, whose match fits them again and drops the earlier catalogue's."""
    from whale.keypoints.check import MatchCheck
    from whale.keypoints.selection import KeypointSelector

    cat, new, _ = drawn_catalogue(tmp_path)
    (tmp_path / "s.yaml").write_text(SELECTING)
    (tmp_path / "one.yaml").write_text("keypoints: [s.yaml]\nshortlist: {votes: 4}\ncheck: {rounds: 30, folds: 3}\n")
    joint = ["catalogue", "match", str(cat), "--method", "joint", "--joint-config", str(tmp_path / "one.yaml"),
             "--photos", str(new), "--top", "3"]
    kept = lambda: sorted(p.name for p in (cat / "keypoints").glob("*/selectors/*.npz"))  # noqa: E731
    assert main(joint + ["--batch", "a", "--quiet"]) == 0
    first = kept()
    assert len(first) == 2 and first[0].endswith("-check-strict.npz") != first[1].endswith("-check-strict.npz")

    def never(*args, **kwargs):
        raise AssertionError("fitted again")

    capsys.readouterr()
    with monkeypatch.context() as m:
        m.setattr(KeypointSelector, "fit", never)
        m.setattr(MatchCheck, "fit", never)
        assert main(joint + ["--batch", "b"]) == 0
        out = capsys.readouterr().out
        assert "joint s: the selector read back from" in out and "its check from" in out, out
    assert [ph.candidates for ph in proposals(cat, "b").photos] == [ph.candidates for ph in proposals(cat, "a").photos]
    with monkeypatch.context() as m:  # the keypoint method: the same selector, its own check (not strict) fitted
        m.setattr(KeypointSelector, "fit", never)
        assert main(["catalogue", "match", str(cat), "--method", "keypoints", "--keypoint-config",
                     str(tmp_path / "s.yaml"), "--photos", str(new), "--batch", "k"]) == 0
    assert "keypoints: the selector read back from" in capsys.readouterr().out
    assert len(kept()) == 3 and set(first) < set(kept())

    added = write(tmp_path / "more" / "w7_1.png", photo(7, 1))
    labels = _csv(tmp_path / "more.csv", ["image", "individual"], [[added.name, "w7"]])
    assert main(["catalogue", "add", str(cat), "--photos", str(added.parent), "--labels", str(labels), "--quiet"]) == 0
    assert main(joint + ["--batch", "c", "--quiet"]) == 0
    now = kept()
    assert len(now) == 2 and not set(now) & set(first)  # fitted on the new catalogue, the earlier one's dropped
