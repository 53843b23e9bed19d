"""The trailing edge's outline (:mod:`whale.outline`): the edge read from a drawn fluke, the curve store reading each
photo once, the settings refused by name, and ``whale score --matcher outline`` writing a score folder that
``whale ensemble`` and the joint identification's ``--with-run`` read."""
import numpy as np
import pytest

cv2 = pytest.importorskip("cv2")

from whale.core.errors import ConfigError  # noqa: E402
from whale.outline.curve import POINTS, CurveStore, edge_curve  # noqa: E402


def drawn_fluke(bump: float, width: int = 240, height: int = 160) -> tuple[np.ndarray, np.ndarray]:
    """``(bgr photo, its trailing edge [width] in pixels from the top)``: a dark fluke whose top edge is a shallow
    arc with a notch and a bump of height ``bump`` px, on grey-blue water inside a white letterbox."""
    x = np.arange(width)
    top = 60 - 25 * np.sin(np.pi * x / (width - 1)) + 12 * np.exp(-((x - width / 2) / 6) ** 2) \
        - bump * np.exp(-((x - width * 0.3) / 10) ** 2)
    water = np.zeros((height, width, 3), np.uint8)
    water[:] = (150, 120, 90)
    rows = np.arange(height)[:, None]
    fluke = (rows >= top[None, :]) & (rows <= 130)
    water[fluke] = (40, 40, 40)
    photo = np.full((height + 40, width + 20, 3), 255, np.uint8)
    photo[20:20 + height, 10:10 + width] = water
    return photo, top


def test_the_edge_read_from_a_drawn_fluke_follows_its_top():
    photo, top = drawn_fluke(bump=10)
    curve = edge_curve(photo)
    assert curve is not None and curve.shape == (POINTS,) and curve.dtype == np.float32
    want = np.interp(np.linspace(0, len(top) - 1, POINTS), np.arange(len(top)), top)
    assert np.corrcoef(curve, want)[0, 1] > 0.95  # heights grow downwards in both
    plain = np.full((120, 120, 3), 255, np.uint8)
    plain[10:110, 10:110] = (150, 120, 90)  # water alone: no fluke to read
    assert edge_curve(plain) is None


def test_the_curve_store_reads_each_photo_once_and_keeps_them(tmp_path, monkeypatch):
    paths = []
    for i, bump in enumerate((0, 15)):
        photo, _ = drawn_fluke(bump)
        paths.append(tmp_path / f"p{i}.png")
        cv2.imwrite(str(paths[-1]), photo)
    store = CurveStore(tmp_path / "cache")
    curves, ok = store.of(paths + paths[:1], ["d0", "d1", "d0"], progress=False, log=lambda *_: None)
    assert ok.all() and np.array_equal(curves[0], curves[2]) and not np.allclose(curves[0], curves[1])

    def never(_):
        raise AssertionError("a stored photo read again")

    monkeypatch.setattr("whale.outline.curve.edge_curve", never)
    again, ok2 = CurveStore(tmp_path / "cache").of(paths[::-1], ["d1", "d0"], progress=False, log=lambda *_: None)
    assert ok2.all() and np.array_equal(again, curves[1::-1])


def test_the_outline_settings_are_refused_by_name(tmp_path):
    from whale.outline.net import load_outline_config

    path = tmp_path / "outline.yaml"
    path.write_text("steps: 500\nsed: 1\n")
    with pytest.raises(ConfigError, match="outline.yaml: unknown setting.*sed"):
        load_outline_config(path)
    with pytest.raises(ConfigError, match="steps must be a positive integer"):
        load_outline_config(None, {"steps": 0})
    cfg = load_outline_config(None, {"steps": 40})
    assert cfg.steps == 40 and cfg.config_hash() != load_outline_config().config_hash()
    from pathlib import Path

    shipped = Path(__file__).resolve().parents[1] / "configs" / "outline.yaml"
    assert load_outline_config(shipped) == load_outline_config()  # the shipped file says the defaults


def test_the_outline_command_writes_a_score_folder_that_ensemble_and_the_joint_read(tmp_path, capsys):
    from whale.cli import main as whale_main
    from whale.data import ImageSet, fold_data, load_competition
    from whale.data.synth import generate
    from whale.identify.sources import check_runs, run_scores
    from whale.inference.scorefile import load_score_file
    from whale.submission import check_submission

    data = generate(tmp_path / "data", n_ids=12, seed=3, size=256, progress=False)
    out = tmp_path / "outline"
    assert whale_main(["score", "--matcher", "outline", "--data", str(data), "--fold", "0", "--out", str(out),
                       "--cache", str(tmp_path / "cache"), "--set", "steps=30", "--quiet"]) == 0
    comp = load_competition(data)
    fold = fold_data(comp, 0, 0)
    val = load_score_file(out / "val.npz", need_query_ids=True)
    assert list(val.query) == list(fold.val.names) and list(val.gallery) == list(fold.gallery.names)
    assert set(val.trained_on) == set(fold.gallery.names) and not set(val.trained_on) & set(fold.val.names)
    assert np.all(np.abs(val.scores) <= 1.0001)
    test = load_score_file(out / "test.npz")
    assert list(test.gallery) == list(ImageSet.known(comp).names)
    check_runs([out])  # the joint's --with-run takes it
    s = run_scores(out, "val", fold.val.names, fold.gallery.names, 0)
    assert s.shape == (len(fold.val), len(fold.gallery))
    assert whale_main(["ensemble", str(out), "--tune", "--out", str(tmp_path / "s.csv")]) == 0
    assert check_submission(tmp_path / "s.csv") == []
    assert "photos without a curve" in capsys.readouterr().out


def test_a_warped_curve_keeps_its_tips_and_reads_its_span_in_order():
    from whale.outline.net import warped

    rng = np.random.default_rng(0)
    t = np.linspace(0, 1, 64, dtype=np.float32)
    ramp = np.tile(t, (50, 1))  # a curve whose height is where along the span it is read
    out = warped(ramp, 0.5, rng)
    assert out.shape == ramp.shape and out.dtype == np.float32
    assert np.allclose(out[:, 0], 0) and np.allclose(out[:, -1], 1, atol=1e-6)  # the tips stay
    assert (np.diff(out, axis=1) > 0).all()  # read in order: a monotone reparametrisation
    moved = np.abs(out - ramp).max(axis=1)
    assert moved.max() > 0.05 and moved.max() <= 0.5 / 4 + 1e-6  # at most a/4 of the span, at its middle
    assert len(np.unique(np.round(moved, 4))) > 40  # each curve its own draw
    bump = np.tile(np.sin(np.pi * t), (50, 1))
    assert np.allclose(warped(bump, 1e-9, rng), bump, atol=1e-5)  # no warp: the same curve
