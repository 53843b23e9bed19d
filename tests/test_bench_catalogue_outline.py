"""benchmarks/flukes/catalogue_outline.py: the figures of one match's proposals, on a hand-made batch."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.flukes import catalogue_outline  # noqa: E402


def photo(name, flagged, *ranked):
    return {"photo": f"/batch/{name}", "possibly_new": flagged,
            "candidates": [{"individual": i, "score": 0.5, "probability": 0.5} for i in ranked]}


def test_the_figures_of_a_match_count_catalogued_whales_and_the_others_apart():
    truth = {"a.jpg": "w1", "b.jpg": "w2", "c.jpg": "w3", "d.jpg": "new_whale", "e.jpg": "w9"}
    proposals = {"photos": [photo("a.jpg", False, "w1", "w2"),                        # first
                            photo("b.jpg", True, "w1", "w3", "w4", "w5", "w2", "w6"),  # fifth, flagged
                            photo("c.jpg", False, "w1", "w2", "w4", "w5", "w6", "w3"),  # sixth: missed
                            photo("d.jpg", True, "w1"), photo("e.jpg", False, "w2")]}
    m = catalogue_outline.measure(proposals, truth, known={"w1", "w2", "w3", "w4", "w5", "w6"})
    assert (m["catalogued"], m["others"]) == (3, 2)
    assert m["top1"] == 1 / 3 and m["top5"] == 2 / 3
    assert m["catalogued_flagged"] == 1 / 3 and m["others_flagged"] == 1 / 2
