"""README.md and docs/*.md: every command line parses with the CLI it names, every link resolves,
the README stays short, and docs/configs.md is what whale.config.doc generates.

A command line inside a ``` block is parsed by the real parser of the command it names, in this
process, without running it (``whale X`` by whale's tree, ``run_fold.py``, ``python -m whale.Y`` by
:func:`whale.cli.command_parser`; both from the command's ``add_arguments``): a concrete line must parse as a whole
(required flags, types, choices); a synopsis line (with ``[...]``, ``(a | b)``, ``...``) must name
only flags its command (or subcommand) knows. ``tests/test_docs_kaggle.py`` also runs docs/kaggle.md's
commands with ``--help`` under Kaggle's package versions.
"""
import re
import shlex
from pathlib import Path

import pytest

from whale import cli, command

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = [README, *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 200

# `python -m NAME` or `python SCRIPT` -> the whale subcommand it equals ("whale.inference": "score", "run_fold.py": "train")
ENTRY_POINTS = {c.same_as.split()[-1]: c.name for c in cli.COMMANDS}
# Importing these loads Keras (seconds): their flags are checked against their source instead, as benchmarks'.
SOURCE_CHECKED = {"whale.models.convert", "whale.keypoints.learn"}
SYNOPSIS = re.compile(r"[\[\](){}|<>]|\.\.\.|[^\x00-\x7f]")
FLAG = re.compile(r"--[a-z][a-z0-9-]*")
# Benchmarks that pass the words after a bare `--` on to a whale subcommand: those words are parsed by it.
PASSES_ON = {"benchmarks/flukes/humpback_fuse.py": ["ensemble", "RUN", "--out", "OUT.csv"]}


def code_lines(path: Path) -> list[str]:
    """Lines inside the file's ``` blocks: continuations joined, comments, numbering and env prefixes dropped.

    A line whose comment starts with ``+`` ("# + the row's flags") is a part of a command: it
    keeps a trailing `` ...`` and is read as a synopsis.
    """
    blocks = re.findall(r"^```[a-z]*\n(.*?)^```", path.read_text(), re.M | re.S)
    lines = []
    for block in blocks:
        for line in block.replace("\\\n", " ").splitlines():
            line, _, comment = line.partition(" #")
            line = re.sub(r"^\d+\.\s+", "", line.strip()) + (" ..." if comment.strip().startswith("+") else "")
            line = re.sub(r"^(?:[A-Z_]+=\S+\s+)+", "", line)
            if line:
                lines.append(line)
    return lines


def commands() -> list[tuple[str, str]]:
    """``(doc name, command line)`` for every line that runs one of ours, run_fold.py to whale X."""
    found = []
    for doc in DOCS:
        for line in code_lines(doc):
            if re.match(r"(python (-m whale\b|run_fold\.py|ensemble\.py|benchmarks/)|whale |make )", line):
                found.append((doc.relative_to(ROOT).as_posix(), line))
    return found


def _words(line: str) -> list[str]:
    try:
        return shlex.split(line)
    except ValueError:  # an unbalanced quote inside a synopsis
        return line.split()


def _source_flags(path: Path, flags: list[str]) -> list[str]:
    source = path.read_text()
    if path.relative_to(ROOT).parts[0] == "benchmarks":  # flags shared by every benchmark: common.py, harness.py
        source += (ROOT / "benchmarks" / "common.py").read_text() + (ROOT / "benchmarks" / "harness.py").read_text()
    return [f for f in flags if f'"{f}"' not in source and f"'{f}'" not in source]


def check_command(line: str) -> None:
    """Raise AssertionError naming the line when its command does not accept it."""
    words = _words(line)
    synopsis = bool(SYNOPSIS.search(line))
    if words[0] == "make":
        targets = re.findall(r"^([a-z][a-z-]*):", (ROOT / "Makefile").read_text(), re.M)
        assert words[1] in targets, f"{line!r}: no target {words[1]!r} in the Makefile"
        return
    if words[0] == "whale" or words[1:3] == ["-m", "whale"]:
        argv = words[1:] if words[0] == "whale" else words[3:]
        if argv and argv[0] in ("--help", "-h", "--version", "completion"):
            return
        name = next((w for w in argv if w != "--debug"), None)
        assert name in cli.BY_NAME, f"{line!r}: whale has no subcommand {name!r}"
        tree = cli.build_parser(only=[name])  # `whale X ...` parses with whale's own tree; X's subparser: X's flags
        parse, parser, rest = tree.parse_args, command.subparsers(tree)[name], argv[argv.index(name) + 1:]
    elif words[1] == "-m" and words[2] in SOURCE_CHECKED:
        module, argv = words[2], words[3:]
        unknown = _source_flags(ROOT / (module.replace(".", "/") + ".py"), FLAG.findall(" ".join(argv)))
        assert not unknown, f"{line!r}: {module} has no flag {unknown}"
        return
    elif words[1].startswith("benchmarks/"):
        script = ROOT / words[1]
        assert script.is_file(), f"{line!r}: no {script}"
        own, passed = (words[2:words.index("--")], words[words.index("--") + 1:]) \
            if "--" in words and words[1] in PASSES_ON else (words[2:], None)
        unknown = _source_flags(script, FLAG.findall(" ".join(own)))
        assert not unknown, f"{line!r}: {words[1]} has no flag {unknown}"
        if passed is not None:
            name, *fixed = PASSES_ON[words[1]]
            try:
                command.subparsers(cli.build_parser(only=[name]))[name].parse_args([*fixed, *passed])
            except SystemExit as stop:
                raise AssertionError(f"{line!r}: whale {name} refuses {passed} (status {stop.code})") from None
        return
    else:
        entry, argv = (words[2], words[3:]) if words[1] == "-m" else (words[1], words[2:])
        assert entry in ENTRY_POINTS, f"{line!r}: {entry} is no entry point of a whale subcommand"
        parser = cli.command_parser(ENTRY_POINTS[entry])
        parse, rest = parser.parse_args, argv
    if not synopsis:
        try:
            parse(argv)
        except SystemExit as stop:
            raise AssertionError(f"{line!r}: its parser refuses it (status {stop.code})") from None
        return
    known = cli.flags(parser)
    sub = next((w for w in rest if w in known and w is not None), None)
    allowed = set(known[None]) | (set(known[sub]) if sub else {f for fl in known.values() for f in fl})
    unknown = sorted(set(FLAG.findall(" ".join(rest))) - allowed)
    assert not unknown, f"{line!r}: {parser.prog} {sub or ''} has no flag {unknown}"


COMMANDS = commands()


@pytest.mark.parametrize("doc,line", COMMANDS, ids=[f"{d}:{i}" for i, (d, _) in enumerate(COMMANDS)])
def test_every_command_line_parses_with_the_cli_it_names(doc, line, capsys):
    check_command(line)


def test_the_checker_catches_a_wrong_flag_a_wrong_value_and_a_missing_subcommand(capsys):
    check_command("python run_fold.py --config configs/demo.yaml --fold 0 --data d --out r")  # fine
    check_command("whale ensemble runs/a runs/b --tune --out s.csv")
    bad = ["python run_fold.py --config configs/demo.yaml --fold zero --data d --out r",  # not an int
           "whale train --config configs/demo.yaml --fold 0 --data d",  # --out missing
           "whale train --config configs/demo.yaml --flod 0",  # no such flag
           "python -m whale.boxes train --data d --labels l.csv --out r --model vgg16",  # not a choice
           "python -m whale.explain --run r --data d [--top 5] [--frobnicate]",  # synopsis, unknown flag
           "whale trian --fold 0", "make tset", "python benchmarks/seeds/synthetic.py --no-such-flag"]
    for line in bad:
        with pytest.raises(AssertionError):
            check_command(line)


def test_every_doc_names_commands_and_the_readme_walks_the_journey():
    lines = [line for _, line in COMMANDS]
    assert len(lines) >= 60, len(lines)
    readme = [line for doc, line in COMMANDS if doc == "README.md"]
    journey = [line.split()[1] for line in readme if line.startswith("whale ")]
    for step in ("folds", "train", "ensemble", "submission"):
        assert step in journey, f"README.md: the journey lacks whale {step}"
    assert readme[:2] == ["make demo", "make test"]


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_link_resolves():
    bad = []
    for doc in DOCS:
        for target in LINK.findall(doc.read_text()):
            if re.match(r"[a-z]+:", target):
                continue  # https:, mailto:
            path, _, anchor = target.partition("#")
            dest = (doc.parent / path).resolve() if path else doc
            if not dest.exists():
                bad.append(f"{doc.name}: {target} (no {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest})")
            elif anchor:
                headings = re.findall(r"^#+ (.*)$", dest.read_text(), re.M)
                if anchor not in {_slug(h) for h in headings}:
                    bad.append(f"{doc.name}: {target} (no heading with that anchor)")
    assert not bad, "broken links: " + "; ".join(bad)


def test_the_link_checker_sees_a_broken_link(tmp_path):
    assert _slug("Your own small catalogue: `configs/starter.yaml`") == "your-own-small-catalogue-configsstarteryaml"
    assert LINK.findall("see [a](docs/x.md#y) and [b](https://k.com)") == ["docs/x.md#y", "https://k.com"]


def test_the_readme_is_short_and_its_first_screen_says_what_how_and_how_well():
    text = README.read_text()
    lines = text.splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md: {len(lines)} lines, at most {README_MAX_LINES}"
    first = "\n".join(lines[:40])
    for needle in ("re-identification", "make demo", "make test", "docs/benchmarks.md"):
        assert needle in first, f"README.md: the first screen lacks {needle!r}"
    assert "## Results" in text and "| benchmark |" in text
    assert not re.search(r"previous (config|session)|earlier session", text), "README.md: history belongs in docs"


WHAT_FIRST = ["demo.md", "training.md", "configs.md", "kaggle.md", "boxes.md", "tricks.md", "ensemble.md",
              "scoring.md", "backends.md", "benchmarks.md", "recipe.md"]


@pytest.mark.parametrize("name", WHAT_FIRST)
def test_each_topic_page_starts_with_what_the_reader_does(name):
    head = "\n".join((ROOT / "docs" / name).read_text().splitlines()[:12])
    assert "What you do" in head, f"docs/{name}: expected 'What you do' in its first lines"


def test_configs_reference_is_generated_from_the_schema():
    from whale.config import doc as configdoc

    assert (ROOT / "docs" / "configs.md").read_text() == configdoc.markdown(), (
        "docs/configs.md is stale: python -m whale.config.doc > docs/configs.md")
    missing = [key for key in configdoc.keys() if key not in configdoc.MEANINGS]
    assert not missing, f"whale/config/doc.py: MEANINGS lacks {missing}"
    assert not set(configdoc.MEANINGS) - set(configdoc.keys()), "MEANINGS names keys the schema no longer has"


def test_configs_reference_says_what_the_validation_accepts():
    from whale import config
    from whale.config import doc as configdoc

    assert configdoc.accepts("mining") == "one of " + ", ".join(config.MINING_MODES)
    assert configdoc.accepts("stages[].image_size") == f"an integer in [{config.MIN_IMAGE_SIZE}, {config.MAX_IMAGE_SIZE}]"
    assert configdoc.accepts("seed") == "an integer >= 0"
    text = configdoc.markdown()
    for f in ("batching", "tta_mode", "head_mid", "k_end"):
        assert f"| `{f}` |" in text
