"""Seeded fuzzing of the two parsers a user feeds by hand: plan files (``input.txt``,
``SeCoPaPlan.txt``) and algorithm specs (``--alg``). Every input either works or is refused with the
project's own error (``PlanError``; ``UnknownAlgorithm`` / ``AlgorithmSpecError``): never another
exception. The corpora are generated from fixed seeds, so a failure replays."""

import random

import pytest

from hipress.compress import UnknownAlgorithm, available, create, create_from_spec
from hipress.compress.registry import AlgorithmSpecError, parameters
from hipress.plan import MAX_ELEMENTS, PlanError, load_plan, parse_input, parse_plan, plan_gradients, sosp21

CASES = 600  # per parser (>= 300 asked)

SIZES = ["1", "64", "4096", "0", "-4", "+5", "007", " 12 ", "1.5", "1e6", "0x10", "", "abc", "9" * 5000,
         str(2**63 - 1), str(2**63), str(2**64 + 1), str(MAX_ELEMENTS), str(MAX_ELEMENTS + 1), "١٢", "１２",
         "12\x00", "nan", "inf", "99999999999999999999"]
NAMES = ["fc.weight", "vgg0_conv0_bias", "a", "", " ", "a b", "x,y", "\ufeffa", "名前", "a\tb", "\x00", "n" * 300]
FLAGS = ["y", "n", "Y", "yes", "", "1", "maybe"]
KS = ["1", "4", "8", "16", "17", "4096", "4097", "16777216", "16777217", "0", "-1", "", "x", "9" * 400]


def pick(rng: random.Random, values: list[str], good: int) -> str:
    """Mostly one of the first ``good`` (valid) values, so that whole files get through too."""
    return rng.choice(values[:good] if rng.random() < 0.9 else values)


def plan_texts(rng: random.Random, plan: bool) -> str:
    lines = []
    for i in range(rng.randint(0, 6)):
        name = f"g{i}" if rng.random() < 0.8 else rng.choice(NAMES)
        fields = [name, pick(rng, SIZES, 3)]
        if plan:
            fields += [pick(rng, FLAGS, 2), pick(rng, KS, 4)]
        if rng.random() < 0.03:
            fields.append(rng.choice(SIZES))
        if rng.random() < 0.03:
            fields.pop()
        lines.append(",".join(fields))
    text = rng.choice(["\n", "\r\n"]).join(lines)
    if rng.random() < 0.2:
        text = "\ufeff" + text
    if rng.random() < 0.1:
        text += "\n\n"
    return text


@pytest.mark.parametrize("plan", [False, True], ids=["input.txt", "SeCoPaPlan.txt"])
def test_fuzz_plan_files(tmp_path, plan):
    rng = random.Random(1 if plan else 0)
    accepted = refused = 0
    for i in range(CASES):
        text = plan_texts(rng, plan)
        path = tmp_path / f"f{i}.txt"
        data = text.encode("utf-8", "surrogatepass")
        if rng.random() < 0.05:
            data += b"\xff\xfe"
        path.write_bytes(data)
        try:
            if plan:
                world = rng.choice([1, 4, 16, 64])
                parsed = parse_plan(text)
                load_plan(path, [n for n in parsed], world_size=world)
            else:
                grads = parse_input(text)
                plan_gradients(grads, rng.choice([1, 4, 8, 16, 4096]), rng.choice(["ps", "RING"]), sosp21())
            accepted += 1
        except PlanError:
            refused += 1
    print(f"{'plan' if plan else 'input'} files: {accepted + refused} fuzzed, {accepted} accepted, {refused} refused")
    assert accepted + refused == CASES and accepted > 0 and refused > 0


VALUES = ["0.01", "1", "0", "2", "4", "8", "true", "false", "True", "maybe", "yes", "abc", "[1]", "", "1e999",
          "nan", "-inf", "0.5", "1e-3", ".5", "5.", "-1", "9" * 30, "1_000", "0x10", "١", "1.0.0", "=", "1,2",
          "'0.1'", "None", "{}", "1" * 5000]


def spec_texts(rng: random.Random) -> str:
    name = rng.choice([*available(), "nope", "", " tbq ", "TBQ", "dgc:", "x" * 200])
    keys = sorted({k for a in available() for k in parameters(a)}) + ["bogus", "", " ratio", "class", "__init__"]
    items = []
    for _ in range(rng.randint(0, 4)):
        key = rng.choice(keys)
        sep = rng.choice(["=", "=", "=", "", "=="])
        items.append(f"{key}{sep}{rng.choice(VALUES)}")
    if rng.random() < 0.2 and items:
        items.append(items[0])  # a repeated key
    text = name + (":" + rng.choice([",", ", "]).join(items) if items or rng.random() < 0.3 else "")
    return text


def test_fuzz_algorithm_specs():
    rng = random.Random(7)
    accepted = refused = 0
    for _ in range(CASES):
        spec = spec_texts(rng)
        try:
            create_from_spec(spec)
            accepted += 1
        except (UnknownAlgorithm, AlgorithmSpecError):
            refused += 1
    print(f"algorithm specs: {accepted + refused} fuzzed, {accepted} accepted, {refused} refused")
    assert accepted + refused == CASES and accepted > 0 and refused > 0


def test_fuzz_create_with_python_values():
    rng = random.Random(11)
    values = [0.01, 1, 0, True, False, None, "0.1", [1], {}, float("nan"), float("inf"), 10**30, -1, 2.5, b"x"]
    n = 0
    for _ in range(CASES):
        name = rng.choice(available())
        keys = list(parameters(name)) + ["bogus"]
        params = {rng.choice(keys): rng.choice(values) for _ in range(rng.randint(0, 3))}
        try:
            create(name, **params)
        except AlgorithmSpecError:
            pass
        n += 1
    assert n == CASES


@pytest.mark.parametrize(("spec", "words"), [
    ("dgc:ratio=abc", ["'ratio'", "'abc'", "float"]),
    ("tbq:tau=abc", ["'tau'", "'abc'", "float"]),
    ("dgc:momentum=[1]", ["'momentum'", "'[1]'", "float"]),
    ("terngrad:stochastic=maybe", ["'stochastic'", "'maybe'", "bool", "true, false, 1 or 0"]),
    ("terngrad:bits=true", ["'bits'", "'true'", "int"]),
    ("signsgd:scaled=yes", ["'scaled'", "'yes'", "bool"]),
    ("dgc:ratio=0.1,ratio=0.2", ["'ratio'", "given twice"]),
    ("tbq:tau=inf", ["'tau'", "finite"]),
    ("dgc:nope=1", ["no parameter 'nope'", "ratio (float, default 0.001)"]),
    ("qsgd:bits=" + "9" * 5000, ["'bits'", "5000 digits"]),
    ("tbq:", ["nothing after ':'", "write 'tbq' alone", "tau (float, default 0.0)"]),  # an empty $VAR
    ("none: ", ["nothing after ':'", "it takes no parameters"]),
])
def test_bad_specs_are_named(spec, words):
    with pytest.raises(AlgorithmSpecError) as e:
        create_from_spec(spec)
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_good_specs_are_typed():
    c = create_from_spec("terngrad:bits=4,stochastic=0")
    assert c.bits == 4 and c.stochastic is False
    assert create_from_spec("terngrad:stochastic=TRUE").stochastic is True
    assert create_from_spec("tbq:tau=1").tau == 1.0
    assert create_from_spec("dgc:ratio=.5, momentum=0").params()["ratio"] == 0.5
    with pytest.raises(AlgorithmSpecError, match="expected a whole number"):
        create("qsgd", bits=4.0)
    with pytest.raises(AlgorithmSpecError, match="expected true, false, 1 or 0"):
        create("terngrad", stochastic="false")
