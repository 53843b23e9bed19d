"""``whale catalogue match --method joint --outline``: the learned trailing edge proposes candidates on a catalogue,
its net trained on the catalogue's curves and kept until the catalogue changes, the catalogue's check untouched,
and the refusals. The drawn catalogue of ``tests/test_catalogue_joint.py``, with each whale's trailing edge drawn
for it (GrabCut on those photos reads no fluke)."""
import zlib

import numpy as np
import pytest

cv2 = pytest.importorskip("cv2")
pytest.importorskip("sklearn")

from whale.catalogue.db import Catalogue  # noqa: E402
from whale.cli import main  # noqa: E402
from whale.outline.curve import POINTS  # noqa: E402
from tests.test_catalogue_joint import BATCH, drawn_catalogue, proposals  # noqa: E402

EDGELESS = 21
"""The unknown whale photographed twice in the batch: no trailing edge is read on its photos."""


def drawn_edges(monkeypatch, truth: dict, folders) -> None:
    """Each whale's own trailing edge for :func:`whale.outline.curve.edge_curve` to read, by the photo's pixels:
    a bump whose place is the whale's, the shot's noise on it; none for :data:`EDGELESS`'s photos."""
    from whale.core.files import file_hash

    whale_of = {}
    for folder in folders:
        for path in folder.glob("*.png"):
            whale_of[cv2.imread(str(path)).tobytes()] = (truth[file_hash(path)], path.stem)
    x = np.linspace(0, 1, POINTS)

    def edge(bgr):
        individual, name = whale_of[bgr.tobytes()]
        if individual == EDGELESS:
            return None
        noise = np.random.default_rng(zlib.crc32(name.encode())).normal(0, 0.003, POINTS)
        return (0.1 * np.sin(np.pi * x) + 0.08 * np.exp(-((x - 0.1 - 0.1 * (individual % 9)) / 0.03) ** 2)
                + noise).astype(np.float32)

    monkeypatch.setattr("whale.outline.curve.edge_curve", edge)


@pytest.fixture()
def drawn(tmp_path, monkeypatch):
    cat, new, truth = drawn_catalogue(tmp_path)
    drawn_edges(monkeypatch, truth, [tmp_path / "known", new])
    (tmp_path / "outline.yaml").write_text("steps: 250\nseed: 0\n")
    return tmp_path, cat, new, truth


def test_the_outline_s_best_photos_join_every_shortlist_and_its_net_is_kept(drawn, monkeypatch, capsys):
    import whale.catalogue.outline as outline_mod
    from whale.catalogue.joint import joint_config
    from whale.identify.sources import top_photos
    from whale.keypoints.matcher import KeypointMatcher

    root, cat, new, truth = drawn
    seen, calls = [], []
    real_scores, real_match = outline_mod.outline_scores, KeypointMatcher.match
    monkeypatch.setattr(outline_mod, "outline_scores", lambda *a, **k: seen.append(real_scores(*a, **k)) or seen[-1])

    def match(self, queries, *args, **kw):
        calls.append(kw)
        return real_match(self, queries, *args, **kw)

    monkeypatch.setattr(KeypointMatcher, "match", match)
    joint = ["--method", "joint", "--joint-config", str(root / "joint.yaml"), "--photos", str(new), "--top", "3"]
    assert main(["catalogue", "match", str(cat), "--batch", "o", "--outline", str(root / "outline.yaml")] + joint) == 0
    out = capsys.readouterr().out
    assert "outline: the net trained on 22 curves of 8 individuals of the catalogue, 250 batches" in out
    assert "outline: 2 of the batch's 8 photos without a trailing edge" in out
    (cosine,) = seen
    with Catalogue.open(cat) as c:
        from whale.catalogue import sql

        photos = sql.photos(c.conn)
    catalogued = np.array([ind for _, ind, *_ in photos])
    assert cosine.shape == (len(BATCH), len(photos))
    names = sorted(p.name for p in new.glob("*.png"))
    for row, name in zip(cosine, names):
        whale = int(name.split("_")[0][1:])
        if whale == EDGELESS:
            assert not row.any()  # no curve: proposes nothing
        elif f"w{whale}" in set(catalogued):
            assert catalogued[int(np.argmax(row))] == f"w{whale}"  # the net learned the drawn edges
    # the batch's one shortlist holds the outline's best shortlist.runs photos, verified by every kind
    cfg = joint_config(root / "joint.yaml")
    batch = [kw["also"] for kw in calls if kw.get("also") is not None and kw.get("leave_out") is None]
    assert len(batch) == 2
    for also in batch:
        for shortlist, best in zip(also, top_photos(cosine, cfg.runs)):
            assert set(best.tolist()) <= set(shortlist.tolist())
    assert (cat / "batches" / "o" / "outline.yaml").read_text() == "steps: 250\nseed: 0\n"
    kept = sorted((cat / "calibration").glob("*.npz"))
    assert len(kept) == 2  # the catalogue's pair table and the outline's net

    # a second match reads the net back (and the pair table: the check never sees the outline)
    def never(*a, **k):
        raise AssertionError("the outline net trained again on an unchanged catalogue")

    monkeypatch.setattr("whale.outline.net.train_embedding", never)
    assert main(["catalogue", "match", str(cat), "--batch", "o2", "--outline", str(root / "outline.yaml")] + joint) == 0
    out = capsys.readouterr().out
    assert "outline: the net of this catalogue read back from" in out and "pair table read back from" in out
    assert np.array_equal(seen[1], cosine)
    assert [p.candidates for p in proposals(cat, "o2").photos] == [p.candidates for p in proposals(cat, "o").photos]
    assert sorted((cat / "calibration").glob("*.npz")) == kept
    # without --outline the batch is recorded under another fingerprint
    assert main(["catalogue", "match", str(cat), "--batch", "plain", "--quiet"] + joint) == 0
    with Catalogue.open(cat) as c:
        recorded = dict(c.conn.execute("SELECT name, fingerprint FROM batches").fetchall())
    assert recorded["o"] == recorded["o2"] != recorded["plain"]


def test_the_outline_is_refused_by_name_where_it_cannot_work(drawn, monkeypatch, capsys):
    root, cat, new, _ = drawn
    base = ["catalogue", "match", str(cat), "--photos", str(new), "--quiet"]
    joint = ["--method", "joint", "--joint-config", str(root / "joint.yaml")]

    def refused(argv, *said):
        capsys.readouterr()
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and all(s in err for s in said), err

    refused(base + ["--batch", "r1", "--method", "keypoints", "--outline"], "--outline goes with --method joint")
    refused(base + ["--batch", "r2", "--outline", str(root / "none.yaml")] + joint, "none.yaml: no outline config")
    (root / "bad.yaml").write_text("steps: 0\n")
    refused(base + ["--batch", "r3", "--outline", str(root / "bad.yaml")] + joint, "bad.yaml", "steps")
    monkeypatch.setattr("whale.outline.curve.edge_curve", lambda bgr: None)
    refused(base + ["--batch", "r4", "--outline", str(root / "outline.yaml")] + joint, str(cat),
            "the trailing edge was read on 0 of the catalogue's 22 photos", "match without --outline")
    assert not (cat / "keypoints").exists()  # refused before any keypoint is extracted
    assert not list((cat / "batches").glob("r*/proposals-*.json"))
