"""The review server's page (:mod:`whale.catalogue.server`): keyboard first, candidates side by side.

One screen per photo: the query pinned at the top, its candidates (up to
:data:`whale.catalogue.reviewdata.SHOWN`) in one row below it, each scaled to the same width, with its
individual, the number a researcher decides on first (the calibrated P(same whale), where the data gives
one, on a line of its own that is never cut off), then the raw evidence (score; verified keypoint matches where
the batch has them), file name and photo count, and up to three other photos of its individual on hover, drawn
beside the card over its neighbours (the query stays in view; the strip takes no clicks, so the next card is
hovered or clicked through it). Keys: 1-5 this candidate's individual, N a new individual (a name prompt with the
next free name filled in), S skip, U undo, arrows or J/K move, Shift+1-5 (or a click) enlarges a pair,
Esc closes. After each decision the next undecided photo comes up. Every decision is one request to the
server, answered once it is committed; keys pressed meanwhile wait their turn, so a fast reviewer's keys
apply to the photos they were meant for. Plain HTML, CSS and JavaScript with no library; every text from
the catalogue is put in as text (``textContent``), never as markup. docs/review.md describes it.
"""

PAGE_CSS = """
* { box-sizing: border-box; }
html, body { margin: 0; }
body { font: 14px/1.3 system-ui, sans-serif; color: #222; background: #f6f6f4; }
header { display: flex; flex-wrap: wrap; gap: .2em 1.2em; align-items: baseline; padding: .35em .8em;
         background: #233044; color: #fff; }
header h1 { font-size: 1.1em; margin: 0; }
#settings { font-family: ui-monospace, monospace; font-size: .85em; color: #cfe0f3; }
#progress { font-weight: bold; }
.keys { margin-left: auto; font-size: .85em; color: #cfe0f3; }
kbd { border: 1px solid #8aa; border-radius: .2em; padding: 0 .25em; font-family: inherit; }
nav#chips { display: flex; flex-wrap: wrap; gap: 3px; padding: .3em .8em; max-height: 3.7em; overflow-y: auto; }
.chip { min-width: 2.3em; padding: 0 .3em; border: 1px solid #999; border-radius: .3em; background: #fff;
        font-size: .8em; cursor: pointer; }
.chip.match { background: #bfe8c8; } .chip.new { background: #bcd7f5; } .chip.skip { background: #ddd; color: #555; }
.chip.current { outline: 2px solid #e60; outline-offset: 1px; }
main { padding: 0 .8em; }
#query-row { display: flex; gap: 1.2em; align-items: flex-start; padding: .3em 0 .5em; }
#query { margin: 0; border: 3px solid #233044; border-radius: .3em; background: #fff; flex: none; }
#query img { display: block; height: 38vh; width: auto; max-width: 60vw; object-fit: contain; cursor: zoom-in; }
#query-info { min-width: 0; }
#query-info h2 { font-size: 1.15em; margin: 0 0 .3em; overflow-wrap: anywhere; }
#position { color: #666; font-weight: normal; }
.flag { font-size: .85em; border-radius: .3em; padding: .05em .4em; margin-right: .4em; }
.possibly-new { background: #fd6; }
.group { background: #cdf; }
.group a { cursor: pointer; text-decoration: underline; }
#decision-status { font-size: 1.05em; margin: .4em 0; }
#decision-status.decided { color: #175; font-weight: bold; }
#message:empty { display: none; }
#message { padding: .3em .5em; border-radius: .3em; }
#message.conflict, #message.error { background: #fdd; color: #900; }
#message.done { background: #e3f5e6; color: #175; }
#message.saving { color: #666; }
#more { color: #666; font-size: .9em; }
#candidates { display: grid; grid-template-columns: repeat(5, minmax(0, 1fr)); gap: .6em; }
figure.cand { position: relative; margin: 0; padding: .3em; background: #fff; border: 2px solid #ccc;
              border-radius: .3em; }
figure.cand.chosen { border-color: #2a7; background: #eaf7ec; }
figure.cand .pic { display: block; width: 100%; height: auto; max-height: 33vh; object-fit: contain; background: #eee;
                   cursor: zoom-in; }
.key { position: absolute; top: .35em; left: .35em; background: #233044; color: #fff; font-weight: bold;
       padding: 0 .45em; border-radius: .3em; }
figcaption { font-size: .85em; margin-top: .25em; }
figcaption > div { overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.individual { font-size: 1.1em; font-weight: bold; }
.evidence { font-family: ui-monospace, monospace; }
.probability { font-family: ui-monospace, monospace; font-size: 1.1em; font-weight: bold; color: #175; }
.file, .count { color: #555; }
.others { display: none; position: absolute; top: -2px; left: calc(100% + .3em); width: calc(200% + .6em); z-index: 2;
          gap: 3px; padding: .3em; background: #fff; border: 1px solid #888; box-shadow: 0 2px 8px #0005;
          pointer-events: none; }
figure.cand:hover .others { display: flex; }
figure.cand:nth-child(n+4) .others { left: auto; right: calc(100% + .3em); }
.others img { width: calc((100% - 6px) / 3); max-height: 20vh; object-fit: contain; }
.none { color: #555; font-size: 1.05em; }
#zoom { position: fixed; inset: 0; background: #111e; color: #fff; display: flex; flex-direction: column;
        align-items: center; justify-content: center; gap: .6em; z-index: 5; }
#zoom-pair { display: flex; gap: 1em; align-items: center; justify-content: center; }
#zoom-pair img { width: 48vw; height: auto; max-height: 84vh; object-fit: contain; background: #fff; }
#zoom-pair img.match { width: 97vw; }
#prompt { position: fixed; inset: 0; background: #0006; display: flex; align-items: center; justify-content: center;
          z-index: 6; }
#prompt form { background: #fff; padding: 1em 1.2em; border-radius: .4em; box-shadow: 0 4px 16px #0006; }
#new-name { font-size: 1.1em; width: 18em; }
[hidden] { display: none !important; }
"""

PAGE_JS = r"""
(() => {
  "use strict";
  let data = null, state = {decisions: {}, decided: 0, new_names: [], suggestion: ""}, at = 0, zoomed = 0;
  const done = [];  // photos this tab decided, latest last: what U takes back
  let queue = Promise.resolve();
  const $ = id => document.getElementById(id);
  const el = (tag, cls, text) => {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = text;
    return e;
  };
  const img = (src, alt, cls) => { const i = el("img", cls); i.src = "files/" + src; i.alt = alt; return i; };
  const fmt = x => Number(x).toFixed(3);
  const run = act => (queue = queue.then(act).catch(e => say(String(e), "error")));
  const say = (text, kind) => { const m = $("message"); m.textContent = text || ""; m.className = kind || ""; };
  const decisionOf = p => { const d = state.decisions[p.photo]; return d && d.decision ? d : null; };
  const when = iso => { const t = new Date(iso); return isNaN(t) ? iso : t.toLocaleTimeString(); };

  async function api(path, body) {
    const init = body === undefined ? {cache: "no-store"} :
      {method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body)};
    const r = await fetch(path, init);
    let json = {};
    try { json = await r.json(); } catch (e) { /* an empty answer */ }
    return {status: r.status, body: json};
  }
  function describe(d) {
    if (!d) return "undecided";
    const what = d.decision === "match" ? "this individual: " + d.individual :
      d.decision === "new" ? "new individual: " + d.individual : "skipped";
    return what + " (" + d.by + ", " + when(d.at) + ")";
  }
  const isSet = x => x !== null && x !== undefined;
  const same = c => isSet(c.probability) ? "P(same) " + fmt(c.probability) : null;
  function evidence(c) {  // the raw evidence: score, then verified keypoint matches where the batch has them
    let text = "score " + fmt(c.score);
    if (isSet(c.inliers)) text += " · " + c.inliers + " verified matches";
    return text;
  }
  function header() {
    document.title = "Review of batch " + data.batch;
    $("title").textContent = "Batch " + data.batch;
    const parts = [data.method === "keypoints" ? "method: keypoint matcher" :
      data.method === "joint" ? "method: joint identification" : "method: run " + data.run];
    if (data.config_hash) parts.push("config " + data.config_hash);
    parts.push("fingerprint " + data.fingerprint, (data.scale === "probability" ?
      "possibly new below P(same) " : "threshold ") + fmt(data.threshold));
    $("settings").textContent = parts.join(" · ");
    $("settings").title = "matched " + data.matched_at;
  }
  function chips() {
    const nav = $("chips");
    nav.textContent = "";
    data.photos.forEach((p, i) => {
      const d = decisionOf(p);
      const b = el("button", "chip" + (d ? " " + d.decision : "") + (i === at ? " current" : ""), String(i + 1));
      b.type = "button";
      b.tabIndex = -1;
      b.title = p.name + ": " + describe(d);
      b.addEventListener("click", () => run(() => go(i)));
      nav.appendChild(b);
    });
    $("progress").textContent = state.decided + " of " + data.photos.length + " decided";
  }
  function show() {
    const p = data.photos[at], d = decisionOf(p);
    $("position").textContent = "#" + (at + 1) + " of " + data.photos.length;
    $("query-name").textContent = p.name;
    $("query-name").title = p.photo + "\nsha256 " + p.hash;
    $("query-img").src = "files/" + p.image;
    $("query-img").alt = "query " + p.name;
    const flags = $("flags");
    flags.textContent = "";
    if (p.possibly_new) flags.appendChild(el("span", "flag possibly-new", "possibly new"));
    if (p.group !== null) {
      const g = el("span", "flag group", "group " + p.group + ": with");
      data.photos.forEach((q, j) => {
        if (j === at || q.group !== p.group) return;
        const a = el("a", null, "#" + (j + 1));
        a.addEventListener("click", () => run(() => go(j)));
        g.append(" ", a);
      });
      flags.appendChild(g);
    }
    $("decision-status").textContent = describe(d);
    $("decision-status").className = d ? "decided" : "";
    $("more").textContent = p.more ?
      "+" + p.more + " more candidates below these (the static page lists them: review without --serve)" : "";
    const row = $("candidates");
    row.textContent = "";
    if (!p.candidates.length) row.appendChild(el("p", "none", "No candidate: N names a new individual, S skips."));
    p.candidates.forEach(c => {
      const f = el("figure", "cand");
      f.dataset.rank = c.rank;
      if (d && d.decision === "match" && d.individual === c.individual) f.classList.add("chosen");
      const pic = img(c.image, "#" + c.rank + " " + c.individual, "pic");
      pic.addEventListener("click", () => run(() => enlarge(c.rank)));
      const cap = el("figcaption");
      const file = el("div", "file", c.file), who = el("div", "individual", c.individual);
      who.title = c.individual;
      file.title = c.file;
      cap.append(who);
      if (isSet(c.probability)) cap.append(el("div", "probability", same(c)));  // first: what is decided on
      cap.append(el("div", "evidence", evidence(c)), file,
                 el("div", "count", c.photos + (c.photos === 1 ? " photo" : " photos")));
      const others = el("div", "others");
      c.others.forEach(o => others.appendChild(img(o, "another photo of " + c.individual)));
      if (!c.others.length) others.appendChild(el("span", null, "no other photo of " + c.individual));
      f.append(el("span", "key", String(c.rank)), pic, cap, others);
      row.appendChild(f);
    });
    chips();
  }
  function go(i) {
    at = i;
    unzoom();
    show();
    window.scrollTo(0, 0);
  }
  function enlarge(rank) {
    const p = data.photos[at], c = p.candidates[rank - 1];
    if (!c) { say("No candidate " + rank + " for this photo.", "error"); return; }
    const pair = $("zoom-pair");
    pair.textContent = "";
    if (c.match) pair.appendChild(img(c.match, "query beside #" + rank + ", verified matches drawn", "match"));
    else pair.append(img(p.large, "query " + p.name), img(c.large, "#" + rank + " " + c.individual));
    $("zoom-caption").textContent = p.name + " beside #" + rank + " " + c.individual + " (" +
      [same(c), evidence(c)].filter(Boolean).join(" · ") +
      "): 1-5 decide, Shift+1-5 another candidate, Esc closes";
    $("zoom").hidden = false;
    zoomed = rank;
  }
  function unzoom() { $("zoom").hidden = true; zoomed = 0; }
  function nextUndecided(from) {
    const n = data.photos.length;
    for (let k = 1; k <= n; k++) {
      const j = (from + k + n) % n;
      if (!decisionOf(data.photos[j])) return j;
    }
    return -1;
  }
  async function decide(i, decision, individual) {
    const p = data.photos[i], known = state.decisions[p.photo];
    say("saving …", "saving");
    let r;
    try {
      r = await api("api/decide", {photo: p.photo, decision: decision, individual: individual || null,
                                   expect: known ? known.id : null});
    } catch (e) {
      say("The review server does not answer: nothing recorded for this key. Start `whale catalogue review " +
          "CAT --batch " + data.batch + " --serve` again and reload this page: every decision it answered is saved.",
          "error");
      return false;
    }
    if (r.body.state) state = r.body.state;
    if (r.status === 200) { say(""); return true; }
    show();
    say(r.body.error || "error " + r.status, r.status === 409 ? "conflict" : "error");
    return false;
  }
  async function decideHere(decision, individual) {
    const i = at;
    if (!await decide(i, decision, individual)) return;
    done.push(i);
    const j = nextUndecided(i);
    if (j < 0) {
      go(i);
      say("All " + data.photos.length + " photos decided; every decision is saved in the catalogue.", "done");
    } else go(j);
  }
  function pick(k) {
    const c = data.photos[at].candidates[k - 1];
    if (!c) { say("No candidate " + k + " for this photo.", "error"); return; }
    return decideHere("match", c.individual);
  }
  async function undo() {
    while (done.length && !decisionOf(data.photos[done[done.length - 1]])) done.pop();
    const i = done.length ? done.pop() : (decisionOf(data.photos[at]) ? at : -1);
    if (i < 0) { say("Nothing to undo.", "error"); return; }
    if (await decide(i, "undo", null)) {
      go(i);
      say("Undone: " + data.photos[i].name + " is undecided again.", "done");
    }
  }
  function ask() {
    const list = $("new-names"), box = $("new-name");
    list.textContent = "";
    state.new_names.forEach(n => { const o = el("option"); o.value = n; list.appendChild(o); });
    $("prompt-photo").textContent = data.photos[at].name;
    box.value = state.suggestion;
    $("prompt").hidden = false;
    box.focus();
    box.select();
  }
  function closePrompt() { $("prompt").hidden = true; $("new-name").blur(); }
  $("prompt-form").addEventListener("submit", ev => {
    ev.preventDefault();
    const name = $("new-name").value.trim();
    if (!name) return;
    closePrompt();
    run(() => decideHere("new", name));
  });
  $("new-name").addEventListener("keydown", ev => {
    if (ev.key === "Escape") { ev.preventDefault(); closePrompt(); }
  });
  $("query-img").addEventListener("click", ev => {
    ev.preventDefault();
    const p = data.photos[at];
    window.open("files/" + p.large, "_blank");
  });
  $("zoom").addEventListener("click", unzoom);
  document.addEventListener("keydown", ev => {
    if (ev.ctrlKey || ev.metaKey || ev.altKey || !data || !$("prompt").hidden) return;
    if (ev.target && ev.target.closest && ev.target.closest("input, textarea, select")) return;
    const key = ev.key, lower = key.toLowerCase(), n = data.photos.length;
    let act = null;
    if (ev.shiftKey && /^Digit[1-5]$/.test(ev.code)) act = () => enlarge(+ev.code.slice(5));
    else if (/^[1-5]$/.test(key)) act = () => pick(+key);
    else if (lower === "n") act = ask;
    else if (lower === "s") act = () => decideHere("skip");
    else if (lower === "u") act = undo;
    else if (key === "ArrowRight" || lower === "j") act = () => go((at + 1) % n);
    else if (key === "ArrowLeft" || lower === "k") act = () => go((at - 1 + n) % n);
    else if (key === "Escape") act = unzoom;
    if (!act) return;
    ev.preventDefault();
    run(act);
  });
  async function load() {
    let b, s;
    try {
      [b, s] = await Promise.all([api("api/batch"), api("api/state")]);
    } catch (e) {
      say("The review server does not answer: start it again and reload this page.", "error");
      return;
    }
    data = b.body;
    state = s.body;
    header();
    if (!data.photos.length) { say("This batch has no photos.", "done"); return; }
    const j = nextUndecided(-1);
    go(j < 0 ? 0 : j);
    if (j < 0) say("All " + data.photos.length + " photos decided; keys still redecide or undo.", "done");
    document.body.dataset.ready = "1";
  }
  run(load);
})();
"""

PAGE_HTML = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<title>Review</title><style>""" + PAGE_CSS + """</style></head>
<body>
<header><h1 id="title">Review</h1><span id="settings"></span><span id="progress"></span>
<span class="keys"><kbd>1</kbd>-<kbd>5</kbd> this individual · <kbd>N</kbd> new · <kbd>S</kbd> skip ·
<kbd>U</kbd> undo · <kbd>&larr;</kbd><kbd>&rarr;</kbd> or <kbd>J</kbd><kbd>K</kbd> move ·
<kbd>Shift</kbd>+<kbd>1</kbd>-<kbd>5</kbd> or click: enlarge</span></header>
<nav id="chips" aria-label="the batch's photos"></nav>
<main>
<section id="query-row"><figure id="query"><img id="query-img" alt="query"></figure>
<div id="query-info"><h2><span id="position"></span> <span id="query-name"></span></h2>
<div id="flags"></div><p id="decision-status"></p><p id="message" role="status" aria-live="polite"></p>
<p id="more"></p></div></section>
<section id="candidates" aria-label="candidates, best first"></section>
</main>
<div id="zoom" hidden><div id="zoom-pair"></div><p id="zoom-caption"></p></div>
<div id="prompt" hidden><form id="prompt-form"><label>New individual for <b id="prompt-photo"></b>:
<input id="new-name" list="new-names" autocomplete="off" aria-label="name of the new individual"></label>
<button>Record</button><br><small>Enter records it, Esc cancels; this batch's new individuals are offered.</small>
<datalist id="new-names"></datalist></form></div>
<script>""" + PAGE_JS + """</script>
</body></html>
"""
