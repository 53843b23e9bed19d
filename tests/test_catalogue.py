"""The catalogue: proposals file, add / accept / export on hand-made photos, proposals against brute
force, and add -> index -> match -> accept with a tiny trained run (incremental index, changed run)."""
import csv
import json
import os
import re
import time

import numpy as np
import pytest

from whale.catalogue.db import Catalogue, file_hash
from whale.catalogue.proposals import Candidate, PhotoProposal, Proposals, read_proposals, write_proposals
from whale.core.errors import DataError


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


CANDIDATES = tuple(Candidate(f"{w}{i}", round(0.9 - i / 100, 2), "/catalogue/image.jpg")
                   for w in ("w", "n", "m") for i in range(10))
"""What the hand-made batches propose for every photo: w0-w9, n0-n9, m0-m9."""


def _batch(cat, photos, name="b1", candidates=CANDIDATES):
    """A batch as `match` records it (proposals file + batches row), without a model."""
    from whale.catalogue.db import now
    from whale.catalogue.proposals import proposals_file

    props = Proposals(name, "run", 0.5, tuple(PhotoProposal(str(p.resolve()), file_hash(p), False, None, candidates)
                                               for p in photos))
    path = write_proposals(cat.root / proposals_file(name, props), props)
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
    assert set(raw) == {"batch", "run", "threshold", "photos", "scale"} and raw["scale"] == "score"
    assert set(raw["photos"][0]) == {"photo", "hash", "possibly_new", "group", "candidates"}
    assert set(raw["photos"][0]["candidates"][0]) == {"individual", "score", "image", "probability"}
    # a file of an earlier version (no scale, no probability) reads as a score threshold without probabilities
    old = {k: v for k, v in raw.items() if k != "scale"}
    old["photos"][0]["candidates"][0].pop("probability")
    path.write_text(json.dumps(old))
    assert read_proposals(path) == props and read_proposals(path).photos[0].candidates[0].probability is None
    calibrated = Proposals("b", "/r", 0.5, (PhotoProposal("/x/a.jpg", "h1", False, None,
                                                          (Candidate("w1", 0.3, "/c/1.jpg", 0.75),)),), "probability")
    assert read_proposals(write_proposals(tmp_path / "q.json", calibrated)) == calibrated
    raw["photos"][0]["candidates"][0]["probability"] = 1.5
    path.write_text(json.dumps(raw))
    with pytest.raises(DataError, match=r"p.json: photos\[0\].candidates\[0\].probability: expected a number in"):
        read_proposals(path)
    raw["photos"][0]["candidates"][0]["probability"] = None
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
    from whale.catalogue.decisions import accept
    from whale.catalogue.export import export
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
        assert n == {"matched": 2, "new": 1, "skipped": 1, "undone": 0, "undo": 0, "unchanged": 0}
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
        for bad, message in ((["x.png", "match", "w0"], r"photo 'x.png' is not in .*proposals-.*.json"),
                             ([new[3].name, "match", "w5"], "'w5' is not in the catalogue"),
                             ([new[3].name, "match", "zz"], "'zz' is not a candidate of"),
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
    assert [f.name for f in files] == ["sightings.csv", "boxes.csv", "individuals.csv", "decisions.csv"]
    with open(tmp_path / "out" / "sightings.csv") as fh:
        assert {(r["image"].endswith(".png"), r["location"]) for r in csv.DictReader(fh)} >= {(True, "Tonga")}
    with open(tmp_path / "out" / "individuals.csv") as fh:
        assert {r["individual"]: r["images"] for r in csv.DictReader(fh)} == {"w0": "4", "w7": "4"}  # p000 moved to w7


# ------------------------------------------------------------------ bad photos, remove, check
def test_add_refuses_a_photo_that_is_not_an_image_naming_its_row_and_stores_nothing(tmp_path, capsys):
    from whale.cli import main

    photos = _photos(tmp_path / "ph", 3)
    good = photos[0].read_bytes()
    bad = {"text.jpg": b"not a photo at all\n", "empty.jpg": b"", "cut.png": photos[1].read_bytes()[:200]}
    for name, data in bad.items():
        (tmp_path / "ph" / name).write_bytes(data)
    cat = tmp_path / "cat"
    for name in bad:
        labels = _csv(tmp_path / "l.csv", ["image", "individual"], [[photos[2].name, "w1"], [name, "w2"]])
        assert main(["catalogue", "add", str(cat), "--photos", str(tmp_path / "ph"), "--labels", str(labels),
                     "--quiet"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "l.csv, line 3: " in err and name in err and "nothing added" in err
        assert not cat.exists(), "a failed add leaves no empty catalogue behind"
    # into an existing catalogue: nothing stored, not even the good row's photo
    labels = _csv(tmp_path / "ok.csv", ["image", "individual"], [[photos[0].name, "w0"]])
    assert main(["catalogue", "add", str(cat), "--photos", str(tmp_path / "ph"), "--labels", str(labels)]) == 0
    before, files = _state(cat), sorted((cat / "images").rglob("*"))
    labels = _csv(tmp_path / "l.csv", ["image", "individual"], [[photos[2].name, "w1"], ["text.jpg", "w2"]])
    assert main(["catalogue", "add", str(cat), "--photos", str(tmp_path / "ph"), "--labels", str(labels)]) == 2
    assert _state(cat) == before and sorted((cat / "images").rglob("*")) == files
    # a box outside its photo is refused the same way
    boxes = _csv(tmp_path / "b.csv", ["Image", "x0", "y0", "x1", "y1"], [[photos[2].name, 0, 0, 41, 10]])
    labels = _csv(tmp_path / "l.csv", ["image", "individual"], [[photos[2].name, "w1"]])
    assert main(["catalogue", "add", str(cat), "--photos", str(tmp_path / "ph"), "--labels", str(labels),
                 "--boxes", str(boxes)]) == 2
    assert "box 0,0,41,10 leaves the 40x40 image" in capsys.readouterr().err and _state(cat) == before
    assert good == photos[0].read_bytes()


def _older_catalogue_with_a_bad_photo(tmp_path):
    """A catalogue as an earlier version let it be: a text file accepted as a photo of 'w_bad'."""
    from whale.catalogue.db import now
    from whale.catalogue.ingest import add_photos

    photos = _photos(tmp_path / "ph", 4)
    cat_dir = tmp_path / "cat"
    with Catalogue.create(cat_dir) as cat:
        add_photos(cat, _csv(tmp_path / "l.csv", ["image", "individual"], [[p.name, f"w{i % 2}"]
                                                                           for i, p in enumerate(photos)]),
                   tmp_path / "ph", progress=False)
        text = tmp_path / "notes.jpg"
        text.write_text("field notes, not a photo")
        digest = file_hash(text)
        (cat_dir / "images" / digest[:2]).mkdir(exist_ok=True)
        (cat_dir / "images" / digest[:2] / f"{digest}.jpg").write_bytes(text.read_bytes())
        with cat.transaction() as db:
            db.execute("INSERT INTO individuals VALUES ('w_bad', ?, 'old')", (now(),))
            db.execute("INSERT INTO images VALUES (?, ?, ?, 'w_bad', NULL, ?)",
                       (digest, f"images/{digest[:2]}/{digest}.jpg", str(text), now()))
            db.execute("INSERT INTO sightings (image, individual) VALUES (?, 'w_bad')", (digest,))
    return cat_dir, digest, photos


def test_check_names_every_bad_photo_and_feature_and_remove_takes_them_out_after_asking(tmp_path, capsys,
                                                                                        monkeypatch):
    import io

    from whale.catalogue.features import features_file
    from whale.cli import main

    cat, bad, photos = _older_catalogue_with_a_bad_photo(tmp_path)
    with Catalogue.open(cat) as c:  # features of two photos, as `index` writes them; one file then damaged
        hashes = [file_hash(p) for p in photos]  # of w0, w1, w0, w1
        for h, values in ((hashes[0], np.ones((1, 1, 1, 4), np.float32)), (hashes[1], np.zeros((1, 1, 1, 4)))):
            buf = io.BytesIO()
            np.save(buf, values)
            rel = features_file("fp", buf.getvalue())
            (cat / rel).parent.mkdir(parents=True, exist_ok=True)
            (cat / rel).write_bytes(buf.getvalue())
            with c.transaction() as db:
                db.execute("INSERT INTO features VALUES (?, 'fp', ?, 0)", (h, rel))
        damaged = cat / c.query("SELECT file FROM features WHERE hash = ?", (hashes[1],))[0][0]
        flipped = cat / c.query("SELECT file FROM images WHERE hash = ?", (hashes[2],))[0][0]
    damaged.write_bytes(damaged.read_bytes()[:-4] + b"\x00\x00\x80\x7f")  # a NaN: other bytes than its name's
    flipped.write_bytes(flipped.read_bytes()[:-1] + b"\x00")
    assert main(["catalogue", "check", str(cat)]) == 2
    out, err = capsys.readouterr()
    lines = out.strip().splitlines()
    assert len(lines) == 3, out
    assert any(bad[:12] in line and "'w_bad'" in line and "not a readable image" in line and
               f"remove {cat} {bad[:12]}" in line for line in lines)
    assert any(hashes[2][:12] in line and "does not hold the bytes of its hash" in line for line in lines)
    assert any(f"features of photo {hashes[1][:12]}" in line and "does not hold the bytes" in line for line in lines)
    assert "3 problems in 5 photos, 2 feature rows, 2 feature files (listed above)" in err
    # remove asks first: no answer (no terminal) is a refusal naming --yes; "n" removes nothing
    def counts():
        with Catalogue.open(cat) as c:
            return c.counts()

    before = counts()
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert main(["catalogue", "remove", str(cat), bad[:8]]) == 2
    assert "add --yes" in capsys.readouterr().err and counts() == before
    monkeypatch.setattr("sys.stdin", io.StringIO("n\n"))
    assert main(["catalogue", "remove", str(cat), bad[:8]]) == 0
    out = capsys.readouterr().out
    assert "remove 1 photo, 1 sightings and 0 feature rows:" in out and "'w_bad', left without photos" in out
    assert "nothing removed" in out and counts() == before
    monkeypatch.setattr("sys.stdin", io.StringIO("y\n"))
    assert main(["catalogue", "remove", str(cat), bad[:8]]) == 0
    assert "removed 1 photos and 1 individuals" in capsys.readouterr().out
    with Catalogue.open(cat) as c:
        assert "w_bad" not in c.individuals() and c.counts()["images"] == 4
    # by the path it was added from (the damaged one), by its individual; --yes asks nothing
    assert main(["catalogue", "remove", str(cat), str(photos[2]), "--yes"]) == 0
    assert main(["catalogue", "remove", str(cat), "w1", "--yes"]) == 0
    out = capsys.readouterr().out
    assert "remove individual 'w1' with its 2 photos, 2 sightings and 1 feature rows:" in out
    assert main(["catalogue", "check", str(cat)]) == 0
    assert "checked 1 photos, 1 feature rows, 1 feature files: every photo and feature" in capsys.readouterr().out
    assert _leftovers(cat) == [] and not damaged.exists()
    for what, message in (("zz", "no individual or photo 'zz'"), ("0" * 5, "no individual or photo '00000'")):
        assert main(["catalogue", "remove", str(cat), what, "--yes"]) == 2
        assert message in capsys.readouterr().err


# ------------------------------------------------------------------ redecisions, unlisted matches, export
def test_redeciding_skip_undoes_the_earlier_decision_and_an_emptied_new_individual_goes(tmp_path, capsys):
    from whale.catalogue.decisions import accept
    from whale.catalogue.ingest import add_photos
    from whale.cli import main

    known, new = _photos(tmp_path / "known", 2), _photos(tmp_path / "new", 3, seed=1)
    cat = tmp_path / "cat"
    header = ["photo", "decision", "individual"]
    with Catalogue.create(cat) as c:
        add_photos(c, _csv(tmp_path / "k.csv", ["image", "individual"], [[p.name, "w0"] for p in known]),
                   tmp_path / "known", progress=False)
        (tmp_path / "new" / "same.png").write_bytes(known[0].read_bytes())  # a catalogue photo, taken again
        _batch(c, [*new, tmp_path / "new" / "same.png"])
        accept(c, "b1", _csv(tmp_path / "d.csv", header, [[new[0].name, "new", "w9"], [new[1].name, "match", "w0"],
                                                           ["same.png", "match", "w0"]]))
        with c.transaction() as db:  # features of the first new photo, as `index` would store them
            db.execute("INSERT INTO features VALUES (?, 'fp', 'features/fp/x.npy', 0)", (file_hash(new[0]),))
    undo = _csv(tmp_path / "u.csv", header, [[new[0].name, "skip", ""], [new[1].name, "skip", ""],
                                             ["same.png", "skip", ""]])
    assert main(["catalogue", "accept", str(cat), "--batch", "b1", "--decisions", str(undo), "--quiet"]) == 2
    assert "was decided 'new:w9' before; --redecide" in capsys.readouterr().err
    assert main(["catalogue", "accept", str(cat), "--batch", "b1", "--decisions", str(undo), "--redecide"]) == 0
    assert "3 skipped (2 of them undoing an earlier decision: photo removed)" in capsys.readouterr().out
    with Catalogue.open(cat) as c:
        assert c.individuals() == {"w0"}  # w9 had only the undone photo
        held = {h for h, in c.query("SELECT hash FROM images")}
        assert held == {file_hash(p) for p in known}  # the catalogue's own photo stays, with its sighting
        assert c.counts()["sightings"] == 2 and c.counts()["features"] == 0
        assert [d for _, d in c.query("SELECT photo_hash, decided FROM decisions ORDER BY id")][-3:] == ["skip"] * 3
    assert _leftovers(cat) == []
    # deciding it again brings the photo back, as a sighting of that decision
    again = _csv(tmp_path / "a.csv", header, [[new[0].name, "new", "w9"]])
    assert main(["catalogue", "accept", str(cat), "--batch", "b1", "--decisions", str(again), "--redecide"]) == 0
    with Catalogue.open(cat) as c:
        assert c.query("SELECT individual FROM images WHERE hash = ?", (file_hash(new[0]),)) == [("w9",)]
        assert c.query("SELECT d.decided FROM sightings s JOIN decisions d ON d.id = s.decision "
                       "WHERE s.image = ?", (file_hash(new[0]),)) == [("new:w9",)]


def test_accept_refuses_an_individual_outside_the_candidates_unless_asked(tmp_path, capsys):
    from whale.catalogue.ingest import add_photos
    from whale.cli import main

    known, new = _photos(tmp_path / "known", 2), _photos(tmp_path / "new", 1, seed=1)
    cat = tmp_path / "cat"
    with Catalogue.create(cat) as c:
        add_photos(c, _csv(tmp_path / "k.csv", ["image", "individual"], [[known[0].name, "w0"], [known[1].name, "x1"]]),
                   tmp_path / "known", progress=False)
        _batch(c, new, candidates=(Candidate("w0", 0.8, str(known[0])),))
    dec = _csv(tmp_path / "d.csv", ["photo", "decision", "individual"], [[new[0].name, "match", "x1"]])
    accept = ["catalogue", "accept", str(cat), "--batch", "b1", "--decisions", str(dec)]
    assert main(accept) == 2
    assert "'x1' is not a candidate of" in capsys.readouterr().err
    with Catalogue.open(cat) as c:
        assert c.counts()["decisions"] == 0
    assert main([*accept, "--allow-unlisted"]) == 0
    with Catalogue.open(cat) as c:
        assert c.query("SELECT individual FROM images WHERE hash = ?", (file_hash(new[0]),)) == [("x1",)]


def test_export_is_read_back_by_add_as_it_is(tmp_path, capsys):
    from whale.catalogue.decisions import accept
    from whale.catalogue.ingest import add_photos
    from whale.cli import main

    known, new = _photos(tmp_path / "known", 5), _photos(tmp_path / "new", 2, seed=1)
    cat = tmp_path / "cat"
    with Catalogue.create(cat) as c:
        add_photos(c, _csv(tmp_path / "k.csv", ["image", "individual", "date", "location", "encounter"],
                           [[p.name, f"w{i % 2}", "2024-05-0{i}", "Bay, \"north\"" if i else "", f"e{i}"]
                            for i, p in enumerate(known)]), tmp_path / "known",
                   _csv(tmp_path / "boxes.csv", ["Image", "x0", "y0", "x1", "y1"], [[known[1].name, 2, 3, 30, 33]]),
                   progress=False)
        _batch(c, new)
        accept(c, "b1", _csv(tmp_path / "d.csv", ["photo", "decision", "individual"],
                             [[new[0].name, "new", "w9"], [new[1].name, "match", "w0"]]), sighting={"date": "2025"})
    first, again = tmp_path / "export", tmp_path / "again"
    assert main(["catalogue", "export", str(cat), "--out", str(first)]) == 0
    assert main(["catalogue", "add", str(tmp_path / "copy"), "--photos", str(first), "--labels",
                 str(first / "sightings.csv"), "--boxes", str(first / "boxes.csv")]) == 0
    assert "added 7 photos (3 new individuals" in capsys.readouterr().out
    assert main(["catalogue", "export", str(tmp_path / "copy"), "--out", str(again)]) == 0

    def files(folder, *names):
        return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*"))
                if p.is_file() and (not names or p.name in names or "photos" in p.parts)}

    assert files(again, "sightings.csv", "boxes.csv") == files(first, "sightings.csv", "boxes.csv")
    assert len(files(first, "boxes.csv")) == 8  # 7 photos and boxes.csv; sightings.csv holds sources and dates
    with open(first / "sightings.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert {r["source"] for r in rows} >= {str(known[0].resolve()), str(new[0].resolve())}
    assert {r["date"] for r in rows if r["individual"] == "w9"} == {"2025"}

    def ids(folder):
        with open(folder / "individuals.csv") as fh:
            return [(r["individual"], r["images"]) for r in csv.DictReader(fh)]

    assert ids(again) == ids(first) == [("w0", "4"), ("w1", "2"), ("w9", "1")]
    # again into the same folder: the same files; a folder of other files is refused
    assert main(["catalogue", "export", str(cat), "--out", str(first)]) == 0
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    assert main(["catalogue", "export", str(cat), "--out", str(tmp_path / "other")]) == 2
    assert "is not an earlier export" in capsys.readouterr().err


def test_an_export_that_fails_leaves_no_folder_it_created(tmp_path, monkeypatch, capsys):
    import whale.catalogue.export as export_module
    from whale.catalogue.ingest import add_photos
    from whale.cli import main
    from whale.core.errors import OutputError

    photos = _photos(tmp_path / "ph", 3)
    with Catalogue.create(tmp_path / "cat") as c:
        add_photos(c, _csv(tmp_path / "k.csv", ["image", "individual"], [[p.name, "w0"] for p in photos]),
                   tmp_path / "ph", progress=False)
    real, calls = export_module.atomic_write, []

    def full_disk(path, write, **kwargs):
        calls.append(path)
        if len(calls) == 2:
            raise OutputError(f"{path}: no space left on the device")
        return real(path, write, **kwargs)

    monkeypatch.setattr(export_module, "atomic_write", full_disk)
    assert main(["catalogue", "export", str(tmp_path / "cat"), "--out", str(tmp_path / "out" / "x")]) == 2
    assert "no space left" in capsys.readouterr().err
    assert not (tmp_path / "out" / "x").exists()


def _decided_catalogue(tmp_path, decisions: list[list[str]]):
    """``tmp_path/cat``: two photos of w0, and batch b1 of one new photo per decision (``[decision, individual]``),
    accepted; returns the known and the new photos."""
    from whale.catalogue.decisions import accept
    from whale.catalogue.ingest import add_photos

    known, new = _photos(tmp_path / "known", 2), _photos(tmp_path / "new", len(decisions), seed=1)
    with Catalogue.create(tmp_path / "cat") as c:
        add_photos(c, _csv(tmp_path / "k.csv", ["image", "individual"], [[p.name, "w0"] for p in known]),
                   tmp_path / "known", progress=False)
        _batch(c, new)
        accept(c, "b1", _csv(tmp_path / "d.csv", ["photo", "decision", "individual"],
                             [[n.name, *d] for n, d in zip(new, decisions)]))
    return known, new


def test_a_version_1_catalogue_is_migrated_and_knows_which_sightings_decisions_added(tmp_path):
    import sqlite3

    from whale.catalogue.db import DB_NAME

    known, new = _decided_catalogue(tmp_path, [["match", "w0"]])
    conn = sqlite3.connect(tmp_path / "cat" / DB_NAME)
    conn.executescript("ALTER TABLE sightings DROP COLUMN decision; UPDATE meta SET value = '1' "
                       "WHERE key = 'schema_version';")
    conn.close()
    with Catalogue.open(tmp_path / "cat") as c:
        assert c.meta("schema_version") == "3"
        added = dict(c.query("SELECT image, decision FROM sightings"))
    assert added == {file_hash(known[0]): None, file_hash(known[1]): None, file_hash(new[0]): 1}


def test_a_version_2_catalogue_is_migrated_to_3_keeping_its_decisions_and_may_record_an_undo(tmp_path):
    import sqlite3

    from whale.catalogue.db import DB_NAME
    from whale.catalogue.decisions import record
    from whale.catalogue.report import Decision

    known, new = _decided_catalogue(tmp_path, [["match", "w0"], ["skip", ""]])
    with Catalogue.open(tmp_path / "cat") as c:
        before = {t: c.query(f"SELECT * FROM {t} ORDER BY 1") for t in ("decisions", "sightings", "images")}
    conn = sqlite3.connect(tmp_path / "cat" / DB_NAME)  # the decisions table as version 2 made it: no 'undo'
    conn.executescript("PRAGMA foreign_keys=OFF; BEGIN; CREATE TABLE d2 (id INTEGER PRIMARY KEY, batch TEXT NOT NULL, "
                       "photo TEXT NOT NULL, photo_hash TEXT NOT NULL, decision TEXT NOT NULL CHECK (decision IN "
                       "('match', 'new', 'skip')), decided TEXT NOT NULL, decided_by TEXT NOT NULL, decided_at TEXT "
                       "NOT NULL); INSERT INTO d2 SELECT * FROM decisions; DROP TABLE decisions; ALTER TABLE d2 "
                       "RENAME TO decisions; UPDATE meta SET value = '2' WHERE key = 'schema_version'; COMMIT;")
    with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
        conn.execute("INSERT INTO decisions (batch, photo, photo_hash, decision, decided, decided_by, decided_at) "
                     "VALUES ('b1', 'x', 'h', 'undo', 'undo', 'me', 'now')")
    conn.close()
    with Catalogue.open(tmp_path / "cat") as c:
        assert c.meta("schema_version") == "3"
        assert {t: c.query(f"SELECT * FROM {t} ORDER BY 1") for t in before} == before  # rows and ids kept
        assert c.query("PRAGMA foreign_key_check") == []
        assert record(c, "b1", [Decision(str(new[0].resolve()), "undo", None, 0)])["undone"] == 1
        assert c.query("SELECT decision FROM decisions ORDER BY id DESC LIMIT 1") == [("undo",)]


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
    props = read_proposals(_proposals_path(cat, "t1"))
    assert len(props.photos) == len(list((data / "test").iterdir()))
    for ph in props.photos:
        assert len(ph.candidates) == 3 and len({c.individual for c in ph.candidates}) == 3
        assert [c.score for c in ph.candidates] == sorted((c.score for c in ph.candidates), reverse=True)
        assert props.scale == "probability" and props.threshold == 0.5  # calibrated on the catalogue's own photos
        assert all(0 <= c.probability <= 1 for c in ph.candidates)
        assert ph.possibly_new == (ph.candidates[0].probability < props.threshold)
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
    # a decided batch is never replaced silently: match into it refuses; --rematch keeps the decisions and says so
    old_file, before = _proposals_path(cat, "t1"), _state(cat)
    match = ["catalogue", "match", str(cat), "--photos", str(data / "test"), "--top", "2", "--batch", "t1", *common]
    assert main(match) == 2
    err = capsys.readouterr().err
    assert "batch 't1' exists already" in err and f"{len(props.photos)} decisions" in err and "--rematch" in err
    assert _state(cat) == before
    assert main([*match, "--rematch"]) == 0
    assert f"re-matched: its {len(props.photos)} decisions are kept" in capsys.readouterr().out
    after = _state(cat)
    assert after["decisions"] == before["decisions"] and after["proposals"] != before["proposals"]
    assert not old_file.exists() and len(read_proposals(_proposals_path(cat, "t1")).photos[0].candidates) == 2
    assert main(["catalogue", "accept", str(cat), "--batch", "t1", "--decisions", str(dec), *common]) == 0
    assert f"0 skipped, {len(props.photos)} already decided so" in capsys.readouterr().out


def _proposals_path(cat_dir, batch):
    """The proposals file the batch's row names."""
    with Catalogue.open(cat_dir) as c:
        return cat_dir / c.query("SELECT proposals FROM batches WHERE name = ?", (batch,))[0][0]


NO_BACKEND = ("import sys; from whale.cli import main; status = main(sys.argv[1:]); "
              "print('BACKEND LOADED' if 'keras' in sys.modules or 'tensorflow' in sys.modules else 'no backend'); "
              "sys.exit(status)")


def test_a_bad_batch_name_or_an_existing_batch_is_refused_before_the_backend_loads(decided, tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    run = tmp_path / "no-run"  # never opened: the refusals come first
    for batch, words in (("bad name!", "batch name 'bad name!'"), ("b1", "batch 'b1' exists already (matched")):
        proc = subprocess.run([sys.executable, "-c", NO_BACKEND, "catalogue", "match", str(decided), "--run", str(run),
                               "--photos", str(tmp_path / "more"), "--batch", batch], capture_output=True, text=True,
                              cwd=Path(__file__).resolve().parents[1], timeout=120)
        assert proc.returncode == 2 and "no backend" in proc.stdout, proc.stdout + proc.stderr
        assert words in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_index_names_a_catalogue_photo_it_cannot_read_and_runs_once_it_is_removed(trained, tmp_path, capsys):
    from whale.cli import main

    _, run = trained
    cat, bad, _ = _older_catalogue_with_a_bad_photo(tmp_path)
    assert main(["catalogue", "index", str(cat), "--run", str(run), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"catalogue photo {bad[:12]} of 'w_bad' (added from {tmp_path / 'notes.jpg'}) cannot be read" in err
    assert f"`whale catalogue remove {cat} {bad[:12]}` removes it" in err and len(err.strip().splitlines()) == 1
    assert _leftovers(cat) == []
    assert main(["catalogue", "remove", str(cat), bad, "--yes"]) == 0
    assert main(["catalogue", "index", str(cat), "--run", str(run), "--quiet"]) == 0
    assert "4 photos scored" in capsys.readouterr().out
    assert main(["catalogue", "check", str(cat)]) == 0


def _race(cat, commands, tmp_path, hold=True):
    """Run ``whale catalogue`` ``commands`` at once on catalogue ``cat``; with ``hold`` this test holds the
    catalogue's lock until every one waits for it, then lets them all go. Returns ``(exit codes, stderrs)``."""
    import fcntl
    import subprocess
    import sys
    import time
    from pathlib import Path

    from whale.catalogue.db import LOCK_NAME

    lock = None
    if hold:
        lock = open(cat / LOCK_NAME, "a+")
        fcntl.flock(lock, fcntl.LOCK_EX)
    errs = [tmp_path / f"race-err{i}" for i in range(len(commands))]
    procs = [subprocess.Popen([sys.executable, "-m", "whale.catalogue", *argv, "--quiet"], stdout=subprocess.DEVNULL,
                              stderr=err.open("w"), cwd=Path(__file__).resolve().parents[1])
             for argv, err in zip(commands, errs)]
    deadline = time.time() + 300
    while hold and time.time() < deadline and not all("waiting for another command" in e.read_text() for e in errs):
        assert all(p.poll() is None for p in procs), [e.read_text() for e in errs]
        time.sleep(0.1)
    if lock is not None:
        fcntl.flock(lock, fcntl.LOCK_UN)
        lock.close()
    codes = [p.wait(timeout=1800) for p in procs]
    return codes, [e.read_text() for e in errs]


def test_two_adds_and_two_accepts_at_once_run_one_after_the_other(tmp_path):
    photos = _photos(tmp_path / "ph", 10)
    cat = tmp_path / "cat"
    first = _csv(tmp_path / "a.csv", ["image", "individual"], [[p.name, f"w{i % 2}"] for i, p in enumerate(photos[:7])])
    second = _csv(tmp_path / "b.csv", ["image", "individual"], [[p.name, f"w{i % 2}"]
                                                                 for i, p in enumerate(photos) if i >= 4])
    # two adds creating one catalogue at once, sharing three photos
    codes, errs = _race(cat, [["add", str(cat), "--photos", str(tmp_path / "ph"), "--labels", str(labels)]
                              for labels in (first, second)], tmp_path, hold=False)
    assert codes == [0, 0], errs
    with Catalogue.open(cat) as c:
        assert (c.counts()["images"], c.counts()["sightings"], c.individuals()) == (10, 10, {"w0", "w1"})
        new = _photos(tmp_path / "new", 2, seed=1)
        _batch(c, new)
    # two accepts deciding one photo differently: one records, the other finds it decided
    decisions = [_csv(tmp_path / f"d{w}.csv", ["photo", "decision", "individual"], [[new[0].name, "match", w]])
                 for w in ("w0", "w1")]
    codes, errs = _race(cat, [["accept", str(cat), "--batch", "b1", "--decisions", str(d)] for d in decisions],
                        tmp_path)
    assert sorted(codes) == [0, 2] and "was decided 'w" in errs[codes.index(2)], errs
    assert not any("Traceback" in e for e in errs)
    with Catalogue.open(cat) as c:
        assert c.counts()["decisions"] == 1 and c.counts()["images"] == 11
    assert _leftovers(cat) == []


def test_a_command_that_waited_while_its_catalogue_was_removed_writes_nothing(tmp_path):
    """What a failed `add` does to the empty catalogue it created (removes it, under the lock) must not let
    another command, opened on it before, write into the removed file and exit 0."""
    import shutil

    from whale.catalogue.ingest import add_photos

    photos = _photos(tmp_path / "ph", 2)
    waiting = Catalogue.create(tmp_path / "cat")
    shutil.rmtree(tmp_path / "cat")
    Catalogue.create(tmp_path / "cat").close()  # and another catalogue made there since
    labels = _csv(tmp_path / "l.csv", ["image", "individual"], [[p.name, "w0"] for p in photos])
    with pytest.raises(DataError, match="removed or replaced while this command waited"):
        add_photos(waiting, labels, tmp_path / "ph", progress=False)
    waiting.close()
    with Catalogue.open(tmp_path / "cat") as c:
        assert c.counts()["images"] == 0


@pytest.mark.slow
def test_three_matches_at_once_run_one_after_the_other(trained, indexed, tmp_path):
    """A real race: three `whale catalogue match` processes wait on one catalogue that has no features yet (this
    test holds its lock), then all go at once: one indexes, the others reuse its features; of two into one
    batch, one writes it and the other refuses (no traceback, no orphan file)."""
    import shutil

    data, run = trained
    cat = tmp_path / "cat"
    shutil.copytree(indexed[0], cat)
    codes, errs = _race(cat, [["match", str(cat), "--run", str(run), "--photos", str(data / "test"), "--batch", batch]
                              for batch in ("same", "same", "other")], tmp_path)
    assert sorted(codes[:2]) == [0, 2] and codes[2] == 0, errs
    assert "batch 'same' exists already" in errs[codes.index(2)] and not any("Traceback" in e for e in errs), errs
    with Catalogue.open(cat) as c:
        n_images = c.counts()["images"]
        assert c.query("SELECT COUNT(*), COUNT(DISTINCT hash), COUNT(DISTINCT file) FROM features") == \
            [(n_images, n_images, 1)]
        assert sorted(n for n, in c.query("SELECT name FROM batches")) == ["other", "same"]
    assert _leftovers(cat) == []


# ------------------------------------------------------------------ kill -9 at each step
def _state(cat_dir):
    """What a catalogue holds, minus times and the names of files named by their content; checks every file a
    row names, and holds each batch's proposals file (catalogue paths made relative, so copies compare)."""
    import sqlite3

    from whale.catalogue.db import DB_NAME, TABLES

    conn = sqlite3.connect(cat_dir / DB_NAME)
    out = {}
    for table in TABLES:
        cols = [c[1] for c in conn.execute(f"PRAGMA table_info({table})")]
        keep = [c for c in cols if not c.endswith("_at") and (table, c) not in (("features", "file"),
                                                                                  ("batches", "proposals"))]
        rows = sorted(conn.execute(f"SELECT {', '.join(keep)} FROM {table}").fetchall(), key=repr)
        out[table] = [r for r in rows if table != "meta" or not r[0].endswith("_at")]
    for digest, rel in conn.execute("SELECT hash, file FROM images"):
        assert file_hash(cat_dir / rel) == digest, f"{rel}: missing or not the bytes recorded"
    for rel, row in conn.execute("SELECT file, row FROM features"):
        assert row < np.load(cat_dir / rel, mmap_mode="r").shape[2], f"{rel}: row {row} missing"
    # candidates' catalogue images by their place in the catalogue, whichever copy of it wrote the file
    out["proposals files"] = sorted((name, re.sub(r'"[^"]*/(images/[0-9a-f]{2}/)', r'"CAT/\1',
                                                  (cat_dir / rel).read_text()))
                                    for name, rel in conn.execute("SELECT name, proposals FROM batches"))
    conn.close()
    return out


def _leftovers(cat_dir):
    """Files of the catalogue that no row names: partial writes, unrecorded copies, old proposals."""
    import sqlite3

    from whale.catalogue.db import DB_NAME

    conn = sqlite3.connect(cat_dir / DB_NAME)
    named = {r[0] for sql in ("SELECT file FROM images", "SELECT file FROM features", "SELECT proposals FROM batches")
             for r in conn.execute(sql)}
    conn.close()
    return sorted(p.relative_to(cat_dir).as_posix() for folder in ("images", "features", "batches")
                  for p in (cat_dir / folder).rglob("*") if p.is_file() and "review" not in p.parts
                  and p.relative_to(cat_dir).as_posix() not in named)


KILLER = """
import contextlib, os, signal, sys
from importlib import import_module
target, when, nth = sys.argv[1], sys.argv[2], int(sys.argv[3])
module, _, attr = target.partition(":")
owner = import_module(module)
*path, name = attr.split(".")
for part in path:
    owner = getattr(owner, part)
real, calls = getattr(owner, name), [0]

def reached():
    calls[0] += 1
    return calls[0] == nth

def die():
    os.kill(os.getpid(), signal.SIGKILL)

if when in ("commit", "committed"):  # the nth transaction: inside it (rows written, no COMMIT), or just after it
    @contextlib.contextmanager
    def patched(*args, **kwargs):
        with real(*args, **kwargs) as db:
            yield db
            hit = reached()
            if hit and when == "commit":
                die()
        if hit:
            die()
else:  # before or after the nth call
    def patched(*args, **kwargs):
        hit = reached()
        if hit and when == "before":
            die()
        out = real(*args, **kwargs)
        if hit:
            die()
        return out
setattr(owner, name, patched)
from whale.catalogue.cli import main
sys.exit(main(sys.argv[4:]))
"""
"""Runs ``whale catalogue ARGV`` killing itself (SIGKILL) at one step: ``TARGET WHEN N ARGV...``."""


def _kill_steps(cat_dir, argv, steps, tmp_path):
    """Run ``argv`` on copies of ``cat_dir``, each killed (SIGKILL) at one of ``steps``: (``module:attr``,
    ``before`` | ``after`` | ``commit`` | ``committed``, n-th call). Every step must be reached; each killed copy
    must equal the state before or after; the command run again must reach after and leave no stray file.
    Returns ``(landed before, landed after)``."""
    import shutil
    import signal
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    before = _state(cat_dir)

    def run(target, *killer):
        head = [sys.executable, "-c", KILLER, *killer] if killer else [sys.executable, "-m", "whale.catalogue"]
        cmd = head + [a.replace("{cat}", str(target)) for a in argv] + ["--quiet"]
        return subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=1800)

    ref = tmp_path / "ref"
    shutil.copytree(cat_dir, ref)
    proc = run(ref)
    assert proc.returncode == 0, proc.stderr[-2000:]
    after = _state(ref)
    assert after != before and _leftovers(ref) == []
    landed = [0, 0]
    for i, step in enumerate(steps):
        copy = tmp_path / f"k{i}"
        shutil.copytree(cat_dir, copy)
        proc = run(copy, *map(str, step))
        assert proc.returncode == -signal.SIGKILL, f"{step}: never reached (status {proc.returncode}) {proc.stderr}"
        got = _state(copy)
        assert got in (before, after), f"killed at {step}: neither before nor after"
        landed[got == after] += 1
        proc = run(copy)
        assert proc.returncode == 0, f"again after {step}: {proc.stderr[-2000:]}"
        assert _state(copy) == after and _leftovers(copy) == [], step
        shutil.rmtree(copy)
    return landed


TRANSACTION = "whale.catalogue.db:Catalogue.transaction"
ADD_STEPS = (("whale.catalogue.ingest:check_photo", "before", 30),  # decoding, nothing written
             ("shutil:copyfile", "after", 40),  # a photo copied to its temporary name, not renamed
             ("whale.catalogue.ingest:flush", "before", 1),  # every photo copied, none recorded
             (TRANSACTION, "commit", 1), (TRANSACTION, "committed", 1))
ACCEPT_STEPS = (("shutil:copyfile", "after", 30), ("whale.catalogue.decisions:flush", "before", 1),
                (TRANSACTION, "commit", 1), (TRANSACTION, "committed", 1))


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


def test_add_killed_at_each_step_leaves_the_catalogue_before_or_after(decided, tmp_path):
    add = ["add", "{cat}", "--photos", str(tmp_path / "more"), "--labels", str(tmp_path / "more.csv")]
    assert _kill_steps(decided, add, ADD_STEPS, tmp_path / "add") == [4, 1]
    assert _state(decided)["decisions"], "the accepted decisions of b1 are there"


def test_accept_killed_at_each_step_leaves_the_catalogue_before_or_after(decided, tmp_path):
    accept_ = ["accept", "{cat}", "--batch", "b2", "--decisions", str(tmp_path / "d2.csv")]
    assert _kill_steps(decided, accept_, ACCEPT_STEPS, tmp_path / "accept") == [3, 1]


@pytest.fixture(scope="module")
def indexed(trained, tmp_path_factory):
    """A catalogue of the tiny run's training photos (half of them), and a copy indexed with a decided batch."""
    import shutil

    import pandas as pd

    from whale.catalogue.decisions import accept
    from whale.catalogue.features import RunFeatures
    from whale.catalogue.ingest import add_photos
    from whale.catalogue.match import match_batch

    data, run = trained
    root = tmp_path_factory.mktemp("indexed")
    known = pd.read_csv(data / "train.csv")
    known = known[known["Id"] != "new_whale"]
    labels = _csv(root / "half.csv", ["Image", "Id"], known.iloc[: len(known) // 2].values.tolist())
    with Catalogue.create(root / "bare") as cat:
        add_photos(cat, labels, data / "train", data / "bounding_boxes.csv", progress=False)
    shutil.copytree(root / "bare", root / "decided")
    with Catalogue.open(root / "decided") as cat:
        props, _ = match_batch(cat, RunFeatures(run, verbose=False), data / "test", "t1", top=3)
        accept(cat, "t1", _csv(root / "d.csv", ["photo", "decision", "individual"],
                               [[props.photos[0].photo, "match", props.photos[0].candidates[0].individual],
                                [props.photos[1].photo, "new", "w_field"]]))
    return root / "bare", root / "decided"


@pytest.mark.slow
def test_index_and_a_rematch_killed_at_each_step_leave_the_catalogue_before_or_after(trained, indexed, tmp_path):
    data, run = trained
    index = ["index", "{cat}", "--run", str(run)]
    steps = (("whale.catalogue.features:RunFeatures.gallery_features", "before", 1),  # scoring
             ("whale.catalogue.features:fsync_dir", "after", 1),  # the features file written, no row
             (TRANSACTION, "commit", 1), (TRANSACTION, "committed", 1))
    assert _kill_steps(indexed[0], index, steps, tmp_path / "index") == [3, 1]
    rematch = ["match", "{cat}", "--run", str(run), "--photos", str(data / "test"), "--batch", "t1", "--top", "2",
               "--rematch"]
    steps = (("whale.catalogue.match:propose", "before", 1),  # the new photos scored
             ("whale.catalogue.match:write_proposals", "after", 1),  # the new proposals file written, not recorded
             (TRANSACTION, "commit", 1), (TRANSACTION, "committed", 1))
    assert _kill_steps(indexed[1], rematch, steps, tmp_path / "match") == [3, 1]


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


def _synthetic_catalogue(tmp_path):
    """``tmp_path/cat`` holding the identified photos of a small synthetic competition (``tmp_path/data``, whose
    ``test/`` is the batch to match); returns ``(data, cat, the catalogued rows of train.csv)``."""
    import pandas as pd

    from whale.cli import main
    from whale.data.synth import generate

    data = generate(tmp_path / "data", n_ids=8, seed=5, size=96, progress=False)
    cat = tmp_path / "cat"
    train = pd.read_csv(data / "train.csv")
    known = train[train["Id"] != "new_whale"]
    labels = _csv(tmp_path / "labels.csv", ["Image", "Id"], known.values.tolist())
    assert main(["catalogue", "add", str(cat), "--photos", str(data / "train"), "--labels", str(labels),
                 "--quiet"]) == 0
    return data, cat, known


def test_match_by_keypoints_needs_no_run_keeps_its_features_and_reviews_with_match_views(tmp_path, capsys,
                                                                                         monkeypatch):
    from whale.cli import main

    data, cat, known = _synthetic_catalogue(tmp_path)
    assert main(["catalogue", "match", str(cat), "--method", "keypoints", "--photos", str(data / "test"),
                 "--top", "3", "--batch", "k1", "--quiet"]) == 0
    assert "possibly new (P(same whale) below 0.500)" in capsys.readouterr().out
    props = read_proposals(_proposals_path(cat, "k1"))
    assert props.run == "keypoints" and len(props.photos) == len(list((data / "test").iterdir()))
    assert props.scale == "probability" and props.threshold == 0.5
    calibration = list((cat / "calibration").glob("*.json"))
    assert len(calibration) == 1  # fitted on the catalogue's own photos, kept for the next match
    from whale.catalogue.calibration import read_calibration

    cal = read_calibration(calibration[0])
    for ph in props.photos:
        assert 1 <= len(ph.candidates) <= 3 and len({c.individual for c in ph.candidates}) == len(ph.candidates)
        assert [c.score for c in ph.candidates] == sorted((c.score for c in ph.candidates), reverse=True)
        np.testing.assert_allclose([c.probability for c in ph.candidates],  # both rounded to 6 digits
                                   cal.transform(np.float32([c.score for c in ph.candidates])), atol=2e-6)
        assert ph.possibly_new == (ph.candidates[0].probability < 0.5)
    stored = sorted(p for p in (cat / "keypoints").rglob("*.npz") if p.parent.name != "selectors")
    assert len(stored) == len(known) + len(props.photos)  # the catalogue's photos and the batch's, once each
    assert (cat / "batches" / "k1" / "keypoints.yaml").is_file()
    # a second batch extracts nothing again; a run is refused with the method
    import whale.keypoints.store as store_mod

    import whale.catalogue.calibration as calibration_mod

    monkeypatch.setattr(store_mod, "extract", lambda *a, **k: pytest.fail("extracted again"))
    monkeypatch.setattr(calibration_mod.PairCalibration, "fit", lambda *a, **k: pytest.fail("calibrated again"))
    assert main(["catalogue", "match", str(cat), "--method", "keypoints", "--photos", str(data / "test"),
                 "--batch", "k2", "--threshold", "0.9", "--quiet"]) == 0
    assert all(ph.possibly_new == (ph.candidates[0].probability < 0.9)
               for ph in read_proposals(_proposals_path(cat, "k2")).photos)
    # a threshold on scores (a run's scores/threshold.json, an earlier ensemble's) is not a probability: refused
    old = tmp_path / "old.threshold.json"
    old.write_text(json.dumps({"threshold": 0.15, "rule": "tuned on validation MAP@5"}))
    with pytest.raises(SystemExit):
        main(["catalogue", "match", str(cat), "--method", "keypoints", "--photos", str(data / "test"),
              "--batch", "k4", "--threshold", str(old), "--quiet"])
    assert "holds a threshold on a run's scores (0.15, tuned on validation MAP@5), not a probability" in \
        capsys.readouterr().err
    assert main(["catalogue", "match", str(cat), "--method", "keypoints", "--run", "runs/x", "--photos",
                 str(data / "test"), "--batch", "k3", "--quiet"]) == 2
    monkeypatch.undo()
    # the review page shows the keypoint matches of every photo and candidate; accept records a decision
    assert main(["catalogue", "review", str(cat), "--batch", "k1", "--quiet"]) == 0
    page = (cat / "batches" / "k1" / "review" / "index.html").read_text(encoding="utf-8")
    assert page.count('class="match"') == sum(len(ph.candidates) for ph in props.photos)
    assert main(["catalogue", "review", str(cat), "--batch", "k1", "--heatmaps", "--quiet"]) == 2
    first = props.photos[0]
    decisions = _csv(tmp_path / "d.csv", ["photo", "decision", "individual"],
                     [[first.photo, "match", first.candidates[0].individual]])
    assert main(["catalogue", "accept", str(cat), "--batch", "k1", "--decisions", str(decisions), "--quiet"]) == 0


def test_check_ties_every_keypoint_feature_file_to_its_photo_and_a_match_extracts_a_mismatched_one_again(
        tmp_path, capsys):
    from whale.cli import main

    data, cat, known = _synthetic_catalogue(tmp_path)
    match = ["catalogue", "match", str(cat), "--method", "keypoints", "--photos", str(data / "test"), "--batch", "k1",
             "--quiet"]
    assert main(match) == 0

    def proposed():
        return [(ph.photo, [(c.individual, c.score) for c in ph.candidates])
                for ph in read_proposals(_proposals_path(cat, "k1")).photos]

    before = proposed()
    assert main(["catalogue", "check", str(cat)]) == 0
    catalogued = {file_hash(data / "train" / name) for name in known["Image"]}
    stored = sorted(p for p in (cat / "keypoints").rglob("*.npz") if p.stem in catalogued)
    assert "keypoint feature files" in capsys.readouterr().out and len(stored) == len(known)
    # one catalogue photo's features copied over another's; another file as an earlier version wrote it
    copied, over, old = stored[0], stored[1], stored[2]
    over.write_bytes(copied.read_bytes())
    with np.load(old) as z:
        arrays = {k: z[k] for k in z.files if k not in ("photo", "content_sha256")}  # an earlier version wrote neither
    with open(old, "wb") as fh:
        np.savez(fh, **arrays)
    assert main(["catalogue", "check", str(cat)]) == 2
    out, err = capsys.readouterr()
    lines = out.strip().splitlines()
    assert len(lines) == 2 and "2 problems" in err
    assert any(over.relative_to(cat).as_posix() in line and f"holds the features of photo {copied.stem[:12]}" in line
               and "--method keypoints` extracts it again" in line for line in lines)
    assert any("1 keypoint feature files" in line and "records no photo" in line for line in lines)
    # loading refuses both: the re-match extracts them again and proposes what it proposed
    assert main(match + ["--rematch"]) == 0
    assert proposed() == before
    from whale.keypoints.store import read_entry

    assert read_entry(over, over.stem)[1] == "" and read_entry(old, old.stem)[1] == ""
    assert main(["catalogue", "check", str(cat)]) == 0


def test_keypoint_best_individuals_match_a_loop_over_each_individuals_photos():
    """The catalogue's best photo per individual (through ``IdGroups``) against an explicit loop, ties included."""
    from whale.catalogue.keypoints import best_individuals

    rng = np.random.default_rng(0)
    individuals = np.array(["b", "a", "c", "b", "a", "b"])
    scores = (rng.integers(0, 3, (5, 6)) / 2).astype(np.float32)  # many ties
    names, cols, vals = best_individuals(scores, individuals, top=2)
    assert names.shape == cols.shape == vals.shape == (5, 2)
    for i in range(5):
        for j in range(2):
            members = np.flatnonzero(individuals == names[i, j])
            assert cols[i, j] == members[np.argmax(scores[i, members])]  # the first photo of the best on a tie
            assert vals[i, j] == scores[i, members].max()
