"""The catalogue: proposals file, add / accept / export on hand-made photos, proposals against brute
force, and add -> index -> match -> accept with a tiny trained run (incremental index, changed run)."""
import csv
import json
import os
import time

import numpy as np
import pytest

from whale.catalogue.db import Catalogue, file_hash
from whale.catalogue.proposals import Candidate, PhotoProposal, Proposals, read_proposals, write_proposals
from whale.errors import DataError


def _photos(folder, n, seed=0, size=40):
    """``n`` small distinct PNG photos in ``folder``; returns their paths."""
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        path = folder / f"p{i:03d}.png"
        Image.fromarray(rng.integers(0, 255, (size, size, 3), dtype=np.uint8)).save(path)
        out.append(path)
    return out


def _csv(path, header, rows):
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)
    return path


def _batch(cat, photos, name="b1"):
    """A batch as `match` records it (proposals.json + batches row), without a model."""
    from whale.catalogue.db import now
    from whale.catalogue.proposals import PROPOSALS_NAME

    props = Proposals(name, "run", 0.5, tuple(PhotoProposal(str(p.resolve()), file_hash(p), False, None, ())
                                               for p in photos))
    path = write_proposals(cat.root / "batches" / name / PROPOSALS_NAME, props)
    with cat.transaction() as db:
        db.execute("INSERT INTO batches VALUES (?, ?, 'run', 'fp', 0.5, ?, ?)",
                   (name, str(photos[0].parent), path.relative_to(cat.root).as_posix(), now()))
    return props


def test_proposals_round_trip_and_errors_name_the_key(tmp_path):
    props = Proposals("b", "/r", 0.4, (PhotoProposal("/x/a.jpg", "h1", True, 0, (Candidate("w1", 0.3, "/c/1.jpg"),)),
                                       PhotoProposal("/x/b.jpg", "h2", False, None, ())))
    path = write_proposals(tmp_path / "p.json", props)
    assert read_proposals(path) == props
    raw = json.loads(path.read_text())
    assert set(raw) == {"batch", "run", "threshold", "photos"}
    assert set(raw["photos"][0]) == {"photo", "hash", "possibly_new", "group", "candidates"}
    assert set(raw["photos"][0]["candidates"][0]) == {"individual", "score", "image"}
    raw["photos"][0]["candidates"][0]["score"] = "high"
    path.write_text(json.dumps(raw))
    with pytest.raises(DataError, match=r"p.json: photos\[0\].candidates\[0\].score: expected"):
        read_proposals(path)


def test_add_records_photos_and_recognises_a_photo_added_twice(tmp_path):
    photos = _photos(tmp_path / "ph", 5)
    labels = _csv(tmp_path / "l.csv", ["image", "individual", "date", "location"],
                  [[p.name, f"w{i % 2}", "2024-05-01", "Bay"] for i, p in enumerate(photos[:4])])
    from whale.catalogue.ingest import add_photos

    with Catalogue.create(tmp_path / "cat") as cat:
        n = add_photos(cat, labels, tmp_path / "ph", progress=False)
        assert n == {"added": 4, "duplicates": 0, "new_individuals": 2, "skipped_new_whale": 0}
        assert cat.query("SELECT date, location FROM sightings LIMIT 1") == [("2024-05-01", "Bay")]
        for digest, rel in cat.query("SELECT hash, file FROM images"):
            assert file_hash(cat.root / rel) == digest
        # Kaggle train.csv: new_whale skipped; the same bytes under another name = a duplicate
        (tmp_path / "ph" / "copy.png").write_bytes(photos[0].read_bytes())
        kaggle = _csv(tmp_path / "train.csv", ["Image", "Id"],
                      [["copy.png", "w0"], [photos[4].name, "new_whale"]])
        assert add_photos(cat, kaggle, tmp_path / "ph", progress=False)["duplicates"] == 1
        before = cat.counts()
        clash = _csv(tmp_path / "c.csv", ["image", "individual"], [[photos[4].name, "w9"], ["copy.png", "w1"]])
        with pytest.raises(DataError, match=r"c.csv, line 3: .*copy.png has the same bytes .* as 'w0', not 'w1'"):
            add_photos(cat, clash, tmp_path / "ph", progress=False)
        assert cat.counts() == before  # the clash rolled back the whole add, w9's row included
        with pytest.raises(DataError, match=r"bad.csv, line 2: .*nope.png: no such photo"):
            add_photos(cat, _csv(tmp_path / "bad.csv", ["image", "individual"], [["nope.png", "w1"]]),
                       tmp_path / "ph", progress=False)
    with pytest.raises(DataError, match="a catalogue exists already"):
        Catalogue.create(tmp_path / "cat")
    with pytest.raises(DataError, match="no catalogue here"):
        Catalogue.open(tmp_path / "elsewhere")


def test_accept_appends_decisions_creates_individuals_and_exports(tmp_path):
    from whale.catalogue.decisions import accept, export
    from whale.catalogue.ingest import add_photos

    known = _photos(tmp_path / "known", 3)
    new = _photos(tmp_path / "new", 4, seed=1)
    with Catalogue.create(tmp_path / "cat") as cat:
        add_photos(cat, _csv(tmp_path / "l.csv", ["image", "individual"], [[p.name, "w0"] for p in known]),
                   tmp_path / "known", progress=False)
        _batch(cat, new)
        rows = [[new[0].name, "match", "w0"], [str(new[1].resolve()), "new", "w7"], [new[2].name, "match", "w7"],
                [new[3].name, "skip", ""]]
        n = accept(cat, "b1", _csv(tmp_path / "d.csv", ["photo", "decision", "individual"], rows), by="ana")
        assert n == {"matched": 2, "new": 1, "skipped": 1, "unchanged": 0}
        assert cat.individuals() == {"w0", "w7"}
        assert sorted(r[0] for r in cat.query("SELECT decided FROM decisions")) == ["new:w7", "skip", "w0", "w7"]
        assert {r[0] for r in cat.query("SELECT decided_by FROM decisions")} == {"ana"}
        assert cat.counts()["images"] == 6
        # the same file again changes nothing; a different decision is refused without --redecide
        again = accept(cat, "b1", tmp_path / "d.csv")
        assert again["unchanged"] == 4 and cat.counts()["decisions"] == 4
        other = _csv(tmp_path / "o.csv", ["photo", "decision", "individual"], [[new[0].name, "match", "w7"]])
        with pytest.raises(DataError, match=r"o.csv row 2: p000.png was decided 'w0' before"):
            accept(cat, "b1", other)
        assert accept(cat, "b1", other, redecide=True)["matched"] == 1
        assert cat.counts()["decisions"] == 5  # appended: the first decision is kept
        assert cat.query("SELECT individual FROM images WHERE hash = ?", (file_hash(new[0]),)) == [("w7",)]
        for bad, message in ((["x.png", "match", "w0"], r"photo 'x.png' is not in .*proposals.json"),
                             ([new[3].name, "match", "w5"], "'w5' is not in the catalogue"),
                             ([new[3].name, "new", "w0"], "'w0' exists already"),
                             ([new[3].name, "maybe", "w0"], "decision 'maybe'")):
            with pytest.raises(DataError, match=message):
                accept(cat, "b1", _csv(tmp_path / "bad.csv", ["photo", "decision", "individual"], [bad]))
        with pytest.raises(DataError, match="no batch 'zz'"):
            accept(cat, "zz", tmp_path / "d.csv")
        with pytest.raises(DataError, match="sighting weather: expected some of date, location, encounter"):
            accept(cat, "b1", tmp_path / "d.csv", sighting={"weather": "fog"})
        # sighting columns: the row's own, else the batch's (accept's), else none
        later = _photos(tmp_path / "later", 2, seed=2)
        _batch(cat, later, name="b2")
        accept(cat, "b2", _csv(tmp_path / "s.csv", ["photo", "decision", "individual", "location"],
                               [[later[0].name, "match", "w0", "Tonga"], [later[1].name, "match", "w7", ""]]),
               sighting={"date": "2025-06-14", "location": "Hervey Bay"})
        got = {r[0]: r[1:] for r in cat.query("SELECT image, date, location, encounter FROM sightings")}
        assert got[file_hash(later[0])] == ("2025-06-14", "Tonga", None)
        assert got[file_hash(later[1])] == ("2025-06-14", "Hervey Bay", None)
        assert got[file_hash(new[1])] == (None, None, None)
        files = export(cat, tmp_path / "out")
    assert [f.name for f in files] == ["sightings.csv", "individuals.csv", "decisions.csv"]
    with open(tmp_path / "out" / "sightings.csv") as fh:
        assert {(r["file"].endswith(".png"), r["location"]) for r in csv.DictReader(fh)} >= {(True, "Tonga")}
    with open(tmp_path / "out" / "individuals.csv") as fh:
        assert {r["individual"]: r["images"] for r in csv.DictReader(fh)} == {"w0": "4", "w7": "4"}  # p000 moved to w7


class _DotScorer:
    """A test double of RunScorer: scores = sigmoid of the dot product of ``[1, 1, n, d]`` features."""

    def __init__(self):
        self.scorer = self

    def matrix(self, fq, fg):
        return 1 / (1 + np.exp(-(fq[0, 0] @ fg[0, 0].T)))


def test_exact_proposals_and_pair_reduction_equal_brute_force():
    from whale.catalogue.match import _best_per_id, batch_groups, propose

    rng = np.random.default_rng(0)
    fg, fq = rng.standard_normal((1, 1, 40, 6)), rng.standard_normal((1, 1, 7, 6))
    ids = np.array([f"w{v}" for v in rng.integers(0, 9, 40)])
    rs = _DotScorer()
    names, cols, vals = propose(rs, fq, fg, ids, top=4, method="exact")
    s = rs.matrix(fq, fg)
    for q in range(7):
        best = {i: max(s[q, j] for j in range(40) if ids[j] == i) for i in set(ids)}
        want = sorted(best, key=lambda i: -best[i])[:4]
        assert list(names[q]) == want
        np.testing.assert_allclose(vals[q], [best[i] for i in want], rtol=1e-6)
        assert all(ids[c] == n and np.isclose(s[q, c], best[n]) for c, n in zip(cols[q], names[q]))
    # the pair reduction (prune / faiss paths) on all pairs = the exact answer
    q_idx, g_idx = np.repeat(np.arange(7), 40), np.tile(np.arange(40), 7)
    codes = np.unique(ids, return_inverse=True)[1]
    i2, c2, v2 = _best_per_id(q_idx, g_idx, s.reshape(-1).astype(np.float32), codes, 7, 4)
    np.testing.assert_array_equal(np.unique(ids)[i2], names)
    np.testing.assert_array_equal(c2, cols)
    # groups: photos 0-1 and 2-3 alike, 4 alone
    base = rng.standard_normal((3, 6)) * 3
    fb = np.stack([base[0], base[0], base[1], base[1], base[2]])[None, None]
    s_b = rs.matrix(fb, fb)
    t = float(np.sort(s_b[[0, 2], [1, 3]])[0]) - 1e-6
    assert max(s_b[0, 2], s_b[0, 4], s_b[2, 4]) < t or pytest.skip("random draw too close")
    assert batch_groups(rs, fb, t) == [0, 0, 1, 1, None]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from conftest import train_tiny_run

    return train_tiny_run(tmp_path_factory.mktemp("catalogue"), "catalogue-test")


def test_add_index_match_accept_through_the_command(trained, tmp_path, capsys):
    import pandas as pd

    from whale.catalogue.features import RunFeatures, update_index
    from whale.cli import main

    data, run = trained
    cat = tmp_path / "cat"
    train = pd.read_csv(data / "train.csv")
    known = train[train["Id"] != "new_whale"]
    half = _csv(tmp_path / "half.csv", ["Image", "Id"], known.iloc[: len(known) // 2].values.tolist())
    common = ["--quiet"]
    assert main(["catalogue", "add", str(cat), "--photos", str(data / "train"), "--labels", str(half),
                 "--boxes", str(data / "bounding_boxes.csv"), *common]) == 0
    assert main(["catalogue", "index", str(cat), "--run", str(run), *common]) == 0
    assert f"{len(known) // 2} photos scored, 0 kept" in capsys.readouterr().out
    # incremental: only the photos added since are scored
    assert main(["catalogue", "add", str(cat), "--photos", str(data / "train"), "--labels",
                 str(data / "train.csv"), *common]) == 0
    assert main(["catalogue", "index", str(cat), *common]) == 0
    out = capsys.readouterr().out
    assert f"{len(known) - len(known) // 2} photos scored, {len(known) // 2} kept" in out
    # another checkpoint: a new fingerprint, every photo scored again, the old rows dropped
    with Catalogue.open(cat) as c:
        n = update_index(c, RunFeatures(run, "last", verbose=False))
        assert n == {"scored": len(known), "kept": 0, "dropped": len(known)}
        assert len(list((cat / "features").rglob("*.npy"))) == 1
    assert main(["catalogue", "match", str(cat), "--run", str(run), "--photos", str(data / "test"),
                 "--top", "3", "--batch", "t1", *common]) == 0
    props = read_proposals(cat / "batches" / "t1" / "proposals.json")
    assert len(props.photos) == len(list((data / "test").iterdir()))
    for ph in props.photos:
        assert len(ph.candidates) == 3 and len({c.individual for c in ph.candidates}) == 3
        assert [c.score for c in ph.candidates] == sorted((c.score for c in ph.candidates), reverse=True)
        assert ph.possibly_new == (ph.candidates[0].score < props.threshold)
        assert all(c.image.startswith(str(cat.resolve())) for c in ph.candidates)
    # review: the page and its decisions template; the reviewer edits two rows; accept records them
    assert main(["catalogue", "review", str(cat), "--batch", "t1", *common]) == 0
    page = cat / "batches" / "t1" / "review"
    assert (page / "index.html").is_file() and len(list((page / "thumbs").glob("*.jpg"))) >= len(props.photos)
    rows = list(csv.reader((page / "decisions.csv").open()))
    assert rows[0] == ["photo", "decision", "individual"] and [r[1] for r in rows[1:]] == ["skip"] * len(props.photos)
    first, second = props.photos[0], props.photos[1]
    rows[1][1:] = ["match", first.candidates[0].individual]
    rows[2][1:] = ["new", "w_field_1"]
    dec = _csv(tmp_path / "d.csv", rows[0], rows[1:])
    assert main(["catalogue", "accept", str(cat), "--batch", "t1", "--decisions", str(dec), "--date", "2025-06-14",
                 *common]) == 0
    assert main(["catalogue", "status", str(cat)]) == 0
    assert f"decisions={len(props.photos)}" in capsys.readouterr().out
    with Catalogue.open(cat) as c:
        assert "w_field_1" in c.individuals()
        decided = dict(c.query("SELECT photo_hash, decided FROM decisions"))
        assert c.query("SELECT date FROM sightings WHERE image = ?", (second.hash,)) == [("2025-06-14",)]
    assert decided[first.hash] == first.candidates[0].individual and decided[second.hash] == "new:w_field_1"
    assert main(["catalogue", "match", str(cat), "--photos", str(tmp_path / "none")]) == 2
    assert "no such folder of photos" in capsys.readouterr().err


# ------------------------------------------------------------------ kill -9 at any moment
def _state(cat_dir):
    """What a catalogue holds, minus times and random file names; checks every file a row names."""
    import sqlite3

    from whale.catalogue.db import DB_NAME, TABLES

    conn = sqlite3.connect(cat_dir / DB_NAME)
    out = {}
    for table in TABLES:
        cols = [c[1] for c in conn.execute(f"PRAGMA table_info({table})")]
        keep = [c for c in cols if not c.endswith("_at") and (table, c) != ("features", "file")]
        rows = sorted(conn.execute(f"SELECT {', '.join(keep)} FROM {table}").fetchall(), key=repr)
        out[table] = [r for r in rows if table != "meta" or not r[0].endswith("_at")]
    for digest, rel in conn.execute("SELECT hash, file FROM images"):
        assert file_hash(cat_dir / rel) == digest, f"{rel}: missing or not the bytes recorded"
    for rel, row in conn.execute("SELECT file, row FROM features"):
        assert row < np.load(cat_dir / rel, mmap_mode="r").shape[2], f"{rel}: row {row} missing"
    conn.close()
    return out


def _kill_chain(cat_dir, argv, fractions, tmp_path):
    """Run ``argv`` on copies of ``cat_dir`` killed (SIGKILL) at ``fractions`` of its uninterrupted time.

    Each killed copy must equal the state before or after; run again to the end it must equal after.
    Returns ``(landed before, landed after)``.
    """
    import shutil
    import subprocess
    import sys
    import time
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    before = _state(cat_dir)

    def start(target):
        cmd = [sys.executable, "-m", "whale.catalogue", *[a.replace("{cat}", str(target)) for a in argv], "--quiet"]
        return subprocess.Popen(cmd, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    ref = tmp_path / "ref"
    shutil.copytree(cat_dir, ref)
    t0 = time.perf_counter()
    proc = start(ref)
    assert proc.wait(timeout=600) == 0, proc.stderr.read().decode()[-2000:]
    total = time.perf_counter() - t0
    after = _state(ref)
    assert after != before
    landed = [0, 0]
    for i, f in enumerate(fractions):
        copy = tmp_path / f"k{i}"
        shutil.copytree(cat_dir, copy)
        proc = start(copy)
        time.sleep(f * total)
        proc.kill()
        proc.wait()
        got = _state(copy)
        assert got in (before, after), f"killed at {f:.2f} x {total:.1f} s: neither before nor after"
        landed[got == after] += 1
        proc = start(copy)
        assert proc.wait(timeout=600) == 0, proc.stderr.read().decode()[-2000:]
        assert _state(copy) == after
        shutil.rmtree(copy)
    return landed


FRACTIONS = (0.35, 0.7, 0.9, 0.97)


@pytest.fixture()
def decided(tmp_path):
    """A catalogue with accepted decisions, a batch waiting for its decisions, and photos to add."""
    from whale.catalogue.decisions import accept
    from whale.catalogue.ingest import add_photos

    known = _photos(tmp_path / "known", 20)
    first, second = _photos(tmp_path / "b1", 3, seed=1), _photos(tmp_path / "b2", 60, seed=2)
    more = _photos(tmp_path / "more", 80, seed=3)
    cat_dir = tmp_path / "cat"
    with Catalogue.create(cat_dir) as cat:
        add_photos(cat, _csv(tmp_path / "k.csv", ["image", "individual"], [[p.name, f"w{i % 4}"]
                                                                        for i, p in enumerate(known)]),
                   tmp_path / "known", progress=False)
        _batch(cat, first, "b1")
        accept(cat, "b1", _csv(tmp_path / "d1.csv", ["photo", "decision", "individual"],
                               [[first[0].name, "match", "w1"], [first[1].name, "new", "w9"]]))
        _batch(cat, second, "b2")
    _csv(tmp_path / "more.csv", ["image", "individual"], [[p.name, f"m{i % 7}"] for i, p in enumerate(more)])
    _csv(tmp_path / "d2.csv", ["photo", "decision", "individual"],
         [[p.name, "new" if i < 10 else "match", f"n{i % 10}"] for i, p in enumerate(second)])
    return cat_dir


@pytest.mark.parametrize("fractions", [(0.4, 0.8), pytest.param(FRACTIONS, marks=pytest.mark.slow)])
def test_killed_add_and_accept_leave_the_catalogue_before_or_after_and_keep_decisions(decided, tmp_path, fractions):
    add = ["add", "{cat}", "--photos", str(tmp_path / "more"), "--labels", str(tmp_path / "more.csv")]
    landed = _kill_chain(decided, add, fractions, tmp_path / "add")
    accept_ = ["accept", "{cat}", "--batch", "b2", "--decisions", str(tmp_path / "d2.csv")]
    landed2 = _kill_chain(decided, accept_, fractions, tmp_path / "accept")
    # the kills landed on both sides of the commit (else the test proved nothing)
    assert landed[0] + landed2[0] >= 1, (landed, landed2)
    assert _state(decided)["decisions"], "the accepted decisions of b1 are there"


@pytest.mark.slow
def test_killed_index_leaves_features_before_or_after(trained, tmp_path):
    from whale.catalogue.ingest import add_photos

    data, run = trained
    with Catalogue.create(tmp_path / "cat") as cat:
        add_photos(cat, data / "train.csv", data / "train", data / "bounding_boxes.csv", progress=False)
    landed = _kill_chain(tmp_path / "cat", ["index", "{cat}", "--run", str(run)], (0.5, 0.8, 0.9, 0.95, 0.99),
                         tmp_path / "index")
    assert landed[0] >= 1


def test_a_stored_faiss_index_is_reused_while_the_embeddings_are_unchanged(tmp_path, monkeypatch):
    faiss = pytest.importorskip("faiss")
    from whale.catalogue.match import faiss_candidates

    rng = np.random.default_rng(0)
    eg = rng.standard_normal((200, 8)).astype(np.float32)
    eg /= np.linalg.norm(eg, axis=1, keepdims=True)
    eq = eg[:5] + 0.01
    fresh = faiss_candidates(eq, eg, 20)
    first = faiss_candidates(eq, eg, 20, index_dir=tmp_path / "index")
    stored = list((tmp_path / "index").iterdir())
    assert len(stored) == 1 and stored[0].name.startswith("faiss-hnsw-")
    np.testing.assert_array_equal(first, fresh)
    np.testing.assert_array_equal(first[:, 0], np.arange(5))  # each query's own image first

    def no_build(*args, **kwargs):
        raise AssertionError("built an index although one was stored for these embeddings")

    monkeypatch.setattr(faiss, "IndexHNSWFlat", no_build)
    np.testing.assert_array_equal(faiss_candidates(eq, eg, 20, index_dir=tmp_path / "index"), first)
    monkeypatch.undo()
    # an unreadable stored index is rebuilt, not an error
    stored[0].write_bytes(b"not an index")
    np.testing.assert_array_equal(faiss_candidates(eq, eg, 20, index_dir=tmp_path / "index"), first)
    assert stored[0].stat().st_size > 100
    # other embeddings (an image added): a new index, the stale one deleted
    # a killed match's partial write (hidden) goes at the next store once old; a recent one may be a live writer
    stale = tmp_path / "index" / ".faiss-hnsw-x.index.a1.tmp.index"
    live = tmp_path / "index" / ".faiss-hnsw-y.index.b2.tmp.index"
    stale.write_bytes(b"partial"), live.write_bytes(b"partial")
    os.utime(stale, (time.time() - 2 * 3600,) * 2)
    faiss_candidates(eq, eg[:150], 20, index_dir=tmp_path / "index")
    now = sorted((tmp_path / "index").iterdir())
    assert [p.name for p in now] == [live.name, now[1].name] and now[1].name.startswith("faiss-hnsw-")
    assert now[1] != stored[0]
