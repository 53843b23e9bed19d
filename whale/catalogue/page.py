"""The review page's style sheet and script, inlined into every page (:mod:`whale.catalogue.report`).

Plain CSS and JavaScript with no library, so the page works offline in any browser.
The script builds the decisions CSV (``photo,decision,individual``; fields quoted as RFC 4180
says, lines ended by line feeds as in the template, so Python's ``csv`` module reads them back) from
the form, refuses ``new`` without a name, shows the CSV in the page's text box and downloads it as
``decisions.csv`` (a Blob).
"""

PAGE_CSS = """
body { font-family: system-ui, sans-serif; margin: 1em; color: #222; }
header p { max-width: 60em; }
section.photo { border-top: 1px solid #bbb; padding: .5em 0 1em; }
section.photo.incomplete { background: #fee; }
h2 { font-size: 1.1em; margin: .3em 0; }
.flag { font-size: .8em; font-weight: normal; border-radius: .3em; padding: .1em .4em; margin-left: .5em; }
.possibly-new { background: #fd6; }
.group { background: #cdf; }
.row { display: flex; flex-wrap: wrap; gap: .8em; align-items: flex-start; }
figure { margin: 0; padding: .3em; border: 2px solid transparent; border-radius: .3em; }
figure.query { border-color: #888; }
figure img { display: block; max-width: 256px; max-height: 256px; }
figure.with-match { flex-basis: 100%; }
figure img.match { max-width: min(100%, 1100px); max-height: 340px; }
a.enlarge { display: block; cursor: zoom-in; }
.matches { color: #555; }
figure img.heat { margin-top: .2em; }
figcaption { font-size: .85em; margin-top: .2em; }
label.pick { cursor: pointer; display: block; }
figure.candidate:has(input:checked) { border-color: #2a7; background: #efe; }
.choice { margin-top: .5em; }
.choice label { margin-right: 1em; }
footer { position: sticky; bottom: 0; background: #fff; border-top: 2px solid #888; padding: .5em 0; }
#decisions-csv { display: block; width: 100%; font-family: monospace; margin-top: .5em; }
#export-status.error { color: #b00; }
"""

PAGE_JS = r"""
(function () {
  "use strict";
  function field(text) {
    return /[",\r\n]/.test(text) ? '"' + text.replace(/"/g, '""') + '"' : text;
  }
  function decisions() {
    var lines = ["photo,decision,individual"], missing = [];
    var sections = document.querySelectorAll("section.photo");
    for (var i = 0; i < sections.length; i++) {
      var sec = sections[i], picked = sec.querySelector("input[type=radio]:checked");
      var decision = picked ? picked.value : "skip", individual = "";
      if (decision === "match") { individual = picked.getAttribute("data-individual"); }
      if (decision === "new") {
        individual = sec.querySelector("input.new-name").value.trim();
        if (!individual) { missing.push(sec); }
      }
      sec.classList.toggle("incomplete", decision === "new" && !individual);
      lines.push([sec.getAttribute("data-photo"), decision, individual].map(field).join(","));
    }
    return {csv: lines.join("\n") + "\n", missing: missing};
  }
  function exportDecisions() {
    var result = decisions(), status = document.getElementById("export-status");
    var box = document.getElementById("decisions-csv");
    if (result.missing.length) {
      box.value = "";
      status.className = "error";
      status.textContent = result.missing.length + " photo(s) marked new without a name: name them first";
      result.missing[0].scrollIntoView();
      return;
    }
    box.value = result.csv;
    status.className = "";
    status.textContent = "decisions.csv: " + (result.csv.split("\n").length - 2) + " photos";
    var url = URL.createObjectURL(new Blob([result.csv], {type: "text/csv;charset=utf-8"}));
    var link = document.createElement("a");
    link.href = url;
    link.download = "decisions.csv";
    document.body.appendChild(link);
    link.click();
    link.remove();
    setTimeout(function () { URL.revokeObjectURL(url); }, 10000);
  }
  document.getElementById("export").addEventListener("click", exportDecisions);
  var names = document.querySelectorAll("input.new-name");
  for (var i = 0; i < names.length; i++) {
    names[i].addEventListener("input", function (event) {
      var sec = event.target.closest("section.photo");
      sec.querySelector("input[type=radio][value=new]").checked = true;
    });
  }
})();
"""
