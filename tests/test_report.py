"""The review page: self-contained files, escaped names, the decisions CSV checked row by row, and
the page driven in a real headless Chromium (marker ``browser``; skipped where none is installed):
it renders, every image loads, the exported decisions read back as filled in."""

import csv
import hashlib
import json
import os
import re
import select
import shutil
import subprocess
import time
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from whale.catalogue.report import Decision, load_proposals, read_decisions, template_csv, write_report
from whale.core.errors import DataError

ODD = 'Ahab, "the <b>white</b>" & co'  # a name a user file may hold: comma, quotes, markup


def _image(path: Path, seed: int, size=(48, 64)) -> str:
    import cv2

    rng = np.random.default_rng(seed)
    img = np.kron(rng.integers(0, 255, (size[0] // 8, size[1] // 8, 3)), np.ones((8, 8, 1))).astype(np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    assert cv2.imwrite(str(path), img)
    return str(path.resolve())


@pytest.fixture
def batch(tmp_path):
    """proposals.json of four photos (relative paths; one absolute) against a gallery of four individuals."""
    root = tmp_path / "batch"
    gallery = {name: _image(tmp_path / "gallery" / f"g{i}.jpg", 100 + i)
               for i, name in enumerate(["w_1", "w_2", ODD, "w_4"])}
    lower = _image(tmp_path / "gallery" / "w1_other.png", 200)
    names = ["p1.jpg", "sub/p 2, é.png", "p3.jpg"]
    for i, name in enumerate(names):
        _image(root / name, i, size=(64, 48) if i else (48, 64))
    far = _image(tmp_path / "elsewhere" / "p4.jpg", 9)

    def cand(name, score, image=None):
        return {"individual": name, "score": score, "image": image or gallery[name]}

    photos = [
        {"photo": names[0], "hash": "h0", "possibly_new": False, "group": 7,
         "candidates": [cand("w_2", 0.61), cand("w_1", 0.43, lower), cand("w_1", 0.92), cand(ODD, 0.5)]},
        {"photo": names[1], "hash": "h1", "possibly_new": False, "group": 7,
         "candidates": [cand(ODD, 0.88), cand("w_4", 0.31)]},
        {"photo": names[2], "hash": "h2", "possibly_new": True, "group": None, "candidates": [cand("w_2", 0.12)]},
        {"photo": far, "hash": "h3", "possibly_new": True, "group": None, "candidates": []},
    ]
    path = root / "proposals.json"
    path.write_text(json.dumps({"batch": "2024-<b>06</b>", "run": "runs/r", "threshold": 0.5, "photos": photos}))
    return path


class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.links, self.sections = [], 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.links += [a[k] for k in ("src", "href") if k in a]
        self.sections += tag == "section" and a.get("class") == "photo"


def test_the_report_folder_is_self_contained_and_movable(batch, tmp_path):
    import cv2

    out = tmp_path / "report"
    page = write_report(batch, out, thumb=32)
    assert page == out / "index.html"
    text = page.read_text(encoding="utf-8")
    parser = _Links()
    parser.feed(text)
    assert parser.sections == 4
    links = [link for link in parser.links if not link.startswith("#")]
    assert links and all(re.fullmatch(r"(thumbs|large)/[0-9a-f]{20}\.jpg", link) for link in links), links
    images = [link for link in links if link.startswith("thumbs/")]
    large = [link for link in links if link.startswith("large/")]
    assert sorted({f"thumbs/{p.name}" for p in (out / "thumbs").iterdir()}) == sorted(set(images))
    assert sorted({f"large/{p.name}" for p in (out / "large").iterdir()}) == sorted(set(large))
    for link in set(links):  # named by their content; thumbnails at most `thumb` pixels, the larger copies
        data = (out / link).read_bytes()  # (click to enlarge) as the originals here (64 px, never enlarged)
        assert hashlib.sha256(data).hexdigest()[:20] == Path(link).stem
        img = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
        assert max(img.shape[:2]) == (32 if link.startswith("thumbs/") else 64)
    assert len(set(images)) == len(set(large)) == 4 + 4  # every photo, every gallery image once (w_1's best only)
    assert text.count('class="enlarge"') == len(images)  # every thumbnail links to its larger copy
    # no link outside the folder; the originals' paths never appear (the photo given by an absolute path
    # is named by it: that is its key in the decisions)
    for needle in ("file:", "data:", "http:", "https:", str(tmp_path / "gallery"), "<script src", "<link"):
        assert needle not in text
    # user text escaped: the batch name and the odd individual never become markup
    assert "<b>" not in text and "2024-&lt;b&gt;06&lt;/b&gt;" in text
    assert 'data-individual="Ahab, &quot;the &lt;b&gt;white&lt;/b&gt;&quot; &amp; co"' in text
    # photo 1: w_1 (best 0.92 image) first, then w_2, then the odd name; one group of two photos
    first = text[text.index('id="p1"'):text.index('id="p2"')]
    order = [first.index(f'data-individual="{n}"') for n in ("w_1", "w_2")]
    assert order == sorted(order) and "0.920" in first and "0.430" not in first
    assert '<a href="#p2">#2</a>' in first and "possibly new" not in first
    assert text.count("possibly new</span>") == 2


def test_template_lists_every_photo_as_skip_and_edits_are_never_overwritten(batch, tmp_path):
    out = tmp_path / "report"
    write_report(batch, out, thumb=32)
    props = load_proposals(batch)
    decided = read_decisions(out / "decisions.csv", props)
    assert [(d.photo, d.decision, d.individual) for d in decided] == [(p.photo, "skip", None) for p in props.photos]
    assert (out / "decisions.csv").read_text() == template_csv(props)
    edited = (out / "decisions.csv").read_text().replace("p3.jpg,skip,", "p3.jpg,new,Nemo")
    (out / "decisions.csv").write_text(edited)
    write_report(batch, out, thumb=32)
    assert (out / "decisions.csv").read_text() == edited
    assert read_decisions(out / "decisions.csv", batch)[2] == Decision("p3.jpg", "new", "Nemo", 4)


@pytest.mark.parametrize("rows, message", [
    (["photo,decision,who"], r"row 1: expected the header photo,decision,individual"),
    (["photo,decision,individual", "nope.jpg,skip,"], r"row 2: photo 'nope.jpg' is not in .*proposals.json"),
    (["photo,decision,individual", "", "p3.jpg,maybe,"], r"row 3: decision 'maybe': expected one of match, new, skip"),
    (["photo,decision,individual", "p3.jpg,skip,", "p3.jpg,new,X"], r"row 3: photo 'p3.jpg' has a decision in row 2"),
    (["photo,decision,individual", "p3.jpg,match,w_1"], r"row 2: 'w_1' is not a candidate of 'p3.jpg' \(candidates: w_2\)"),
    (["photo,decision,individual", "p3.jpg,new,"], r"row 2: new needs an individual"),
    (["photo,decision,individual", "p3.jpg,new,new_whale"], r"row 2: 'new_whale' is the label of unknown"),
    (["photo,decision,individual", "p3.jpg,skip,w_2"], r"row 2: skip takes no individual"),
    (["photo,decision,individual", "p3.jpg,skip,,extra"], r"row 2: expected 3 fields"),
    (["photo,decision,individual,weather"], r"row 1: expected the header .*followed by any of date,location,encounter"),
    (["photo,decision,individual,date,date"], r"row 1: expected the header"),
    (["photo,decision,individual,date", "p3.jpg,skip,"], r"row 2: expected 4 fields \(photo,decision,individual,date\)"),
])
def test_bad_decisions_are_refused_naming_the_file_and_row(batch, tmp_path, rows, message):
    path = tmp_path / "decisions.csv"
    path.write_text("\n".join(rows) + "\n")
    with pytest.raises(DataError, match=re.escape(str(path)) + " " + message):
        read_decisions(path, batch)


def test_sighting_columns_may_follow_the_three_in_any_order(batch, tmp_path):
    path = tmp_path / "decisions.csv"
    path.write_text("photo,decision,individual,location,date\np3.jpg,new,Nemo, Hervey Bay ,2025-06-14\n"
                    "p1.jpg,skip,,,\n")
    nemo, skipped = read_decisions(path, batch)
    assert nemo == Decision("p3.jpg", "new", "Nemo", 2, date="2025-06-14", location="Hervey Bay")
    assert nemo.sighting() == {"date": "2025-06-14", "location": "Hervey Bay"}
    assert skipped.sighting() == {}


def test_a_match_outside_the_candidates_needs_allow_unlisted(batch, tmp_path):
    path = tmp_path / "d.csv"
    path.write_text("\ufeffphoto,decision,individual\r\n p3.jpg , match , w_1 \r\n")  # BOM, CRLF, spaces
    with pytest.raises(DataError, match="allow_unlisted"):
        read_decisions(path, batch)
    assert read_decisions(path, batch, allow_unlisted=True) == [Decision("p3.jpg", "match", "w_1", 2)]


@pytest.mark.parametrize("edit, message", [
    (lambda p: p.pop("run"), r"proposals.json: run: missing"),
    (lambda p: p["photos"][1]["candidates"][0].update(score="high"), r"photos\[1\]\.candidates\[0\]\.score: expected int or float"),
    (lambda p: p["photos"][2].update(possibly_new=1), r"photos\[2\]\.possibly_new: expected bool, received 1"),
    (lambda p: p["photos"][2].update(group=True), r"photos\[2\]\.group: expected an integer or null"),
    (lambda p: p["photos"][3].update(photo="p1.jpg"), r"photos\[3\]\.photo: 'p1.jpg' is photos\[0\] too"),
])
def test_bad_proposals_are_refused_naming_the_key(batch, edit, message):
    raw = json.loads(batch.read_text())
    edit(raw)
    batch.write_text(json.dumps(raw))
    with pytest.raises(DataError, match=message):
        load_proposals(batch)


def test_a_missing_image_names_the_photo(batch, tmp_path):
    (batch.parent / "p3.jpg").unlink()
    with pytest.raises(DataError, match=r"proposals.json: photo 'p3.jpg': .*p3.jpg: image file not found"):
        write_report(batch, tmp_path / "report")
    with pytest.raises(ValueError, match="needs run_dir"):
        write_report(batch, tmp_path / "report", heatmaps=True)


# ---- the page in a real browser -------------------------------------------------------------------

def chromium_binary() -> str | None:
    """A Chromium or Chrome on the PATH (``WHALE_CHROMIUM`` first), else None."""
    for name in (os.environ.get("WHALE_CHROMIUM"), "chromium", "chromium-browser", "google-chrome",
                 "google-chrome-stable"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


class DevTools:
    """Chromium's DevTools protocol over ``--remote-debugging-pipe`` (fds 3 and 4, NUL-terminated JSON):
    nothing to install, no port to pick."""

    def __init__(self, binary: str, profile: Path, log: Path):
        commands_r, commands_w = os.pipe()
        replies_r, replies_w = os.pipe()
        # chromium reads commands on fd 3 and writes replies on fd 4 (os.dup first: a pipe end that
        # already is fd 3 would keep its close-on-exec flag through dup2)
        fds = (os.dup(commands_r), os.dup(replies_w))

        def child():
            os.dup2(fds[0], 3)
            os.dup2(fds[1], 4)

        self.log = log
        with open(log, "wb") as err:
            self.proc = subprocess.Popen(
                [binary, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--remote-debugging-pipe",
                 f"--user-data-dir={profile}", "about:blank"],
                stdin=subprocess.DEVNULL, stdout=err, stderr=err, close_fds=False, preexec_fn=child)
        for fd in (commands_r, replies_w, *fds):
            os.close(fd)
        self.write, self.read = commands_w, replies_r
        self.buffer, self.next_id, self.events = b"", 0, []

    def _message(self, deadline: float) -> dict:
        while b"\0" not in self.buffer:
            ready, _, _ = select.select([self.read], [], [], max(0.0, deadline - time.monotonic()))
            chunk = os.read(self.read, 1 << 20) if ready else b""
            if not chunk:
                raise AssertionError(f"chromium: no reply ({'timed out' if not ready else 'closed'}); its log: "
                                     f"{self.log.read_text(errors='replace')[-2000:]}")
            self.buffer += chunk
        raw, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(raw)

    def send(self, method: str, session: str | None = None, timeout: float = 30, **params) -> dict:
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self.write, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._message(deadline)
            if reply.get("id") == self.next_id:
                assert "error" not in reply, f"{method}: {reply['error']}"
                return reply["result"]
            self.events.append(reply)

    def wait_event(self, method: str, check=lambda params: True, timeout: float = 30) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            for i, event in enumerate(self.events):
                if event.get("method") == method and check(event["params"]):
                    return self.events.pop(i)["params"]
            self.events.append(self._message(deadline))

    def evaluate(self, session: str, expression: str):
        result = self.send("Runtime.evaluate", session, expression=expression, returnByValue=True, awaitPromise=True)
        assert "exceptionDetails" not in result, result["exceptionDetails"]
        return result["result"].get("value")

    def close(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self.write)
        os.close(self.read)


PAGE_STATE = """(() => {
  const imgs = [...document.images];
  return {ready: document.readyState, sections: document.querySelectorAll("section.photo").length,
          images: imgs.map(i => ({src: i.getAttribute("src"), ok: i.complete && i.naturalWidth > 0}))};
})()"""

FILL = """(() => {
  const secs = document.querySelectorAll("section.photo");
  const pick = [...secs[0].querySelectorAll("input[value=match]")].find(r => r.dataset.individual === %s);
  pick.click();
  const name = secs[1].querySelector("input.new-name");
  name.value = %s;
  name.dispatchEvent(new Event("input", {bubbles: true}));
  secs[3].querySelector("input[value=new]").click();
  document.getElementById("export").click();
  const refused = [document.getElementById("decisions-csv").value, document.getElementById("export-status").textContent];
  secs[3].querySelector("input[value=skip]").click();
  document.getElementById("export").click();
  return {refused: refused, csv: document.getElementById("decisions-csv").value,
          newChecked: secs[1].querySelector("input[value=new]").checked};
})()"""


@pytest.mark.browser
def test_the_page_renders_loads_every_image_and_exports_decisions_in_chromium(batch, tmp_path):
    binary = chromium_binary()
    if binary is None:
        pytest.skip("no chromium on the PATH (make test installs it where it can: apt-get install chromium)")
    write_report(batch, tmp_path / "made", thumb=48)
    moved = tmp_path / "moved" / "report"  # the folder works wherever it goes
    shutil.move(tmp_path / "made", moved)
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    browser = DevTools(binary, tmp_path / "profile", tmp_path / "chromium.log")
    try:
        browser.send("Browser.setDownloadBehavior", behavior="allow", downloadPath=str(downloads), eventsEnabled=True)
        target = browser.send("Target.createTarget", url="about:blank")["targetId"]
        session = browser.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        browser.send("Page.navigate", session, url=(moved / "index.html").as_uri())
        deadline = time.monotonic() + 30
        while True:
            state = browser.evaluate(session, PAGE_STATE)
            if state["ready"] == "complete" or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert state["ready"] == "complete" and state["sections"] == 4
        assert len(state["images"]) == 4 + 6 and all(i["ok"] for i in state["images"]), state["images"]

        new_name = 'Nemo "jr", <i>2</i>'
        filled = browser.evaluate(session, FILL % (json.dumps(ODD), json.dumps(new_name)))
        assert filled["refused"][0] == "" and "without a name" in filled["refused"][1]
        assert filled["newChecked"]  # typing a name picks "new"
        done = browser.wait_event("Browser.downloadProgress", lambda p: p["state"] == "completed")
    finally:
        browser.close()
    downloaded = Path(done.get("filePath") or downloads / "decisions.csv")
    assert downloaded.read_bytes().decode("utf-8") == filled["csv"]  # the download is what the text box shows
    decided = read_decisions(downloaded, batch)
    props = load_proposals(batch)
    assert decided == [Decision(props.photos[0].photo, "match", ODD, 2),
                       Decision(props.photos[1].photo, "new", new_name, 3),
                       Decision("p3.jpg", "skip", None, 4),
                       Decision(props.photos[3].photo, "skip", None, 5)]
    assert list(csv.reader(filled["csv"].splitlines()))[0] == ["photo", "decision", "individual"]


@pytest.mark.slow  # a tiny run trained first: 20 s on an idle 2-core machine, 55 s under load
def test_heatmaps_of_a_trained_run_sit_beside_every_image(batch, tmp_path):
    import cv2

    from conftest import train_tiny_run

    train_tiny_run(tmp_path, "review-heatmaps", n_ids=6, seed=3, size=64)
    page = write_report(batch, tmp_path / "report", heatmaps=True, run_dir=tmp_path / "run", thumb=40)
    text = page.read_text(encoding="utf-8")
    heats = re.findall(r'<img class="heat" src="(heatmaps/[0-9a-f]{20}\.jpg)"', text)
    assert len(heats) == text.count("<img") // 2 == 4 + 6  # one heatmap beside each picture
    for link in set(heats):
        img = cv2.imread(str(tmp_path / "report" / link))
        assert img.shape == (40, 40, 3)
    assert len({p.name for p in (tmp_path / "report" / "heatmaps").iterdir()}) == len(set(heats)) == 8
    # the first is the paper's heatmap (whale.explain) of photo 1 as the run's branch sees it, over its 40 px view
    from whale.catalogue.report import JPEG_QUALITY
    from whale.explain.cli import Explainer
    from whale.explain.heatmap import heatmap, overlay

    ex = Explainer(tmp_path / "run")
    view = ex.crop(batch.parent / "p1.jpg", None, ex.tap.size, ex.tap.channels)[None].astype(np.float32)
    expected = overlay(ex.crop(batch.parent / "p1.jpg", None, 40, 3), heatmap(ex.tap(view)[0]))
    ok, buf = cv2.imencode(".jpg", expected[:, :, ::-1].copy(), [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY])
    assert ok and heats[0] == f"heatmaps/{hashlib.sha256(buf.tobytes()).hexdigest()[:20]}.jpg"


def test_keypoint_match_views_show_each_pair_side_by_side(batch, tmp_path):
    import cv2

    from whale.keypoints import FeatureStore, load_keypoint_config

    store = FeatureStore(load_keypoint_config(), tmp_path / "store")
    out = tmp_path / "report"
    text = write_report(batch, out, thumb=32, matches=store).read_text(encoding="utf-8")
    views = sorted((out / "matches").iterdir())
    n_pairs = 3 + 2 + 1  # every (photo, candidate individual) pair once (w_1 twice for photo 1: its best image)
    assert len(views) <= n_pairs and text.count('class="match"') == n_pairs
    assert text.count("verified keypoint matches</span>") == n_pairs
    img = cv2.imread(str(views[0]))
    assert img.shape[0] == 128 and img.shape[1] > 200  # two photos of 48-64 px side by side, enlarged at most 2x
    assert re.search(r'<a class="enlarge" href="matches/[0-9a-f]{20}\.jpg"', text)


def test_match_view_draws_the_verified_matches_of_the_same_pattern(tmp_path):
    from whale.catalogue.matchview import MatchViews
    from whale.keypoints import FeatureStore, load_keypoint_config
    from tests.test_keypoints import pattern, warp, write

    a = write(tmp_path / "a.png", pattern(3))
    b = write(tmp_path / "b.png", warp(pattern(3), 7))
    c = write(tmp_path / "c.png", pattern(4))
    views = MatchViews(FeatureStore(load_keypoint_config(), tmp_path / "store"), height=120)
    same, n_same = views.draw(a, b)
    _, n_other = views.draw(a, c)
    assert n_same >= 10 and n_same > 3 * max(n_other, 1)
    assert same.shape == (120, 200 + 12 + 200, 3)
    plain = np.full_like(same, 255)
    assert (same != plain).any()
