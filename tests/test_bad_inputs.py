"""The bad-input catalogue of docs/bad-inputs.md: each entry's error (or documented skip), one test each."""

import numpy as np
import pytest
from PIL import Image

from whale.core.errors import ConfigError, DataError


def _png(path, h=40, w=60):
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (h, w, 3), dtype=np.uint8)).save(path, "PNG")


def _comp(root, train=("t1.png", "t2.png"), test=("a.png",), sample=None, boxes=None):
    (root / "train").mkdir(parents=True)
    (root / "test").mkdir()
    for name in train:
        _png(root / "train" / name)
    for name in test:
        _png(root / "test" / name)
    (root / "train.csv").write_text("Image,Id\n" + "".join(f"{n},w1\n" for n in train))
    if sample is not None:
        (root / "sample_submission.csv").write_text("Image,Id\n" + "".join(f"{n},x\n" for n in sample))
    if boxes is not None:
        (root / "bounding_boxes.csv").write_text("Image,x0,y0,x1,y1\n" + boxes)
    return root


@pytest.mark.parametrize("row, what", [("t1.png,nan,0,5,10\n", "x0 is 'nan'"),
                                       ("t1.png,0,0,inf,10\n", "x1 is 'inf'"),
                                       ("t1.png,9,0,3,10\n", "empty box"),
                                       ("t1.png,0,-4,5,10\n", "negative")])
def test_nan_inverted_and_negative_boxes_name_the_line(tmp_path, row, what):
    from whale.data import load_competition

    _comp(tmp_path, boxes=row)
    with pytest.raises(DataError, match=r"bounding_boxes\.csv, line 2") as err:
        load_competition(tmp_path)
    assert what in str(err.value)


def test_a_box_outside_the_image_names_the_file_and_a_partial_one_is_clipped(tmp_path):
    from whale.data import load_crop

    _png(tmp_path / "a.png", h=40, w=60)
    with pytest.raises(DataError, match=r"a\.png: box \(100, 0, 120, 10\) does not overlap the image of size 60x40"):
        load_crop(tmp_path / "a.png", (100, 0, 120, 10), 16, margin=0.0)
    assert load_crop(tmp_path / "a.png", (50, 30, 90, 70), 16, margin=0.0).shape == (16, 16, 3)  # clipped


def test_nan_or_inf_in_a_score_file_is_named(tmp_path):
    from whale.inference.scorefile import ScoreFileError, load_score_file, write_scores

    for bad in (np.nan, np.inf):
        scores = np.array([[0.5, bad]], dtype=np.float32)
        path = write_scores(tmp_path / "s.npz", scores, ["q.jpg"], ["a.jpg", "b.jpg"], ["w1", "w2"])
        with pytest.raises(ScoreFileError, match=r"s\.npz: scores must be finite; query 'q.jpg' vs gallery 'b.jpg'"):
            load_score_file(path)


def test_a_config_cannot_leave_no_mining_epoch():
    from whale.config import config_from_dict
    from whale.training.schedule import Schedule

    base = {"name": "t", "seed": 0, "model": {"branch": "tiny"}}
    stage = {"epochs": 3, "k": 1.0, "lr": 1e-3, "image_size": 32}
    for bad, key in (([], "stages"), ([{**stage, "epochs": 0}], r"stages\[0\]\.epochs")):
        with pytest.raises(ConfigError, match=key):
            config_from_dict({**base, "stages": bad})
    with pytest.raises(ConfigError, match="mining_interval"):
        config_from_dict({**base, "stages": [stage], "mining_interval": 0})
    # Every stage mines on its first epoch, so any valid config mines at least once per stage.
    cfg = config_from_dict({**base, "stages": [stage, stage], "mining_interval": 100})
    assert Schedule.from_config(cfg).minings() == 2


def test_an_empty_test_folder_is_an_error_for_scoring_and_a_warning_for_training(tmp_path):
    from whale.data import load_competition
    from whale.inference.runs import score_folder

    _comp(tmp_path, test=())
    assert load_competition(tmp_path).test_images == []
    with pytest.raises(DataError, match=r"test: no test images to score"):
        score_folder(tmp_path / "run", tmp_path, tmp_path / "x.npz")


def test_sample_submission_images_missing_from_test_are_listed(tmp_path):
    from whale.data import load_competition

    _comp(tmp_path, test=("a.png",), sample=("a.png", "gone.png"))
    with pytest.raises(DataError, match=r"sample_submission\.csv: 1 listed image\(s\) not found in .*gone\.png"):
        load_competition(tmp_path)


def test_image_names_differing_only_in_case_are_refused(tmp_path):
    from whale.data import load_competition

    _comp(tmp_path / "train_csv", train=("Tail.png", "tail.png"))
    with pytest.raises(DataError, match=r"train\.csv: Image names 'Tail.png' \(line 2\) and 'tail.png' \(line 3\) "
                                        r"differ only in case"):
        load_competition(tmp_path / "train_csv")
    _comp(tmp_path / "test_dir", test=("Q.png", "q.png"))
    with pytest.raises(DataError, match=r"test: image names that differ only in case: Q\.png, q\.png"):
        load_competition(tmp_path / "test_dir")


def test_a_zero_byte_image_is_named_when_it_is_decoded(tmp_path):
    from whale.data import load_competition, load_crop

    _comp(tmp_path)
    (tmp_path / "train" / "t2.png").write_bytes(b"")
    comp = load_competition(tmp_path)  # listed and present: reading the CSVs does not decode
    with pytest.raises(DataError, match=r"t2\.png: image file is empty \(0 bytes\)"):
        load_crop(comp.train_path("t2.png"), None, 16)


def test_a_byte_order_mark_is_accepted_in_every_csv_the_toolkit_reads(tmp_path):
    """Spreadsheet programs save "UTF-8 CSV" with a byte-order mark before the header: no column is named
    ``\\ufeffImage`` anywhere (catalogue labels and boxes, the competition's CSVs, a run's log)."""
    from whale.catalogue.db import Catalogue
    from whale.cli import main
    from whale.data import load_competition
    from whale.training.runlog import read_log

    bom = "\ufeff"
    (tmp_path / "ph").mkdir()
    for i, name in enumerate(("p0.png", "p1.png")):
        _png(tmp_path / "ph" / name, w=60 + i)
    kaggle = tmp_path / "kaggle.csv"
    kaggle.write_text(bom + "Image,Id\np0.png,w1\np1.png,w2\n", encoding="utf-8")
    own = tmp_path / "own.csv"
    own.write_text(bom + "image,individual,date\np0.png,w1,2024-06-01\n", encoding="utf-8")
    boxes = tmp_path / "boxes.csv"
    boxes.write_text(bom + "Image,x0,y0,x1,y1\np0.png,2,3,40,30\n", encoding="utf-8")
    assert main(["catalogue", "add", str(tmp_path / "a"), "--photos", str(tmp_path / "ph"), "--labels", str(kaggle),
                 "--boxes", str(boxes), "--quiet"]) == 0
    assert main(["catalogue", "add", str(tmp_path / "b"), "--photos", str(tmp_path / "ph"), "--labels", str(own),
                 "--quiet"]) == 0
    with Catalogue.open(tmp_path / "a") as cat:
        assert sorted(cat.individuals()) == ["w1", "w2"]
    with Catalogue.open(tmp_path / "b") as cat:
        assert cat.individuals() == {"w1"}
    latin = tmp_path / "latin.csv"
    latin.write_bytes("image,individual\np0.png,Baleine \u00e9t\u00e9\n".encode("latin-1"))
    assert main(["catalogue", "add", str(tmp_path / "c"), "--photos", str(tmp_path / "ph"), "--labels", str(latin),
                 "--quiet"]) == 2
    assert not (tmp_path / "c").exists()
    root = _comp(tmp_path / "comp", sample=("a.png",), boxes="t1.png,0,0,5,10\n")
    for name in ("train.csv", "bounding_boxes.csv", "sample_submission.csv"):
        path = root / name
        path.write_text(bom + path.read_text(), encoding="utf-8")
    comp = load_competition(root)
    assert comp.boxes == {"t1.png": (0, 0, 5, 10)} and comp.test_images == ["a.png"]
    log = tmp_path / "log.csv"
    log.write_text(bom + "epoch,loss\n1,0.5\n", encoding="utf-8")
    assert read_log(log) == [{"epoch": "1", "loss": "0.5"}]
