"""Submission writing (validation, sample order, atomicity) and every problem check_submission finds."""

import subprocess
import sys
from pathlib import Path

import pytest

from whale import NEW_WHALE
from whale.core.errors import DataError
from whale.submission import check_submission, write_submission

IMAGES = ["a.jpg", "b.jpg", "c.jpg"]
PREDS = [
    ["w1", "w2", NEW_WHALE, "w3", "w4"],
    "w5 w6 w7 w8 w9",
    [NEW_WHALE, "w1", "w2", "w3", "w4"],
]
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def sample(tmp_path):
    path = tmp_path / "sample_submission.csv"
    path.write_text("Image,Id\nc.jpg,new_whale w1 w2 w3 w4\na.jpg,new_whale w1 w2 w3 w4\n"
                    "b.jpg,new_whale w1 w2 w3 w4\n")
    return path


def write_raw(tmp_path, text, name="sub.csv"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_round_trip_follows_sample_order(tmp_path, sample):
    out = write_submission(tmp_path / "out" / "sub.csv", IMAGES, PREDS, sample=sample)
    lines = out.read_text().splitlines()
    assert lines == [
        "Image,Id",
        "c.jpg,new_whale w1 w2 w3 w4",
        "a.jpg,w1 w2 new_whale w3 w4",
        "b.jpg,w5 w6 w7 w8 w9",
    ]
    assert check_submission(out, sample) == []
    assert sorted(p.name for p in out.parent.iterdir()) == ["sub.csv"]  # no temp file left


def test_write_rejects_bad_rows_and_leaves_nothing(tmp_path, sample):
    target = tmp_path / "sub.csv"
    cases = [
        (IMAGES, PREDS[:2], "3 images but 2 predictions"),
        (IMAGES, [PREDS[0], PREDS[0][:4], PREDS[2]], "expected 5 labels"),
        (IMAGES, [PREDS[0], ["w1", "w1", "w2", "w3", "w4"], PREDS[2]], "repeated labels"),
        (IMAGES, [PREDS[0], ["w1", "", "w2", "w3", "w4"], PREDS[2]], "bad labels"),
        (["a.jpg", "a.jpg", "c.jpg"], PREDS, "already given in row 0"),
    ]
    for images, preds, message in cases:
        with pytest.raises(DataError, match=message):
            write_submission(target, images, preds)
    with pytest.raises(DataError, match="no prediction: 'c.jpg'"):
        write_submission(target, IMAGES[:2], PREDS[:2], sample=sample)
    with pytest.raises(DataError, match="not in the sample: 'd.jpg'"):
        write_submission(target, IMAGES + ["d.jpg"], PREDS + [PREDS[0]], sample=sample)
    assert list(tmp_path.iterdir()) == [sample]


def test_atomic_write_keeps_old_file_on_failure(tmp_path, monkeypatch):
    target = write_submission(tmp_path / "sub.csv", IMAGES, PREDS)
    before = target.read_text()

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr("whale.core.files.os.replace", boom)
    with pytest.raises(OSError, match="disk full"):
        write_submission(target, IMAGES, [PREDS[1], PREDS[0], PREDS[2]])
    assert target.read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == ["sub.csv"]


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("", "empty file"),
        ("Image;Id\n", "line 1: expected the header"),
        ("Id,Image\nw1 w2 w3 w4 w5,c.jpg\nw1 w2 w3 w4 w5,a.jpg\nw1 w2 w3 w4 w5,b.jpg\n",
         "line 1: expected the header"),
        ("Image,Id\nc.jpg,w1 w2 w3 w4 w5\na.jpg,w1 w2 w3 w4 w5\nb.jpg,w1 w2 w3 w4 w5,x\n",
         "line 4: expected 2 fields, got 3"),
        ("Image,Id\nc.jpg,w1 w2 w3 w4 w5\na.jpg,w1 w2 w3 w4 w5\nb.jpg,w1 w2 w3 w4 w5\nb.jpg,w1 w2 w3 w4 w5\n",
         "line 5: image 'b.jpg' already on line 4"),
        ("Image,Id\nc.jpg,w1 w2 w3 w4\na.jpg,w1 w2 w3 w4 w5\nb.jpg,w1 w2 w3 w4 w5\n",
         "line 2: image 'c.jpg' has 4 labels, expected 5"),
        ("Image,Id\nc.jpg,w1 w2 w3 w4 w5\na.jpg,w1 w2 w1 w4 w5\nb.jpg,w1 w2 w3 w4 w5\n",
         "line 3: image 'a.jpg' repeats label(s) ['w1']"),
        ("Image,Id\nc.jpg,w1 w2 w3 w4 w5\na.jpg,w1 w2 w3 w4 w5\n", "2 rows, but"),
        ("Image,Id\nc.jpg,w1 w2 w3 w4 w5\na.jpg,w1 w2 w3 w4 w5\n", "1 images of"),
        ("Image,Id\na.jpg,w1 w2 w3 w4 w5\nc.jpg,w1 w2 w3 w4 w5\nb.jpg,w1 w2 w3 w4 w5\n",
         "line 2: image 'a.jpg', but"),
        ("Image,Id\nc.jpg,w1 w2 w3 w4 w5\na.jpg,w1 w2 w3 w4 w5\nx.jpg,w1 w2 w3 w4 w5\n",
         "line 4: image 'x.jpg' is not in"),
        ("Image,Id\nc.jpg,w1 w2 w3 w4 w5\n\na.jpg,w1 w2 w3 w4 w5\nb.jpg,w1 w2 w3 w4 w5\n",
         "line 3: blank line"),
    ],
)
def test_check_finds_each_problem(tmp_path, sample, text, fragment):
    path = write_raw(tmp_path, text)
    problems = check_submission(path, sample)
    assert problems, text
    assert any(fragment in p for p in problems), problems
    assert all(str(path) in p for p in problems)


def test_check_missing_file_and_bad_sample(tmp_path):
    assert check_submission(tmp_path / "nope.csv") == [f"{tmp_path / 'nope.csv'}: file not found"]
    path = write_raw(tmp_path, "Image,Id\na.jpg,w1 w2 w3 w4 w5\n")
    assert check_submission(path) == []
    with pytest.raises(DataError, match="sample submission not found"):
        check_submission(path, tmp_path / "missing_sample.csv")


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "whale.submission", *map(str, args)],
                          cwd=REPO, capture_output=True, text=True, timeout=60)


def test_cli_exit_codes(tmp_path, sample):
    good = write_submission(tmp_path / "good.csv", IMAGES, PREDS, sample=sample)
    bad = write_raw(tmp_path, "Image,Id\nc.jpg,w1 w2 w3 w4\n", "bad.csv")
    ok = run_cli("check", good, "--sample", sample)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.strip() == f"OK: {good} (3 rows)"
    fail = run_cli("check", bad, "--sample", sample)
    assert fail.returncode == 1
    assert "line 2" in fail.stdout and "has 4 labels" in fail.stdout


def test_score_gives_map5_overall_known_and_new_and_the_new_whale_share(tmp_path, capsys):
    """``whale submission score``: a.jpg's answer w2 at rank 2 (1/2), b.jpg (new_whale, not predicted) 0, c.jpg
    new_whale at rank 1; new_whale first for 1 of 3 images whose true share is 2 of 3."""
    from whale.submission import main, score_submission

    sub = write_submission(tmp_path / "s.csv", IMAGES, PREDS)
    solution = tmp_path / "test_solution.csv"
    solution.write_text(f"Image,Id\nc.jpg,{NEW_WHALE}\na.jpg,w2\nb.jpg,{NEW_WHALE}\n")
    m = score_submission(sub, solution)
    assert m["map5"] == pytest.approx(0.5) and m["map5_known"] == pytest.approx(0.5)
    assert m["map5_open"] == pytest.approx(0.5) and (m["known"], m["open"], m["images"]) == (1, 2, 3)
    assert m["open_first"] == pytest.approx(1 / 3) and m["open_share"] == pytest.approx(2 / 3)
    assert main(["score", str(sub), "--solution", str(solution)]) == 0
    assert "MAP@5 0.5000 over 3 images (known 0.5000 over 1, new_whale 0.5000 over 2); new_whale first for 33.3% " \
           "(true share 66.7%): 33.3% new_whale, 0.0% known" in capsys.readouterr().out


def test_new_whale_first_is_split_by_why_it_came_first():
    """Of four images, three answered new_whale first: a new whale, a known whale listed after it (pushed a rank)
    and a known whale nowhere among the labels (nothing lost); the fourth answered with its own id first."""
    from whale.submission import submission_figures

    pred = {"a": [NEW_WHALE, "w1"], "b": [NEW_WHALE, "w2", "w3"], "c": [NEW_WHALE, "w4"], "d": ["w5", NEW_WHALE]}
    truth = {"a": NEW_WHALE, "b": "w3", "c": "w9", "d": "w5"}
    m = submission_figures(pred, truth, NEW_WHALE)
    assert m["open_first"] == pytest.approx(3 / 4) and m["open_share"] == pytest.approx(1 / 4)
    assert (m["open_first_open"], m["open_first_found"], m["open_first_missed"]) == pytest.approx((1 / 4,) * 3)


def test_score_refuses_a_submission_that_does_not_fit_the_solution_and_a_bad_solution(tmp_path, capsys):
    from whale.submission import main, score_submission

    sub = write_submission(tmp_path / "s.csv", IMAGES, PREDS)
    short = tmp_path / "short.csv"
    short.write_text("Image,Id\na.jpg,w2\nb.jpg,w1\n")
    with pytest.raises(DataError, match="1 images are not in .*short.csv: 'c.jpg'"):
        score_submission(sub, short)
    more = tmp_path / "more.csv"
    more.write_text("Image,Id\na.jpg,w2\nb.jpg,w1\nc.jpg,w1\nd.jpg,w1\n")
    with pytest.raises(DataError, match="1 images of .*more.csv are missing: 'd.jpg'"):
        score_submission(sub, more)
    bad = tmp_path / "bad.csv"
    bad.write_text("Image,Id\na.jpg,\n")
    with pytest.raises(DataError, match="bad.csv: line 2: expected an image and its individual"):
        score_submission(sub, bad)
    (tmp_path / "broken.csv").write_text("Image,Id\na.jpg,w1 w2\n")
    with pytest.raises(DataError, match="has 2 labels, expected 5"):
        score_submission(tmp_path / "broken.csv", more)
    assert main(["score", str(sub), "--solution", str(tmp_path / "nope.csv")]) == 2
    assert "nope.csv: cannot read the solution" in capsys.readouterr().err
