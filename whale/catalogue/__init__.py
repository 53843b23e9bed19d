"""The catalogue: photos of a new batch matched against known individuals, reviewed, accepted.

:mod:`whale.catalogue.report` writes the review page of a batch's proposals (a static HTML
report with thumbnails beside it) and reads the decisions it exports.
"""
