"""A researcher's photo-ID catalogue: identified individuals and their photos, matched against new batches.

:mod:`~whale.catalogue.db` (SQLite schema, transactions), :mod:`~whale.catalogue.ingest` (``add``),
:mod:`~whale.catalogue.features` (``index``: features of a run, incremental),
:mod:`~whale.catalogue.match` (``match``), :mod:`~whale.catalogue.proposals` (the proposals file the
review page reads), :mod:`~whale.catalogue.report` (``review``: the static HTML page of a batch's
proposals, thumbnails beside it, and the decisions CSV it exports), :mod:`~whale.catalogue.server`
(``review --serve``: a local page deciding at the keyboard, each decision recorded at once),
:mod:`~whale.catalogue.decisions` (``accept``, ``record``), :mod:`~whale.catalogue.cli` (``whale catalogue``). docs/catalogue.md and
docs/review.md tell the story.
"""
