"""whale.demo's report of the machine's training speed, read from a run's log.csv."""

from whale.demo import training_speed
from whale.training.runlog import LOG_FIELDS, write_log


def test_training_speed_sums_the_logged_epochs(tmp_path):
    rows = [{c: "" for c in LOG_FIELDS} | {"epoch": e, "epoch_s": s} for e, s in ((1, 10.0), (2, 30.0))]
    write_log(tmp_path / "log.csv", rows)
    line = training_speed(tmp_path, 100)
    assert line.startswith("training: 2 epochs of 100 pairs in 40 s, 5.0 pairs/s")
