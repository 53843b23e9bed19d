"""``whale catalogue review CAT --batch B --serve``: the review page served locally, each decision saved at once.

A standard-library HTTP server (:class:`http.server.ThreadingHTTPServer`) bound to 127.0.0.1 only, on
``--port`` or a free port it picks. It serves the keyboard-driven page (:mod:`whale.catalogue.app`), the
batch's data and images (:mod:`whale.catalogue.reviewdata`, files of the review folder named by their
content) and takes one decision per request: ``match`` / ``new`` / ``skip`` / ``undo`` of one photo, recorded
by :func:`whale.catalogue.decisions.record` (the code of ``accept``) under the catalogue's write lock and
committed before the answer leaves, so a closed tab or a killed server loses nothing already answered.

Routes::

    GET  /                     the page
    GET  /api/batch            the batch's data (read once at start)
    GET  /api/state            the decisions standing now (read from the catalogue on every request)
    GET  /files/<image>        an image of the review folder (thumbs/, large/, matches/: <20 hex>.jpg)
    POST /api/decide           {"photo": str, "decision": "match" | "new" | "skip" | "undo",
                                "individual": str | null, "expect": int | null}

``expect`` is the id of the photo's latest decision as the page knows it (null: none). When the catalogue's
differs (another tab or reviewer decided the photo meanwhile) nothing is recorded: the answer is 409 with
what stands now, and the page says so; a decision that replaces a standing one the page showed is recorded
as a redecision (``accept --redecide``). Answers: 200 ``{"counts", "state"}``, 409 ``{"error", "state"}``,
400 ``{"error"}`` (a refused decision: the one-line message ``accept`` would give). Requests must name this
server as their host (no DNS rebinding) and decisions come as JSON from its own origin (no cross-site form).
"""
from __future__ import annotations

import json
import re
import sys
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from whale.catalogue import sql
from whale.catalogue.app import PAGE_HTML
from whale.catalogue.db import Catalogue
from whale.catalogue.decisions import KINDS, batch_proposals, record, standing
from whale.catalogue.report import Decision
from whale.catalogue.reviewdata import decision_state
from whale.catalogue.thumbs import NAME
from whale.core.errors import DataError

HOST = "127.0.0.1"
MAX_BODY = 64 * 1024


class Conflict(Exception):
    """The photo's latest decision is not the one the page knew."""


class ReviewServer(ThreadingHTTPServer):
    """The review server of one batch (module docstring). ``data``: :func:`whale.catalogue.reviewdata.review_data`'s;
    ``by``, ``sighting``: who decides and the sightings' defaults, as ``accept`` takes them."""

    daemon_threads = True

    def __init__(self, root, batch: str, out_dir, data: dict, port: int = 0, by: str | None = None,
                 sighting: dict[str, str] | None = None, log=None):
        self.root, self.batch, self.out_dir = Path(root), batch, Path(out_dir)
        self.data = json.dumps(data).encode("utf-8")
        self.by, self.sighting, self.log = by, sighting or {}, log
        self.recorded = 0
        self._count = threading.Lock()
        check_port(port)
        try:
            super().__init__((HOST, int(port)), _Handler)
        except OSError as exc:
            raise DataError(f"{HOST}:{port}: cannot serve there ({exc.strerror or exc}); choose another --port, "
                            "or leave it out for a free one") from None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.server_address[1]}/"

    def state(self) -> dict:
        with Catalogue.open(self.root) as cat:
            return decision_state(cat, self.batch)

    def decide(self, request: dict) -> tuple[dict, dict]:
        """Record one decision (module docstring); ``(counts, state)``.

        Raises:
            Conflict: the photo's latest decision is not ``request["expect"]`` (nothing recorded).
            DataError: a refused decision (nothing recorded).
        """
        photo, decision, individual, expect = _fields(request)
        with Catalogue.open(self.root) as cat, cat.writing():  # the check and the record under one lock
            props = batch_proposals(cat, self.batch)
            by_key = {p.photo: p for p in props.photos}
            if photo not in by_key:
                raise DataError(f"review of batch {self.batch}: photo {photo!r} is not in {props.path}")
            latest = sql.last_decisions(cat.conn, [by_key[photo].hash]).get(by_key[photo].hash)
            if (latest[0] if latest else None) != expect:
                raise Conflict(_conflict_message(photo, latest))
            counts = record(cat, self.batch, [Decision(photo, decision, individual, 0)], by=self.by,
                            redecide=latest is not None and standing(latest[2]) is not None, sighting=self.sighting,
                            where=f"review of batch {self.batch}: {Path(photo).name}")
            with self._count:
                self.recorded += 1
            if self.log:
                self.log(f"{Path(photo).name}: {decision}{' ' + individual if individual else ''}")
            return counts, decision_state(cat, self.batch, props)


def _fields(request) -> tuple[str, str, str | None, int | None]:
    if not isinstance(request, dict):
        raise DataError("a decision is a JSON object")
    photo, decision = request.get("photo"), request.get("decision")
    individual, expect = request.get("individual"), request.get("expect")
    if not isinstance(photo, str) or decision not in KINDS:
        raise DataError(f"a decision names a photo and one of {', '.join(KINDS)}, received {photo!r}, {decision!r}")
    if individual is not None and not isinstance(individual, str):
        raise DataError(f"individual: expected a name or null, received {individual!r}")
    if expect is not None and (isinstance(expect, bool) or not isinstance(expect, int)):
        raise DataError(f"expect: expected a decision id or null, received {expect!r}")
    return photo, decision, (individual.strip() or None) if individual else None, expect


def _conflict_message(photo: str, latest) -> str:
    name = Path(photo).name
    if latest is None:
        now = "has no decision any more"
    elif standing(latest[2]) is None:
        now = f"was undone by {latest[3]} at {latest[4]}"
    else:
        now = f"was decided {latest[2]!r} by {latest[3]} at {latest[4]}"
    return (f"{name} {now}, in another tab or by another reviewer, since this page showed it: nothing recorded. "
            "The page now shows what stands; decide again to replace it.")


class _Handler(BaseHTTPRequestHandler):
    server: ReviewServer
    server_version = "whale-review"
    protocol_version = "HTTP/1.0"  # one request per connection: no idle keep-alive holds a thread

    def log_message(self, format, *args):  # the page's requests are not news; errors are answered, not logged
        pass

    def _send(self, status: int, body: bytes, kind: str, cache: str = "no-store") -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", cache)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, obj) -> None:
        self._send(status, json.dumps(obj).encode("utf-8"), "application/json; charset=utf-8")

    def _ours(self) -> bool:
        port = self.server.server_address[1]
        hosts = {f"{HOST}:{port}", f"localhost:{port}"}
        origin = self.headers.get("Origin")
        if self.headers.get("Host") not in hosts or (origin is not None and origin not in
                                                      {f"http://{h}" for h in hosts}):
            self._json(HTTPStatus.FORBIDDEN, {"error": "this review server answers its own page only"})
            return False
        return True

    def do_GET(self):
        if not self._ours():
            return
        path = self.path.split("?", 1)[0]
        try:
            if path == "/":
                self._send(HTTPStatus.OK, PAGE_HTML.encode("utf-8"), "text/html; charset=utf-8")
            elif path == "/api/batch":
                self._send(HTTPStatus.OK, self.server.data, "application/json; charset=utf-8")
            elif path == "/api/state":
                self._json(HTTPStatus.OK, self.server.state())
            elif path.startswith("/files/") and re.fullmatch(NAME, path[len("/files/"):]):
                file = self.server.out_dir / path[len("/files/"):]
                if not file.is_file():
                    self._json(HTTPStatus.NOT_FOUND, {"error": f"{path}: no such image"})
                    return
                self._send(HTTPStatus.OK, file.read_bytes(), "image/jpeg", "max-age=31536000, immutable")
            else:
                self._json(HTTPStatus.NOT_FOUND, {"error": f"{path}: not a page of this server"})
        except DataError as exc:
            self._json(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": str(exc)})

    do_HEAD = do_GET

    def do_POST(self):
        if not self._ours():
            return
        if self.path != "/api/decide":
            self._json(HTTPStatus.NOT_FOUND, {"error": f"{self.path}: not a page of this server"})
            return
        length = (self.headers.get("Content-Length") or "0").strip()
        size = int(length) if length.isdigit() and len(length) < 12 else -1  # "abc", "-5", "1e9": no body to read
        if not self.headers.get("Content-Type", "").startswith("application/json") or not 0 < size <= MAX_BODY:
            self._json(HTTPStatus.BAD_REQUEST, {"error": f"a decision is a JSON body of at most {MAX_BODY} bytes "
                                                         f"(Content-Length {length[:20]!r})"})
            return
        try:
            request = json.loads(self.rfile.read(size))
            counts, state = self.server.decide(request)
        except RecursionError:  # JSON nested deeper than the parser goes: bad input, not a bug
            self._json(HTTPStatus.BAD_REQUEST, {"error": "a decision is a flat JSON object; this one is nested too "
                                                         "deeply to read"})
        except ValueError as exc:  # DataError too; bad JSON
            self._json(HTTPStatus.BAD_REQUEST, {"error": str(exc).split("\n")[0]})
        except Conflict as exc:
            self._json(HTTPStatus.CONFLICT, {"error": str(exc), "state": self.server.state()})
        except Exception as exc:  # a bug or a broken disk: said to the page (nothing recorded), traceback here
            import traceback

            traceback.print_exc()
            self._json(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"nothing recorded: {type(exc).__name__}: {exc}"})
        else:
            self._json(HTTPStatus.OK, {"counts": counts, "state": state})


def check_port(port) -> int:
    """``port`` as an int when a TCP port (0: a free one), else a one-line :class:`DataError` naming it."""
    try:
        value = int(port)
    except (TypeError, ValueError):
        value = -1
    if not 0 <= value <= 65535:
        raise DataError(f"{HOST}:{port}: not a port (expected 1 to 65535, or 0 for a free one); choose another "
                        "--port, or leave it out for a free one")
    return value


def serve(root, batch: str, out_dir=None, port: int = 0, by: str | None = None, sighting=None, matches=None,
          verbose: bool = True, probability=None) -> str:
    """Serve ``batch``'s review until Ctrl-C (module docstring); returns what it recorded, in one line.

    ``out_dir``: the review folder whose images it writes and serves (default ``CAT/batches/BATCH/review``);
    ``matches``: the keypoint feature store of the batch's match views (:func:`review_data`).

    Raises:
        DataError: an unknown batch, an unreadable photo, a port that cannot be had or is not one.
    """
    from whale.catalogue.reviewdata import review_data

    check_port(port)  # before the batch's images are made
    with Catalogue.open(root) as cat:
        rel = sql.batch_proposals_file(cat.conn, batch)
        if rel is None:
            batch_proposals(cat, batch)  # raises, naming the batches there are
        out_dir = Path(out_dir) if out_dir else (cat.root / rel).parent / "review"
        data = review_data(cat, batch, out_dir, matches=matches, probability=probability, verbose=verbose)
    server = ReviewServer(root, batch, out_dir, data, port, by, sighting, log=_printer if verbose else None)
    print(f"reviewing batch {batch} at {server.url} (each decision is saved as it is made; Ctrl-C stops)",
          flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return f"stopped serving batch {batch}: {server.recorded} decisions recorded"


def _printer(line: str) -> None:
    print(line, file=sys.stdout, flush=True)
