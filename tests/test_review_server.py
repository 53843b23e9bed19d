"""The review server (``whale catalogue review --serve``): each decision recorded at once through ``accept``'s
code, undo, names offered for new individuals, stale decisions refused (409), its own page only; and the page
driven by keys in a real headless Chromium (marker ``browser``; skipped where none is installed): a batch of
20 photos decided with 20 keys on one screen, the server killed (SIGKILL) and restarted with nothing lost,
two tabs deciding one photo, markup in names shown as text."""

import csv
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from whale.catalogue.db import Catalogue
from whale.catalogue.report import Decision
from whale.core.errors import DataError

ROOT = Path(__file__).resolve().parents[1]
BATCH = "b20"
ODD_PHOTO = '<img src=x onerror="window.pwned=1">.png'  # a legal file name (no slash) that is markup
ODD_WHALE = 'Ahab "<b>white</b>" & co'


def _image(path: Path, seed: int, size=(48, 64)) -> Path:
    import cv2

    rng = np.random.default_rng(seed)
    img = np.kron(rng.integers(0, 255, (size[0] // 8, size[1] // 8, 3)), np.ones((8, 8, 1))).astype(np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    assert cv2.imwrite(str(path), img)
    return path


def build_catalogue(root: Path, n_photos: int = 20, n_ids: int = 7, threshold=0.5) -> Path:
    """A catalogue of ``n_ids`` individuals (``w_1`` of 5 photos, the others of 3; one named :data:`ODD_WHALE`) and
    a batch :data:`BATCH` of ``n_photos`` new photos (one named :data:`ODD_PHOTO`), as ``match`` records one
    (:func:`whale.catalogue.match.record_proposals`, ``threshold`` a score or a
    :class:`whale.catalogue.match.Flagging`): 5 candidates each, photos 1 and 2 one group."""
    from whale.catalogue import sql
    from whale.catalogue.ingest import add_photos, image_path
    from whale.catalogue.match import record_proposals

    ids = [f"w_{i}" for i in range(1, n_ids)] + [ODD_WHALE]
    labels = root / "labels.csv"
    (root / "known").mkdir(parents=True, exist_ok=True)
    with open(labels, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["image", "individual"])
        for i, ind in enumerate(ids):
            for j in range(5 if i == 0 else 3):
                writer.writerow([_image(root / "known" / f"k{i}-{j}.png", 100 + 10 * i + j).name, ind])
    cat_dir = root / "cat"
    with Catalogue.create(cat_dir) as cat:
        add_photos(cat, labels, root / "known", progress=False)
        photos = [_image(root / "new" / (ODD_PHOTO if k == 3 else f"n{k:02d}.png"), 1000 + k) for k in range(n_photos)]
        gallery = sql.photos(cat.conn)  # (hash, individual, file, source, box), by hash
        individuals = [r[1] for r in gallery]
        names = np.array([[ids[(k + r) % len(ids)] for r in range(5)] for k in range(n_photos)])
        cols = np.array([[individuals.index(n) for n in row] for row in names], np.int64)
        vals = np.array([[0.9 - 0.1 * r - 0.001 * k for r in range(5)] for k in range(n_photos)], np.float32)
        groups = [1, 1] + [None] * (n_photos - 2)
        with cat.writing(), cat.transaction() as db:
            record_proposals(cat, db, BATCH, root / "new", photos, "runs/none", "fp0123", threshold, names, cols, vals,
                             groups, [image_path(cat, r[2]) for r in gallery], [r[0] for r in gallery])
    return cat_dir


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    return build_catalogue(tmp_path_factory.mktemp("served"))


@pytest.fixture
def catalogue(template, tmp_path):
    """A fresh copy of the template catalogue (its batch's photos stay where they are)."""
    import shutil

    shutil.copytree(template, tmp_path / "cat")
    return tmp_path / "cat"


def _decisions(cat_dir: Path) -> list[tuple]:
    """``(photo file name, decision, decided, decided_by)`` of every decision, in order."""
    conn = sqlite3.connect(f"file:{cat_dir / 'catalogue.sqlite'}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT photo, decision, decided, decided_by FROM decisions ORDER BY id").fetchall()
    finally:
        conn.close()
    return [(Path(p).name, d, x, b) for p, d, x, b in rows]


# ---- without a browser ---------------------------------------------------------------------------------

def test_next_free_name_continues_the_catalogue_s_series_or_the_batch_s():
    from whale.catalogue.reviewdata import next_free_name

    assert next_free_name({"HW-0041", "HW-0007", "HW-0012", "Nemo"}, "b") == "HW-0042"  # padding kept
    assert next_free_name({"w1", "w2", "w3", "w10"}, "b") == "w11"
    # Kaggle's hex ids end in a digit now and then: no series there, the batch's own names instead
    kaggle = {"w_20df2c5", "w_f48451c", "w_dd88965", "w_64404ac"}
    assert next_free_name(kaggle, "2025-06") == "2025-06-new-1"
    assert next_free_name(kaggle | {"2025-06-new-1", "2025-06-new-2"}, "2025-06") == "2025-06-new-3"
    assert next_free_name(set(), "b") == "b-new-1"


def test_record_takes_decisions_one_by_one_and_undo_leaves_the_photo_undecided(catalogue):
    from whale.catalogue.decisions import batch_proposals, record
    from whale.catalogue.reviewdata import decision_state

    with Catalogue.open(catalogue) as cat:
        props = batch_proposals(cat, BATCH)
        p0, p1, p2 = (p.photo for p in props.photos[:3])
        before = cat.counts()
        assert record(cat, BATCH, [Decision(p0, "match", "w_2", 0)], by="ana")["matched"] == 1
        assert cat.counts()["images"] == before["images"] + 1
        # undo: recorded (appended), what the match added goes, the photo is undecided: no --redecide needed after
        assert record(cat, BATCH, [Decision(p0, "undo", None, 0)], by="ana")["undo"] == 1
        assert cat.counts()["images"] == before["images"] and cat.counts()["sightings"] == before["sightings"]
        state = decision_state(cat, BATCH)
        assert state["decisions"][p0]["decision"] is None and state["decided"] == 0
        assert record(cat, BATCH, [Decision(p0, "undo", None, 0)])["unchanged"] == 1  # nothing left to undo
        assert record(cat, BATCH, [Decision(p0, "match", "w_3", 0)], by="ana")["matched"] == 1
        # a new individual named on the spot, then named again for another photo of this batch (one by one)
        assert record(cat, BATCH, [Decision(p1, "new", "Nemo", 0)])["new"] == 1
        assert record(cat, BATCH, [Decision(p2, "new", "Nemo", 0)])["new"] == 1
        state = decision_state(cat, BATCH)
        assert state["new_names"] == ["Nemo"] and state["decided"] == 3
        assert {k: (v["decision"], v["individual"]) for k, v in state["decisions"].items()} == {
            p0: ("match", "w_3"), p1: ("new", "Nemo"), p2: ("new", "Nemo")}
        # the checks of a decisions file's rows, and a decided photo decided otherwise without redecide
        for bad, message in ((Decision(p0, "match", "w_9", 0), "'w_9' is not a candidate of"),
                             (Decision(p0, "new", "w_1", 0), "'w_1' exists already"),
                             (Decision(p0, "skip", "w_1", 0), "skip takes no individual"),
                             (Decision(p0, "maybe", None, 0), "'maybe': expected one of match, new, skip, undo"),
                             (Decision("elsewhere.png", "skip", None, 0), "photo 'elsewhere.png' is not in"),
                             (Decision(p0, "match", "w_4", 0), "was decided 'w_3' before")):
            with pytest.raises(DataError, match=r"^review: .*" + re.escape(message)):
                record(cat, BATCH, [bad], where="review")
    assert [d[1:3] for d in _decisions(catalogue)] == [("match", "w_2"), ("undo", "undo"), ("match", "w_3"),
                                                       ("new", "new:Nemo"), ("new", "new:Nemo")]


def _http(url: str, body=None, headers=None):
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, reply.read(), reply.headers.get("Content-Type")
    except urllib.error.HTTPError as err:
        return err.code, err.read(), err.headers.get("Content-Type")


@pytest.fixture
def server(catalogue, tmp_path):
    """A review server of the batch, in a thread of this process: ``(server, catalogue folder)``."""
    from whale.catalogue.reviewdata import review_data
    from whale.catalogue.server import ReviewServer

    with Catalogue.open(catalogue) as cat:
        data = review_data(cat, BATCH, tmp_path / "review", probability=lambda p, c: 0.5 if c.individual == "w_1"
                           else None)
    srv = ReviewServer(catalogue, BATCH, tmp_path / "review", data, by="ana")
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv, catalogue
    srv.shutdown()
    srv.server_close()


def test_the_page_shows_the_calibrated_probability_match_recorded_beside_the_score(tmp_path):
    from whale.catalogue.match import Flagging
    from whale.catalogue.report import write_report
    from whale.catalogue.reviewdata import review_data
    from whale.ranking.pairprob import PairCalibration

    ids = np.repeat(["a", "b", "c"], 3)
    scores = np.where(ids[:, None] == ids[None, :], 0.9, 0.3).astype(np.float32)
    cal = PairCalibration.fit(scores, ids, ids, skip=np.arange(9))
    root = build_catalogue(tmp_path, n_photos=3, threshold=Flagging.of(cal, 0.6, 0.15, "test"))
    with Catalogue.open(root) as cat:
        data = review_data(cat, BATCH, tmp_path / "review")
        from whale.catalogue import sql

        rel = sql.batch_proposals_file(cat.conn, BATCH)
    assert data["scale"] == "probability" and data["threshold"] == 0.6
    for photo in data["photos"]:
        want = [round(float(p), 6) for p in cal.transform(np.float32([c["score"] for c in photo["candidates"]]))]
        assert [c["probability"] for c in photo["candidates"]] == pytest.approx(want, abs=2e-6)
        assert photo["possibly_new"] == (photo["candidates"][0]["probability"] < 0.6)
    page = write_report(root / rel, tmp_path / "static", verbose=False).read_text(encoding="utf-8")
    assert "possibly new below P(same) 0.600" in page and page.count('class="probability"') == 15
    from whale.catalogue import app

    assert '"possibly new below P(same) "' in app.PAGE_JS  # the served page's header says what the threshold is


def test_the_server_records_each_decision_and_refuses_a_stale_or_foreign_one(server):
    srv, cat = server
    url = srv.url
    status, body, kind = _http(url + "api/batch")
    data = json.loads(body)
    assert status == 200 and kind.startswith("application/json") and len(data["photos"]) == 20
    assert (data["method"], data["fingerprint"], data["threshold"], data["config_hash"]) == ("run", "fp0123", 0.5, None)
    first = data["photos"][0]
    assert [c["rank"] for c in first["candidates"]] == [1, 2, 3, 4, 5] and first["group"] == 1
    for c in first["candidates"]:  # the one shown and up to 3 others of its individual; no inliers without keypoints
        n = 5 if c["individual"] == "w_1" else 3
        assert c["photos"] == n and len(c["others"]) == min(3, n - 1) and c["image"] not in c["others"]
        assert c["inliers"] is None
        assert re.fullmatch(r"k\d-\d\.png", c["file"])  # the file it was added from, not the catalogue's hash name
        assert c["probability"] == (0.5 if c["individual"] == "w_1" else None)  # the hook, only where given
    odd = data["photos"][3]
    assert odd["name"] == ODD_PHOTO
    status, body, kind = _http(url + "files/" + first["image"])
    assert status == 200 and kind == "image/jpeg" and body[:2] == b"\xff\xd8"
    for bad in ("files/../catalogue.sqlite", "files/thumbs/../../catalogue.sqlite", "files/x.jpg", "nope"):
        assert _http(url + bad)[0] == 404
    page = _http(url)[1].decode()
    assert "<script>" in page and "odd" not in page.lower() and ODD_PHOTO not in page  # data comes as JSON only

    def decide(photo, decision, individual=None, expect=None):
        status, body, _ = _http(url + "api/decide", {"photo": photo["photo"], "decision": decision,
                                                     "individual": individual, "expect": expect})
        return status, json.loads(body)

    status, reply = decide(first, "match", "w_2")
    assert status == 200 and reply["counts"]["matched"] == 1
    mine = reply["state"]["decisions"][first["photo"]]
    assert (mine["decision"], mine["individual"], mine["by"]) == ("match", "w_2", "ana")
    assert _decisions(cat) == [("n00.png", "match", "w_2", "ana")]
    # another tab that still saw the photo undecided: told, nothing recorded
    status, reply = decide(first, "match", "w_3")
    assert status == 409 and "was decided 'w_2' by ana" in reply["error"] and "nothing recorded" in reply["error"]
    assert reply["state"]["decisions"][first["photo"]]["id"] == mine["id"]
    # knowing the standing decision, it replaces it (a redecision, as accept --redecide); then undo
    assert decide(first, "match", "w_3", expect=mine["id"])[0] == 200
    status, reply = decide(first, "undo", None, expect=mine["id"] + 1)
    assert status == 200 and reply["state"]["decisions"][first["photo"]]["decision"] is None
    assert [d[1:3] for d in _decisions(cat)] == [("match", "w_2"), ("match", "w_3"), ("undo", "undo")]
    # refused decisions: accept's one-line message, nothing recorded
    status, reply = decide(odd, "match", "w_2")  # its candidates: w_4, w_5, w_6, Ahab, w_1
    assert status == 400 and "'w_2' is not a candidate of" in reply["error"]
    status, reply = decide(odd, "new", "new_whale")
    assert status == 400 and "label of unknown individuals" in reply["error"]
    assert _http(url + "api/decide", b"{not json")[0] == 400
    plain = {"Content-Type": "text/plain"}
    assert _http(url + "api/decide", {"photo": odd["photo"], "decision": "skip"}, plain)[0] == 400
    # its own page only: another host name (DNS rebinding) or another site's form is refused
    assert _http(url + "api/state", headers={"Host": "evil.example"})[0] == 403
    assert _http(url + "api/decide", {"photo": odd["photo"], "decision": "skip", "expect": None},
                 {"Origin": "http://evil.example"})[0] == 403
    assert len(_decisions(cat)) == 3
    assert srv.recorded == 3


def _raw(srv, request: bytes) -> bytes:
    """What the server answers to ``request`` (bytes as sent), until it closes the connection."""
    import socket

    with socket.create_connection(srv.server_address[:2], timeout=30) as conn:
        conn.sendall(request)
        reply = b""
        while chunk := conn.recv(65536):
            reply += chunk
    return reply


def test_a_malformed_length_or_a_deeply_nested_body_is_a_400_answer_not_a_traceback(server, capsys):
    srv, cat = server
    host = f"Host: 127.0.0.1:{srv.server_address[1]}\r\nContent-Type: application/json\r\n".encode()
    for length in (b"abc", b"-5", b"1e3", b"99999999999999999999"):
        reply = _raw(srv, b"POST /api/decide HTTP/1.1\r\n" + host + b"Content-Length: " + length + b"\r\n\r\n{}")
        assert reply.startswith(b"HTTP/1.0 400 "), (length, reply[:80])
        assert b"a decision is a JSON body of at most" in reply
    nested = b"[" * 30_000 + b"]" * 30_000  # past the parser's recursion limit, within MAX_BODY
    from whale.catalogue.server import MAX_BODY

    assert len(nested) <= MAX_BODY
    status, body, _ = _http(srv.url + "api/decide", nested)
    assert status == 400 and "nested too deeply" in json.loads(body)["error"]
    assert "Traceback" not in capsys.readouterr().err
    assert _decisions(cat) == [] and srv.recorded == 0


@pytest.mark.parametrize("port", ["99999", "-1", "65536"])
def test_review_serve_refuses_a_port_that_is_not_one_in_one_line(catalogue, capsys, port):
    from whale.cli import main

    assert main(["catalogue", "review", str(catalogue), "--batch", BATCH, "--serve", "--port", port, "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"127.0.0.1:{port}: not a port" in err[0] and "--port" in err[0]


def test_review_serve_refuses_flags_without_serve_and_a_taken_port(catalogue, capsys):
    import socket

    from whale.cli import main

    with pytest.raises(SystemExit) as usage:  # argparse's own error: usage and status 2
        main(["catalogue", "review", str(catalogue), "--batch", BATCH, "--port", "8000"])
    assert usage.value.code == 2
    assert "--port: only with --serve" in capsys.readouterr().err
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["catalogue", "review", str(catalogue), "--batch", BATCH, "--serve", "--port", str(port),
                     "--quiet"]) == 2
    assert f"127.0.0.1:{port}: cannot serve there" in capsys.readouterr().err
    assert main(["catalogue", "review", str(catalogue), "--batch", "nope", "--serve", "--quiet"]) == 2
    assert "no batch 'nope'" in capsys.readouterr().err


# ---- in a real browser ---------------------------------------------------------------------------------

KEYS = {**{str(d): (f"Digit{d}", 48 + d) for d in range(1, 6)},
        **{c: (f"Key{c.upper()}", ord(c.upper())) for c in "jknsu"},
        "ArrowRight": ("ArrowRight", 39), "ArrowLeft": ("ArrowLeft", 37), "Escape": ("Escape", 27),
        "Enter": ("Enter", 13)}
SHIFTED = dict(zip("12345", "!@#$%"))
WIDTH, HEIGHT = 1400, 900
"""The screen of the issue's reviewer: a 1400 px wide window (900 px high)."""


def _chromium() -> str:
    from tests.test_report import chromium_binary

    binary = chromium_binary()
    if binary is None:
        pytest.skip("no chromium on the PATH (make test installs it where it can: apt-get install chromium)")
    return binary


class ServerProcess:
    """``whale catalogue review CAT --batch BATCH --serve`` as a subprocess (what a researcher runs); its URL read
    from what it prints."""

    def __init__(self, cat: Path, log: Path, port: int | None = None, batch: str = BATCH):
        self.log = log
        cmd = [sys.executable, "-m", "whale.catalogue", "review", str(cat), "--batch", batch, "--serve", "--by",
               "tester"] + (["--port", str(port)] if port else [])
        with open(log, "wb") as out:
            # Ctrl-C as a terminal delivers it: a suite started in the background (`make test &`) hands its
            # children SIGINT ignored, and Python then never raises KeyboardInterrupt
            self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        deadline = time.monotonic() + 120
        while True:
            found = re.search(r"at (http://127\.0\.0\.1:(\d+)/)", log.read_text(errors="replace"))
            if found:
                self.url, self.port = found[1], int(found[2])
                return
            assert self.proc.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")
            time.sleep(0.05)

    def kill(self):
        """SIGKILL: no shutdown code runs, as when the machine or the terminal dies."""
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # Ctrl-C: the server says what it recorded
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Tab:
    """One tab of the headless Chromium (:class:`tests.test_report.DevTools`) at :data:`WIDTH` x :data:`HEIGHT`."""

    def __init__(self, browser, url: str):
        self.browser = browser
        target = browser.send("Target.createTarget", url="about:blank")["targetId"]
        self.session = browser.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        browser.send("Emulation.setDeviceMetricsOverride", self.session, width=WIDTH, height=HEIGHT,
                     deviceScaleFactor=1, mobile=False)
        browser.send("Emulation.setFocusEmulationEnabled", self.session, enabled=True)
        self.open(url)

    def open(self, url: str):
        self.browser.send("Page.navigate", self.session, url=url)
        self.wait("document.body && document.body.dataset.ready === '1'", timeout=30)

    def js(self, expression: str):
        return self.browser.evaluate(self.session, expression)

    def wait(self, expression: str, timeout: float = 10):
        deadline = time.monotonic() + timeout
        while True:
            try:
                value = self.js(expression)
            except AssertionError:  # the page is between two documents
                value = None
            if value:
                return value
            assert time.monotonic() < deadline, f"waited {timeout} s for {expression}: {self.js(STATE)}"
            time.sleep(0.02)

    def key(self, name: str, shift: bool = False):
        """A key pressed and released, as a keyboard sends it (keydown with its text, keyup)."""
        code, vk = KEYS[name]
        key = SHIFTED[name] if shift else name
        text = {"Enter": "\r"}.get(name, key if len(key) == 1 else None)
        down = {"type": "keyDown", "key": key, "code": code, "windowsVirtualKeyCode": vk,
                "modifiers": 8 if shift else 0}
        self.browser.send("Input.dispatchKeyEvent", self.session, **down, **({"text": text} if text else {}))
        self.browser.send("Input.dispatchKeyEvent", self.session, **{**down, "type": "keyUp"})

    def mouse(self, selector: str, click: bool = False):
        box = self.js(f"(() => {{ const r = document.querySelector({json.dumps(selector)}).getBoundingClientRect();"
                      " return [r.x + r.width / 2, r.y + r.height / 2]; })()")
        self.browser.send("Input.dispatchMouseEvent", self.session, type="mouseMoved", x=box[0], y=box[1])
        if click:
            for kind in ("mousePressed", "mouseReleased"):
                self.browser.send("Input.dispatchMouseEvent", self.session, type=kind, x=box[0], y=box[1],
                                  button="left", clickCount=1)


STATE = """(() => {
  const g = id => document.getElementById(id), view = [innerWidth, innerHeight];
  const inside = e => { const r = e.getBoundingClientRect(); return r.width > 0 && r.top >= 0 && r.left >= 0 &&
                                                                   r.bottom <= view[1] && r.right <= view[0]; };
  const figures = [...document.querySelectorAll("figure.cand")];
  return {position: g("position").textContent, name: g("query-name").textContent,
          status: g("decision-status").textContent,
          message: g("message").textContent, kind: g("message").className, progress: g("progress").textContent,
          settings: g("settings").textContent, zoom: !g("zoom").hidden, prompt: !g("prompt").hidden,
          scroll: [document.documentElement.scrollHeight, innerHeight, scrollY],
          queryInside: inside(g("query-img")), candidatesInside: figures.map(inside),
          widths: figures.map(f => Math.round(f.querySelector("img.pic").getBoundingClientRect().width)),
          individuals: figures.map(f => f.querySelector(".individual").textContent),
          chips: [...document.querySelectorAll(".chip")].map(c => c.classList.contains("match") ? "match" :
                 c.classList.contains("new") ? "new" : c.classList.contains("skip") ? "skip" : ""),
          images: [...document.images].filter(i => i.getAttribute("src")).map(i => i.complete && i.naturalWidth > 0)};
})()"""


@pytest.fixture
def devtools(tmp_path):
    from tests.test_report import DevTools

    driver = DevTools(_chromium(), tmp_path / "profile", tmp_path / "chromium.log")
    yield driver
    driver.close()


def _candidates(k: int) -> list[str]:
    """The candidates :func:`build_catalogue` proposes for photo ``k``, best first."""
    ids = [f"w_{i}" for i in range(1, 7)] + [ODD_WHALE]
    return [ids[(k + r) % len(ids)] for r in range(5)]


@pytest.mark.browser
def test_twenty_photos_take_twenty_keys_on_one_screen_and_a_killed_server_loses_nothing(catalogue, devtools, tmp_path):
    server = ServerProcess(catalogue, tmp_path / "server.log")
    try:
        tab = Tab(devtools, server.url)
        keys = ["1", "2", "s", "3", "4", "5", "1", "s", "2", "3"] * 2
        expected, latencies = [], []
        for k, key in enumerate(keys):
            if k == 10:  # mid-batch: the server killed; a key then records nothing and the page says so
                server.kill()
                assert len(_decisions(catalogue)) == 10
                tab.key("1")
                tab.wait("document.getElementById('message').className === 'error'")
                assert "does not answer" in tab.js(STATE)["message"] and len(_decisions(catalogue)) == 10
                server = ServerProcess(catalogue, tmp_path / "server2.log", port=server.port)
                tab.open(server.url)  # reopened: what is decided shows, the next undecided photo comes up
                state = tab.js(STATE)
                assert state["progress"] == "10 of 20 decided" and state["chips"][:10].count("") == 0
                assert state["chips"][10:] == [""] * 10
            state = tab.wait(f"(() => {{ const s = {STATE}; return s.position === '#{k + 1} of 20' && "
                             "s.kind !== 'saving' && s.images.every(Boolean) && s; })()")  # every image loaded
            # one screen: nothing to scroll, the query and its five candidates inside the window, all of one width
            assert state["scroll"][0] <= state["scroll"][1] and state["scroll"][2] == 0, state["scroll"]
            assert state["queryInside"] and state["candidatesInside"] == [True] * 5
            assert len(set(state["widths"])) == 1 and state["widths"][0] > 200, state["widths"]
            assert state["individuals"] == _candidates(k) and state["status"] == "undecided"
            started = time.monotonic()
            tab.key(key)
            while len(_decisions(catalogue)) < k + 1:
                assert time.monotonic() - started < 10, f"key {key} of photo {k}: no decision recorded"
                time.sleep(0.005)
            latencies.append(time.monotonic() - started)
            expected.append(("skip", "skip") if key == "s" else ("match", _candidates(k)[int(key) - 1]))
        state = tab.wait(f"(() => {{ const s = {STATE}; return s.progress === '20 of 20 decided' && s; }})()")
        assert "All 20 photos decided" in state["message"]
        assert state["chips"] == ["skip" if e[0] == "skip" else "match" for e in expected]
        assert "fingerprint fp0123" in state["settings"] and "threshold 0.500" in state["settings"]
    finally:
        server.stop()
    decided = _decisions(catalogue)
    assert [d[1:3] for d in decided] == expected and {d[3] for d in decided} == {"tester"}
    assert [d[0] for d in decided] == [f"n{k:02d}.png" if k != 3 else ODD_PHOTO for k in range(20)]
    assert max(latencies) < 1.0, latencies  # every decision in SQLite within a second of its key
    print(f"keypress -> SQLite: median {sorted(latencies)[10] * 1000:.0f} ms, max {max(latencies) * 1000:.0f} ms")


@pytest.mark.browser
def test_each_card_shows_p_same_first_uncut_and_the_hover_strip_leaves_the_query_in_view(tmp_path, devtools):
    from whale.catalogue.match import Flagging
    from whale.ranking.pairprob import PairCalibration

    ids = np.repeat(["a", "b", "c"], 3)
    scores = np.where(ids[:, None] == ids[None, :], 0.9, 0.3).astype(np.float32)
    cal = PairCalibration.fit(scores, ids, ids, skip=np.arange(9))
    root = build_catalogue(tmp_path / "cat", n_photos=3, threshold=Flagging.of(cal, 0.6, 0.15, "test"))
    server = ServerProcess(root, tmp_path / "server.log")
    try:
        tab = Tab(devtools, server.url)
        tab.wait("document.querySelectorAll('figure.cand').length === 5")
        cards = tab.js("""[...document.querySelectorAll('figure.cand figcaption')].map(cap => [...cap.children].map(
            d => [d.className, d.textContent, d.scrollWidth <= d.clientWidth]))""")
        for card in cards:  # the individual, then P(same) on its own line, whole at 1,400 px; then the evidence
            assert [d[0] for d in card[:3]] == ["individual", "probability", "evidence"], card
            assert re.fullmatch(r"P\(same\) [01]\.\d{3}", card[1][1]) and card[1][2], card
            assert card[2][1].startswith("score ") and "P(same)" not in card[2][1]
        overlap = """(() => {
            const strips = [...document.querySelectorAll('figure.cand .others')].filter(
                o => getComputedStyle(o).display !== 'none');
            if (strips.length !== 1) return null;
            const imgs = [...strips[0].querySelectorAll('img')];  // measured once its photos are in: a loaded
            if (!imgs.every(i => i.complete && i.naturalWidth > 0)) return null;  // machine is slow to draw them
            const b = strips[0].getBoundingClientRect();
            const over = e => { const a = e.getBoundingClientRect();
                return Math.max(0, Math.min(a.right, b.right) - Math.max(a.left, b.left)) *
                       Math.max(0, Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top)); };
            return [over(document.getElementById('query-img')), over(strips[0].parentNode.querySelector('.pic')),
                    b.height, b.left >= 0 && b.right <= innerWidth && b.bottom <= innerHeight];
        })()"""
        for nth in (1, 2, 3, 4, 5):  # the strip shows inside the window, over neither the query nor its own card
            tab.mouse(f"figure.cand:nth-of-type({nth}) .pic")
            query, own, height, inside = tab.wait(overlap, timeout=30)
            assert query == 0 and own == 0 and height > 50 and inside, (nth, query, own, height, inside)
        tab.key("1", shift=True)
        tab.wait("!document.getElementById('zoom').hidden")
        assert re.search(r"\(P\(same\) [01]\.\d{3} · score ", tab.js("document.getElementById('zoom-caption').textContent"))
    finally:
        server.stop()


@pytest.mark.browser
def test_new_undo_enlarge_hover_markup_and_two_tabs_in_chromium(catalogue, devtools, tmp_path):
    server = ServerProcess(catalogue, tmp_path / "server.log")
    try:
        a = Tab(devtools, server.url)
        # the other photos of a candidate's individual on hover (w_1: 4 others, 3 shown), loaded
        assert not a.js("getComputedStyle(document.querySelector('figure.cand .others')).display !== 'none'")
        a.mouse("figure.cand .pic")
        a.wait("getComputedStyle(document.querySelector('figure.cand .others')).display === 'flex'")
        loaded = "[...document.querySelectorAll('%s')].map(i => i.complete && i.naturalWidth > 0).join()"
        a.wait(f"{loaded % 'figure.cand:first-of-type .others img'} === 'true,true,true'")
        assert a.js("document.querySelectorAll('figure.cand')[0].querySelector('.count').textContent") == "5 photos"
        # a pair enlarged by Shift+2, closed by Esc; by a click on candidate 3
        a.key("2", shift=True)
        a.wait("!document.getElementById('zoom').hidden")
        a.wait(f"{loaded % '#zoom-pair img'} === 'true,true'")  # the query and candidate 2, large
        assert "#2 w_2" in a.js("document.getElementById('zoom-caption').textContent")
        a.key("Escape")
        a.wait("document.getElementById('zoom').hidden")
        a.mouse("figure.cand:nth-of-type(3) .pic", click=True)
        a.wait("!document.getElementById('zoom').hidden")
        assert "#3 w_3" in a.js("document.getElementById('zoom-caption').textContent")
        a.key("Escape")
        # photo 4 (J moves on three times): its name is markup, shown as text; so is an individual's
        for _ in range(3):
            a.key("j")
        state = a.wait(f"(() => {{ const s = {STATE}; return s.position === '#4 of 20' && s; }})()")
        assert state["name"] == ODD_PHOTO and ODD_WHALE in state["individuals"]
        assert a.js("document.querySelectorAll('img[src=\"x\"], #candidates b, #query-info img').length") == 0
        assert a.js("window.pwned === undefined")
        # N: a name prompt with the catalogue's next free name; a name with markup, Enter records it
        a.key("n")
        a.wait("!document.getElementById('prompt').hidden")
        assert a.js("document.getElementById('new-name').value") == "w_7"
        name = 'Moby <i>"Dick"</i>'
        devtools.send("Input.insertText", a.session, text=name)  # replaces the selected suggestion
        a.key("Enter")
        a.wait(f"(() => {{ const s = {STATE}; return s.position === '#5 of 20' && s.kind !== 'saving'; }})()")
        assert _decisions(catalogue)[-1] == (ODD_PHOTO, "new", f"new:{name}", "tester")
        assert a.js(STATE)["chips"][3] == "new"
        # U takes it back: the photo comes up again, undecided; a key then decides it (no redecision needed)
        a.key("u")
        state = a.wait(f"(() => {{ const s = {STATE}; return s.position === '#4 of 20' && s.kind === 'done' "
                       "&& s; })()")
        assert state["status"] == "undecided" and "Undone" in state["message"] and state["chips"][3] == ""
        assert _decisions(catalogue)[-1] == (ODD_PHOTO, "undo", "undo", "tester")
        a.key("2")
        a.wait(f"(() => {{ const s = {STATE}; return s.position === '#5 of 20' && s.kind !== 'saving'; }})()")
        assert _decisions(catalogue)[-1][:3] == (ODD_PHOTO, "match", _candidates(3)[1])
        # two tabs on photo 1: the first decides it; the second, which still shows it undecided, is told
        b = Tab(devtools, server.url)
        assert b.js(STATE)["position"] == "#1 of 20"
        a.mouse(".chip:first-child", click=True)  # back to photo 1
        a.wait(f"(() => {{ const s = {STATE}; return s.position === '#1 of 20'; }})()")
        a.key("1")
        a.wait(f"(() => {{ const s = {STATE}; return s.position === '#2 of 20' && s.kind !== 'saving'; }})()")
        b.key("2")
        state = b.wait(f"(() => {{ const s = {STATE}; return s.kind === 'conflict' && s; }})()")
        assert "n00.png was decided 'w_1' by tester" in state["message"] and "nothing recorded" in state["message"]
        assert state["position"] == "#1 of 20" and state["status"].startswith("this individual: w_1 (tester")
        assert [d[2] for d in _decisions(catalogue) if d[0] == "n00.png"] == ["w_1"]
        b.key("2")  # now knowing it, the second tab replaces it
        b.wait(f"(() => {{ const s = {STATE}; return s.position === '#2 of 20' && s.kind !== 'saving'; }})()")
        assert [d[2] for d in _decisions(catalogue) if d[0] == "n00.png"] == ["w_1", "w_2"]
        loaded = "[...document.images].filter(i => i.getAttribute('src')).every(i => i.complete && i.naturalWidth > 0)"
        assert a.wait(loaded, timeout=30) and b.wait(loaded, timeout=30)  # a loaded machine decodes slowly
    finally:
        server.stop()
    assert "stopped serving batch b20: 5 decisions recorded" in (tmp_path / "server.log").read_text()
