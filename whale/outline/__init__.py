"""The trailing edge's outline, learned: each fluke's edge read from the photo (:mod:`whale.outline.curve`), a small
1-D network embedding it (:mod:`whale.outline.net`), and ``whale score --matcher outline`` writing the toolkit's
score files from it (:mod:`whale.outline.score`), a source the joint identification takes as ``--with-run``."""
