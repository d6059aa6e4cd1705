"""Shared CLI helpers: errors print plain text, whatever brackets the message holds."""

import pytest
import typer

from hipress_cli import options


def test_fail_shows_brackets_instead_of_swallowing_them_as_markup(capsys):
    exit_ = options.fail("real.toml: [models.vgg19] batch_size must be > 0 [bold]not markup[/]")
    assert isinstance(exit_, typer.Exit) and exit_.exit_code == 2
    err = capsys.readouterr().err
    assert "[models.vgg19]" in err and "[bold]not markup[/]" in err and "error:" in err


def test_ssh_options_are_declared_once_and_taken_by_every_multi_host_command():
    """``run``, ``profile`` and ``cluster check`` take every ``SshOpts`` field as an option, from one declaration."""
    import typer.main

    from hipress_cli.app import build

    root = typer.main.get_command(build())
    commands = {"run": root.commands["run"], "profile": root.commands["profile"],
                "cluster check": root.commands["cluster"].commands["check"]}
    for name, cmd in commands.items():
        params = {p.name for p in cmd.params}
        missing = set(options.SshOpts.names()) - params
        assert not missing, f"{name} lacks {missing}"


def test_with_ssh_options_hands_the_command_one_value():
    from typer.testing import CliRunner

    seen: list = []
    app = typer.Typer()

    @app.command()
    @options.with_ssh_options
    def cmd(before: int = 1, ssh: options.SshOpts = options.SshOpts(), after: str = "x") -> None:
        seen.append((before, ssh, after))

    r = CliRunner().invoke(app, ["--before", "3", "--ssh-user", "bob", "--ssh-port", "2222", "--accept-new-host-keys",
                                 "--after", "y"])
    assert r.exit_code == 0, r.output
    assert seen == [(3, options.SshOpts(ssh_user="bob", ssh_port=2222, accept_new_host_keys=True), "y")]
    r = CliRunner().invoke(app, ["--ssh-port", "0"])
    assert r.exit_code == 2 and "ssh-port" in r.output  # the field's own bounds apply


def test_styled_keeps_the_template_tags_and_shows_the_values_as_they_are():
    t = options.styled("[yellow]note:[/] {} in {}", "w[red]", "d[/x].txt")
    assert t.plain == "note: w[red] in d[/x].txt"
    assert [str(s.style) for s in t.spans] == ["yellow"]


def test_paths_and_names_with_brackets_are_printed_as_given(tmp_path):
    """Brackets in a path or a gradient name are text, not rich markup: ``[/x]`` used to end the
    command with a MarkupError traceback, ``[v2]`` and ``[red]`` used to vanish from the output."""
    from typer.testing import CliRunner

    from hipress_cli.app import build

    app, run = build(), CliRunner()
    d = tmp_path / "d["
    d.mkdir()
    given = d / "x].txt"  # the path holds "[/x]"
    given.write_text("w[red],100\nb[/x],200\n")
    r = run.invoke(app, ["plan", "--input", str(given), "--nnodes", "2", "--explain"], catch_exceptions=False)
    out = "".join(r.stdout.split())  # a long path wraps in the title, where a line may end
    assert r.exit_code == 0, r.stderr
    assert "w[red]" in out and "b[/x]" in out and "d[/x].txt" in out
    spec_dir = tmp_path / "exp[v2]"
    spec_dir.mkdir()
    spec = spec_dir / "u.pse"
    spec.write_text("void XEncode(float* gradient, uint8* compressed) {\n"
                    "    float s = scal * 2;\n    compressed = concat(s, gradient);\n}\n")
    r = run.invoke(app, ["compll", "check", str(spec)], catch_exceptions=False)
    assert r.exit_code != 0 and f"{spec}:2:15: undefined name 'scal'" in " ".join(r.stderr.split())


def test_no_help_text_holds_what_rich_would_take_for_markup():
    """Typer renders help with rich markup: ``[default: results/sosp21-MODE]`` vanished from --out's help
    ("Output directory ."). Brackets a help may show: ``[2001:db8::2]``, ``host[:slots]``, ``[-b]``."""
    import typer.main
    from rich.markup import RE_TAGS

    from hipress_cli.app import build

    def walk(cmd, path):
        yield path, cmd
        for name, sub in getattr(cmd, "commands", {}).items():
            yield from walk(sub, f"{path} {name}")

    texts = [(f"{path} {name}", text) for path, cmd in walk(typer.main.get_command(build()), "hipress")
             for name, text in [("(command)", cmd.help or ""),
                                *((p.name, getattr(p, "help", "") or "") for p in cmd.params)]]
    bad = [f"{where}: {m.group(0)}" for where, text in texts
           for m in RE_TAGS.finditer(text) if not m.group(2)]  # group 2: backslashes escaping the tag
    assert not bad, bad


@pytest.mark.parametrize("args", [
    ["run", "mlp", "--results"], ["run", "mlp", "--compll-dir"], ["run", "--resume"], ["run", "mlp", "--hostfile"],
    ["run", "mlp", "--known-hosts"], ["run", "mlp", "--ssh-key"], ["bench", "train", "--results"],
    ["plan", "--model", "mlp", "--output"], ["plan", "--input"], ["plan", "--model", "mlp", "--profile"],
    ["profile", "--output"], ["reproduce", "sosp21", "--out"], ["reproduce", "sosp21", "--experiments"],
    ["compll", "gen", "x.pse", "-o"],
])
def test_an_empty_path_is_refused_not_read_as_this_directory(args, tmp_path, monkeypatch):
    """``--results "$RESULTS"`` with the variable unset: Typer read '' as '.', so the run went into the
    directory the command was typed in (and an input option read that directory). Said as every empty option
    is (``options.empty_text``): "--results is empty (an unset variable?): ..."; it was "Invalid value for
    '--results': is empty (...)", a second wording of the same fact."""
    from typer.testing import CliRunner

    from hipress_cli.app import build

    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(build(), [*args, ""], env={"COLUMNS": "200"})
    said = " ".join(r.output.replace("│", " ").split())
    option = "--out" if args[-1] == "-o" else args[-1]  # the long name, as the help lists it
    assert r.exit_code == 2, said
    assert f"{option} is empty (an unset variable?): give a path; . is this directory" in said, said
    assert not any(tmp_path.iterdir()), "nothing written here"


@pytest.mark.parametrize("args,bounds", [
    (["bench", "sync", "--timeout"], "of at least 1"),
    (["cluster", "check", "--hosts", "127.0.0.1", "--seconds"], "from 0.05 to 60"),
    (["cluster", "check", "--hosts", "127.0.0.1", "--connect-timeout"], "of at least 0.1"),
    (["run", "mlp", "--hosts", "127.0.0.1:2", "--connect-timeout"], "of at least 0.1"),
])
@pytest.mark.parametrize("value", ["nan", "inf", "-1", "1e9", "soon"])
def test_an_option_in_seconds_is_a_finite_number_in_its_range(args, bounds, value):
    """``nan`` was refused by Typer's range check with "Input should be less than or equal to 60" (or greater
    than or equal to 1), said of a value that is no number at all."""
    from typer.testing import CliRunner

    from hipress_cli.app import build

    if value == "1e9" and "to 60" not in bounds:
        value = "0.01"  # the options without a most: a value under their least
    r = CliRunner().invoke(build(), [*args, value], env={"COLUMNS": "200"})
    said = " ".join(r.output.replace("│", " ").split())
    assert r.exit_code == 2, said
    assert f"Invalid value for '{args[-1]}': give a number of seconds {bounds}, got '{value}'" in said, said


@pytest.mark.parametrize("args,said", [
    (["plan", "--input", "{in}", "--profile", "{dir}"], "{dir}: cannot read: Is a directory"),
    (["run", "mlp", "--hostfile", "{dir}"], "cannot read hostfile {dir}: Is a directory"),
    (["run", "--resume", "{run}"], "--resume {run}: cannot read its config.json: Is a directory"),
])
def test_an_unreadable_file_is_named_once_with_the_reason(args, said, tmp_path):
    """QA: '{dir}: cannot read: [Errno 21] Is a directory: '{dir}'': the path again, inside Python's text."""
    from typer.testing import CliRunner

    from hipress_cli.app import build

    (tmp_path / "in.txt").write_text("a,1\n")
    (tmp_path / "run" / "config.json").mkdir(parents=True)
    where = {"in": tmp_path / "in.txt", "dir": tmp_path, "run": tmp_path / "run"}
    r = CliRunner().invoke(build(), [a.format(**where) for a in args], env={"COLUMNS": "400"})
    text = " ".join(r.output.split())
    assert r.exit_code != 0 and said.format(**where) in text and "Errno" not in text, text



@pytest.mark.parametrize("make,said", [
    (lambda p: None, "--resume {p} does not exist; give the directory of a `hipress run` (results/<run-id>/)"),
    (lambda p: p.write_text("{}"), "--resume {p} is a file, not a run directory; give the directory of a `hipress"),
    (lambda p: (p.mkdir(), (p / "config.json").write_text("{bad")),
     "--resume {p}: its config.json is not valid JSON (line 1, column 2: Expecting property name enclosed in double "
     "quotes): not a `hipress run`'s (which writes it whole), or changed since; give the directory of a `hipress run`"),
])
def test_resume_of_no_run_directory_says_what_the_path_is(make, said, tmp_path):
    """`--resume FILE` said "cannot read its config.json: Not a directory", `--resume MISSING` "no config.json
    there" and a damaged config.json only Python's "Expecting value: line 1 column 2 (char 1)"."""
    from typer.testing import CliRunner

    from hipress_cli.app import build

    path = tmp_path / "run"
    make(path)
    r = CliRunner().invoke(build(), ["run", "--resume", str(path)], env={"COLUMNS": "400"})
    text = " ".join(r.output.split())
    assert r.exit_code == 2 and said.format(p=path) in text and "Traceback" not in text, text


@pytest.mark.parametrize("change,said", [
    ({"np": "2"}, "config.json's 'np' is '2' (str), expected int"),
    ({"np": -5}, "config.json's np must be at least 1, got -5"),
    ({"iters": 2.5}, "config.json's 'iters' is 2.5 (float), expected int"),
    ({"momentum": 2}, "config.json's momentum must be in [0, 1), got 2"),
    ({"model_options": []}, "config.json's 'model_options' is [] (list), expected dict[str, int]"),
    ({"np": None, "iters": None}, "config.json lacks 'np', 'iters': not a `hipress run`'s config.json"),
])
def test_resume_of_a_config_json_with_a_field_of_another_type_names_it(change, said, tmp_path):
    """A hand-edited config.json ("np": "2" or -5) failed with a Python traceback in the checkpoint check,
    and one without a field with 'RunConfig.__init__() missing 2 required positional arguments'."""
    import json

    from typer.testing import CliRunner

    from hipress.train.config import RunConfig
    from hipress_cli.app import build

    d = json.loads(RunConfig(run_id="r", model="mlp", model_options={"batch_size": 32}, topology="ring",
                             engine_topology="casync-ring", alg="tbq", np=2, iters=1).to_json())
    d.update(change)
    d = {k: v for k, v in d.items() if v is not None or k not in ("np", "iters")}
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.json").write_text(json.dumps(d))
    r = CliRunner().invoke(build(), ["run", "--resume", str(tmp_path / "run")], env={"COLUMNS": "400"})
    text = " ".join(r.output.split())
    assert r.exit_code == 2 and isinstance(r.exception, SystemExit), (text, r.exception)
    assert said in text, text


def test_resume_of_a_directory_whose_config_json_has_no_end_is_refused_unread(tmp_path):
    """`--resume DIR` read DIR/config.json whole: a link to /dev/zero there never returned."""
    from typer.testing import CliRunner

    from hipress.train.config import MAX_CONFIG_BYTES
    from hipress_cli.app import build

    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.json").symlink_to("/dev/zero")
    r = CliRunner().invoke(build(), ["run", "--resume", str(tmp_path / "run")], env={"COLUMNS": "400"})
    text = " ".join(r.output.split())
    assert r.exit_code == 2 and f"cannot read its config.json: larger than {MAX_CONFIG_BYTES} bytes" in text, text
def test_ssh_key_that_exists_but_is_not_a_file_says_what_it_is(capsys, tmp_path):
    """--ssh-key DIR said 'no such file', of a path that exists. Refused before any connection."""
    from pathlib import Path

    for key, said in ((tmp_path, "is a directory; give the private key file"),
                      (Path("/dev/null"), "is not a regular file; give the private key file"),
                      (tmp_path / "nokey", ": no such file")):
        with pytest.raises(typer.Exit):
            options.SshOpts(ssh_key=key).ssh_options()
        assert f"--ssh-key {key}{'' if said[0] == ':' else ' '}{said}" in " ".join(capsys.readouterr().err.split())


def test_every_option_and_argument_of_every_command_says_what_it_is():
    """`run --help` listed "--seed <int> [default: 0]" with no word of what the seed seeds."""
    import typer

    from hipress_cli.app import build

    silent = []

    def walk(command, path: list[str]) -> None:
        if hasattr(command, "commands"):  # a group
            for name, sub in command.commands.items():
                walk(sub, [*path, name])
            return
        silent.extend(f"{' '.join(path)} {p.opts[0] if p.opts else p.name}" for p in command.params
                      if not getattr(p, "hidden", False) and not (getattr(p, "help", None) or "").strip())

    walk(typer.main.get_command(build()), ["hipress"])
    assert not silent, f"options without help: {silent}"


def test_text_with_an_emoji_code_in_it_is_printed_as_it_is(capsys):
    """`plan --input /etc/passwd` quoted its first line as 'root\u274c0:0:root:...': rich read the ':x:' of
    'root:x:0:0' as an emoji code. Errors, styled lines and plain prints keep the text."""
    from hipress_cli.options import console, fail, styled

    fail("/etc/passwd:1: got 'root:x:0:0:root' and :smile:")
    console.print("a gradient :thumbs_up: named")
    console.print(styled("[dim]{}[/] :x:", "p:x:q"))
    out, err = capsys.readouterr()
    assert "'root:x:0:0:root' and :smile:" in err, err
    assert "a gradient :thumbs_up: named" in out and "p:x:q :x:" in out, out


#: How a help row writes an option's value, by Typer version. pyproject.toml accepts typer>=0.15.4, whose help
#: writes click's metavars (``--np INTEGER``, ``--device TEXT``, choices as ``[a|b]``); Typer 0.29 writes
#: ``--np <int>``, ``--device <str>``. The CLI reads the same with both (``hipress_cli.compat``), so the help
#: tests check what the help says, not which placeholder Typer draws: each runs with the installed Typer's
#: placeholders and with click's, made here from them (no older Typer needs installing to see that).
CLICK_METAVARS = {"int": "INTEGER", "str": "TEXT", "float": "FLOAT", "bool": "BOOLEAN"}


@pytest.fixture(params=["typer", "click"])
def placeholders(request, monkeypatch) -> str:
    """The installed Typer's value placeholders, or click's (older Typer's) in their place."""
    if request.param == "click":
        from typer.core import TyperOption

        typers = TyperOption.display_type

        def click_metavar(self, ctx):
            label = typers(self, ctx).strip("<>")
            return f"[{label}]" if "|" in label else CLICK_METAVARS.get(label, label.upper())

        monkeypatch.setattr(TyperOption, "display_type", click_metavar)
    return request.param


def _option_row(rows: list[str], long: str) -> list[str]:
    """The words of the help row of option ``long`` (``--np``), panel borders dropped."""
    for row in rows:
        words = row.replace("│", " ").split()
        if words and long in words[0].split(","):
            return words
    raise AssertionError(f"no help row for {long}:\n" + "\n".join(rows))


def _placeholder(words: list[str], help_text: str) -> list[str]:
    """What a row shows between the option's names (``--np,--numprocess``, ``-n``, ``--no-x``) and its help:
    nothing for a flag, the value's placeholder (``<int>`` or ``INTEGER``, by Typer version) otherwise."""
    rest = words[next((i for i, w in enumerate(words) if not w.startswith("-")), len(words)):]
    first = help_text.split()[0]
    assert first in rest, f"help {help_text[:40]!r}... not in the row {' '.join(words)}"
    return rest[:rest.index(first)]


@pytest.mark.parametrize("command", [["run"], ["profile"], ["bench", "sync"], ["bench", "train"]])
def test_device_help_fits_every_command_that_takes_it(command, placeholders):
    """`profile --help` and `bench sync --help` said --device is "Where the ranks train": they train nothing."""
    words = _option_row(_help_rows(command), "--device")
    text = " ".join(words)
    assert "Where the ranks run: auto (CUDA when torch sees a GPU" in text, text
    assert len(_placeholder(words, "Where the ranks run")) == 1, text  # it takes a value


def _every_command() -> list[tuple[list[str], object]]:
    """Every group and command of the CLI: (its words after ``hipress``, its click command)."""
    import typer.main

    from hipress_cli.app import build

    found: list[tuple[list[str], object]] = []

    def walk(command, path: list[str]) -> None:
        found.append((path, command))
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, [*path, name])

    walk(typer.main.get_command(build()), [])
    return found


def _help_rows(path: list[str]) -> list[str]:
    """``hipress PATH --help``, one string per line, wide enough that no option's row wraps."""
    from typer.testing import CliRunner

    from hipress_cli.app import build

    r = CliRunner().invoke(build(), [*path, "--help"], env={"COLUMNS": "400"})
    assert r.exit_code == 0, r.output
    return r.output.splitlines()


def test_no_flag_shows_a_value_placeholder_in_any_help(placeholders):
    """`--json <bool>`: Typer's help gave every flag (and -h itself) a value placeholder, as if it took one;
    an option that takes a value keeps its own (`--np <int>`, or `--np INTEGER` from an older Typer)."""
    from typer.core import TyperOption

    shown = []
    for path, command in _every_command():
        rows = _help_rows(path)
        ctx = command.make_context(" ".join(["hipress", *path]), [], resilient_parsing=True)
        for param in command.get_params(ctx):
            if not isinstance(param, TyperOption) or getattr(param, "hidden", False):
                continue
            long = next(o for o in param.opts if o.startswith("--"))
            between = _placeholder(_option_row(rows, long), param.help or "")
            if bool(param.is_flag or param.count) == bool(between):
                shown.append(f"hipress {' '.join(path)} {long}: {' '.join(between) or '(nothing)'}")
    assert not shown, shown


def test_every_help_reads_as_plain_text():
    """`compll gen --help` printed its docstring's ``literal`` marks and broke lines where the source did, its
    usage line read `{specs}...`, and --prefix's help named `{prefix}-h0`: templates and markup, not text."""
    import re

    leaks = []
    for path, _ in _every_command():
        rows = _help_rows(path)
        text = "\n".join(rows)
        leaks += [f"hipress {' '.join(path)}: {m.group(0)}" for m in re.finditer(r"``[^`]*``|\{[^{}\s]*\}", text)]
    assert not leaks, leaks
    gen = " ".join(" ".join(_help_rows(["compll", "gen"])).split())
    assert "Usage: hipress compll gen [OPTIONS] SPECS..." in gen or "compll gen [OPTIONS] SPECS..." in gen, gen
    rows = _help_rows(["compll", "gen"])  # 400 columns: a paragraph is one line, as the terminal wraps it
    assert any("an encoder alone; a wrapper (-w/-r) needs both: one spec holding both functions" in r for r in rows)
    run = " ".join(" ".join(_help_rows(["run"])).split())
    assert "run [OPTIONS] [MODEL]" in run, run
