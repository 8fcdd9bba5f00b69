"""The cost-model subcommands: --json keys and values, and one-line errors with status 2."""

import json
import subprocess
import sys

import pytest

from minipar.cli import main


def run(capsys, *argv):
    """(status, stdout, stderr) of ``minipar argv`` run in this process."""
    try:
        status = main(list(argv))
    except SystemExit as e:  # argparse errors
        status = e.code
    out, err = capsys.readouterr()
    return status, out, err


def run_json(capsys, *argv):
    status, out, err = run(capsys, *argv, "--json")
    assert status == 0, err
    assert len(out.strip().splitlines()) == 1
    return json.loads(out)


GPT3 = ("--layers", "96", "--hidden", "12288", "--seq", "2048", "--vocab", "51200")


def test_params(capsys):
    assert run_json(capsys, "params", *GPT3, "--heads", "96")["params"] == 174_615_822_336


def test_flops_and_mfu(capsys):
    out = run_json(
        capsys,
        "flops",
        *GPT3,
        "--batch",
        "64",
        "--recompute",
        "selective",
        "--seconds",
        "13.75",
        "--gpus",
        "64",
    )
    assert out["flops_per_iteration"] > out["model_flops_per_iteration"]
    assert round(100 * out["mfu"], 1) == 51.4 and round(100 * out["hfu"], 1) == 52.8


def test_memory(capsys):
    out = run_json(capsys, "memory", "--params", "7.5e9", "--dp", "64", "--zero", "1")
    assert round(out["bytes_per_device"] / 1e9, 1) == 31.4
    assert out["bytes_per_device"] == out["weights"] + out["gradients"] + out["optimizer"]
    out = run_json(
        capsys,
        "memory",
        "--params",
        "1e9",
        "--dp",
        "2",
        "--zero",
        "0",
        "--weight-bytes",
        "4",
        "--grad-bytes",
        "4",
        "--optimizer-bytes",
        "8",
    )
    assert out["bytes_per_device"] == 16e9
    out = run_json(
        capsys,
        "memory",
        *GPT3,
        "--heads",
        "96",
        "--dp",
        "8",
        "--tp",
        "8",
        "--pp",
        "8",
        "--zero",
        "3",
    )
    assert out["bytes_per_device"] == pytest.approx(16 * 174_615_822_336 / 512)


def test_activations(capsys):
    out = run_json(
        capsys,
        "activations",
        "--seq",
        "2048",
        "--micro-batch",
        "1",
        "--hidden",
        "12288",
        "--heads",
        "96",
        "--tp",
        "8",
        "--sp",
        "--recompute",
        "selective",
    )
    assert out["bytes_per_layer"] == 2048 * 12288 * 34 / 8


def test_bubble(capsys):
    out = run_json(capsys, "bubble", "--schedule", "gpipe", "--pp", "4", "--microbatches", "4")
    assert out == pytest.approx({"fraction_of_total": 3 / 7, "relative_to_ideal": 3 / 4})


def test_collective(capsys):
    out = run_json(
        capsys,
        "collective",
        "--op",
        "all-reduce",
        "--algorithm",
        "ring",
        "--ranks",
        "4",
        "--bytes",
        "1GB",
        "--alpha",
        "0",
        "--bandwidth",
        "1e9",
    )
    assert out["seconds"] == pytest.approx(1.5) and out["busbw_factor"] == 1.5
    out = run_json(
        capsys,
        "collective",
        "--op",
        "all-gather",
        "--algorithm",
        "ring",
        "--ranks",
        "8",
        "--bytes",
        "1GiB",
        "--link",
        "ib-ndr400",
    )
    assert out["bandwidth"] == 50e9


def test_human_table(capsys):
    status, out, _ = run(capsys, "bubble", "--schedule", "1f1b", "--pp", "4", "--microbatches", "8")
    assert status == 0 and "fraction_of_total" in out and "relative_to_ideal" in out


BAD = [
    # (argv, words the one error line must contain)
    (
        ("params", "--layers", "x", "--hidden", "8", "--seq", "8", "--vocab", "8"),
        ["--layers", "'x'"],
    ),
    (
        ("params", "--layers", "0", "--hidden", "8", "--seq", "8", "--vocab", "8"),
        ["--layers", "'0'"],
    ),
    (("memory", "--params", "-5", "--dp", "4", "--zero", "1"), ["--params", "'-5'"]),
    (("memory", "--params", "1e9", "--dp", "4", "--zero", "4"), ["--zero", "4"]),
    (
        (
            "memory",
            "--layers",
            "24",
            "--hidden",
            "768",
            "--heads",
            "12",
            "--seq",
            "1024",
            "--vocab",
            "50257",
            "--dp",
            "1",
            "--tp",
            "5",
            "--zero",
            "0",
        ),
        ["heads (12) must be divisible by t (5)"],
    ),
    (
        (
            "memory",
            "--layers",
            "10",
            "--hidden",
            "768",
            "--heads",
            "12",
            "--seq",
            "1024",
            "--vocab",
            "50257",
            "--dp",
            "1",
            "--pp",
            "4",
            "--zero",
            "0",
        ),
        ["layers (10) must be divisible by p (4)"],
    ),
    (("memory", "--layers", "10", "--dp", "1", "--zero", "0"), ["missing", "--hidden"]),
    (
        (
            "activations",
            "--seq",
            "1024",
            "--micro-batch",
            "1",
            "--hidden",
            "768",
            "--heads",
            "12",
            "--tp",
            "5",
        ),
        ["heads (12) must be divisible by t (5)"],
    ),
    (
        (
            "bubble",
            "--schedule",
            "interleaved",
            "--pp",
            "4",
            "--microbatches",
            "6",
            "--chunks",
            "2",
        ),
        ["m (6)", "multiple of p (4)"],
    ),
    (("bubble", "--schedule", "gpipe", "--pp", "4", "--microbatches", "0"), ["--microbatches"]),
    (
        (
            "collective",
            "--op",
            "broadcast",
            "--algorithm",
            "ring",
            "--ranks",
            "4",
            "--bytes",
            "1e6",
            "--alpha",
            "1e-6",
            "--bandwidth",
            "1e9",
        ),
        ["'ring'", "broadcast"],
    ),
    (
        (
            "collective",
            "--op",
            "all-gather",
            "--algorithm",
            "recursive-doubling",
            "--ranks",
            "6",
            "--bytes",
            "1e6",
            "--alpha",
            "1e-6",
            "--bandwidth",
            "1e9",
        ),
        ["power of two", "n (6)"],
    ),
    (
        (
            "collective",
            "--op",
            "all-reduce",
            "--algorithm",
            "ring",
            "--ranks",
            "4",
            "--bytes",
            "0",
            "--alpha",
            "1e-6",
            "--bandwidth",
            "1e9",
        ),
        ["--bytes", "'0'"],
    ),
    (
        (
            "collective",
            "--op",
            "all-reduce",
            "--algorithm",
            "ring",
            "--ranks",
            "4",
            "--bytes",
            "1e6",
        ),
        ["--alpha", "--link"],
    ),
]


@pytest.mark.parametrize("argv, words", BAD)
def test_bad_input_is_one_line_status_2(capsys, argv, words):
    status, out, err = run(capsys, *argv)
    assert status == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert err.startswith(f"minipar {argv[0]}: error: ")
    for w in words:
        assert w in err, err


@pytest.mark.parametrize("argv, words", [BAD[0], BAD[4], BAD[8]])
def test_bad_input_as_a_script(argv, words):
    """Same under ``python -m minipar.cli`` (where minipar.cli is imported a second time)."""
    p = subprocess.run(
        [sys.executable, "-m", "minipar.cli", *argv], capture_output=True, text=True, timeout=60
    )
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and words[0] in p.stderr


def test_cost_cli_needs_nothing_from_minipar_cli():
    """No import cycle: the cost commands raise the one bad-input type,
    minipar.errors.InputError (a ValueError in a leaf module), so minipar.cost.cli never
    imports minipar.cli (which imports it)."""
    code = (
        "import sys; from minipar.cost import cli; from minipar import errors; "
        "assert cli.InputError is errors.InputError; "
        "assert issubclass(cli.InputError, ValueError); "
        "assert 'minipar.cli' not in sys.modules, 'imported minipar.cli'"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr


def test_layout_rules_have_one_wording(capsys):
    """The CLI states the layout rules with minipar.cost.planner.breakdown.check_layout's words."""
    status, _, err = run(
        capsys,
        "params",
        "--layers",
        "2",
        "--hidden",
        "100",
        "--heads",
        "3",
        "--seq",
        "8",
        "--vocab",
        "10",
    )
    assert status == 2
    assert err.strip() == "minipar params: error: hidden size (100) must be divisible by heads (3)"


def test_plan_prices_zero3_collectives_as_asked(capsys):
    """--zero3-collectives: the 2021 flat ring is slower than the hierarchical multi-NIC
    algorithm (the default) for a ZeRO-3 layout spanning nodes; anything else exits 2 naming
    the choices."""
    argv = [
        "plan",
        "--model",
        "gpt3-175b",
        "--gpus",
        "768",
        "--gpu",
        "A100-80GB",
        "--global-batch",
        "1536",
        "--zero",
        "3",
        "--tp",
        "1",
        "--pp",
        "1",
        "--top",
        "1",
    ]

    def step(*extra):
        assert main(argv + list(extra)) == 0
        return capsys.readouterr().out.strip().splitlines()[-1].split()[-3:-1]

    hier, flat = step(), step("--zero3-collectives", "flat-ring")
    assert hier == step("--zero3-collectives", "hierarchical") and flat != hier, (flat, hier)
    with pytest.raises(SystemExit) as e:
        main(argv + ["--zero3-collectives", "tree"])
    assert (
        e.value.code == 2 and "choose from 'hierarchical', 'flat-ring'" in capsys.readouterr().err
    )


# --- refusals that name the rule actually broken, before the search ------------------------

GPT3_PLAN = ("plan", "--model", "gpt3-175b", "--gpus", "1024")


@pytest.mark.parametrize(
    "extra, words",
    [
        (
            ("--global-batch", "1537"),
            "global batch (1537) must be divisible by d = N/(t·cp·p) of some layout: d is one of "
            "4, 8, … 1024 here, and none divides 1537",
        ),
        (
            ("--global-batch", "1536", "--micro-batch", "1000"),
            "global batch (1536) must be divisible by micro-batch × d: micro-batch (1000) × d",
        ),
        (
            ("--global-batch", "1536", "--gpus", "1048576"),
            "d is one of 4096, 8192, … 1048576 here, and none divides 1536",
        ),
        (
            ("--global-batch", "1536", "--gpus-per-node", "2048"),
            "gpus per node (2048) must be at most the GPUs (1024)",
        ),
        (
            ("--global-batch", "1536", "--layers", "60000"),
            "model states alone need 16 B × 1.087e+05 B params / 1024 GPUs",
        ),
        (("--global-batch", "1536", "--layers", "1000000000"), "argument --layers: must be"),
        (
            ("--global-batch", "1536", "--headroom", "0.999999"),
            "(80 GiB of one A100-80GB less 99.9999 % headroom)",
        ),
        (("--global-batch", "1536", "--intra-alpha", "1e300"), "intra_alpha (1e+300) must be"),
        (
            ("--global-batch", "1536", "--inter-bandwidth", "1e-30"),
            "inter_bandwidth (1e-30) must be between 1e+06 and 1e+14 B/s",
        ),
        (
            ("--global-batch", "1536", "--gemm-efficiency", "1e-300"),
            "gemm_efficiency (1e-300) must be between 0.01 and 1",
        ),
    ],
)
def test_plan_refuses_with_the_rule_broken(capsys, extra, words):
    """Each input of a newcomer's sweep is refused with the rule it breaks and its values (the
    planner used to answer most with "t·cp·p (24) must divide the GPUs", print 40-digit step
    times for the constants, and name 80 GiB where the limit after headroom was 0)."""
    status, out, err = run(capsys, *GPT3_PLAN, *extra)
    assert status == 2 and out == "" and words in err, err
    assert "t·cp·p (24) must divide" not in err and len(err.splitlines()) == 1


@pytest.mark.slow  # over a CPU-second (CONTRIBUTING.md, Tests)
def test_plan_answers_a_valid_batch(capsys):
    """Control: the same command with a batch the layouts divide plans."""
    status, out, _ = run(capsys, *GPT3_PLAN, "--global-batch", "1536", "--top", "1")
    assert status == 0 and "step" in out


@pytest.mark.parametrize(
    "argv",
    [
        ("memory", "--params", "1e9", "--dp", "1", "--zero", "0", "--weight-bytes", "1e308"),
        ("collective", "--op", "all-reduce", "--algorithm", "ring", "--ranks", "4")
        + ("--bytes", "1GB", "--alpha", "0", "--bandwidth", "1e-320"),
        ("flops", *GPT3, "--batch", "1", "--seconds", "1e-300"),
    ],
)
def test_json_outputs_refuse_non_finite_numbers(capsys, argv):
    """--json prints valid JSON or one refusal: never Infinity, NaN, or an MFU of 10²⁹³."""
    status, out, err = run(capsys, *argv, "--json")
    assert status == 2 and out == "" and err.count("\n") == 1, (out, err)


@pytest.mark.slow  # over a CPU-second (CONTRIBUTING.md, Tests)
def test_a_cpu_profile_is_refused_and_a_gpu_profile_plans(capsys, tmp_path):
    """`minipar calibrate gpu --device cpu` writes a plumbing check, not a GPU: `minipar plan
    --gpu-profile` refuses it naming the file, the field and its generation's range (it printed
    "η = 1 of 0 TFLOP/s" and a 33,939,267 s step), as it refuses 10³⁰ FLOP/s. Control: a profile
    with an H200's numbers plans, priced with the profile's GPU (its name in the header); one
    that is not JSON is refused naming the file."""
    from minipar.cost.kernels.hardware import GPUS, gpu_profile

    prof = tmp_path / "gpu.json"
    status, _, err = run(
        capsys, "calibrate", "gpu", "--device", "cpu", "--quick", "--out", str(prof)
    )
    assert status == 0, err
    shape = ("--layers", "4", "--hidden", "256", "--heads", "4", "--seq", "256", "--vocab", "1000")
    argv = ("plan", *shape, "--gpus", "1", "--global-batch", "4", "--gpu-profile")
    status, out, err = run(capsys, *argv, str(prof))
    assert (status, out) == (2, "") and err.count("\n") == 1, err
    assert f"gpu profile {prof}: peak_flops['bf16'] (" in err, err
    assert "TFLOP/s for a GPU of the nvlink4-h100 generation" in err
    assert "`minipar calibrate gpu --device cpu` checks the plumbing" in err
    good = gpu_profile(GPUS["H200"]) | {"name": "my H200"}
    for field, value in (("peak_flops", {"bf16": 1e30}), ("hbm_bandwidth", 1e20)):
        bad = tmp_path / f"{field}.json"
        bad.write_text(json.dumps(good | {field: value}))
        status, out, err = run(capsys, *argv, str(bad))
        assert status == 2 and f"gpu profile {bad}: {field}" in err and "must be between" in err
    ok = tmp_path / "h200.json"
    ok.write_text(json.dumps(good))
    status, out, err = run(capsys, *argv, str(ok), "--json")
    assert status == 0, err
    plan = json.loads(out)
    assert plan["gpu"] == "my H200" and plan["configs"]
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    status, out, err = run(capsys, *argv, str(bad))
    assert status == 2 and "gpu profile" in err and "not JSON" in err


BIG = str(10**12)


@pytest.mark.parametrize(
    "argv, words",
    [
        (
            ("plan", "--model", "mixtral-8x7b", "--gpus", "64", "--global-batch", "512")
            + ("--moe-imbalance", "1e300"),
            "argument --moe-imbalance: must be between 0 and 1,024",
        ),
        (
            ("plan", "--model", "mixtral-8x7b", "--gpus", "64", "--global-batch", "512")
            + ("--moe-imbalance", "9"),
            "--moe-imbalance (9) must be at most the experts (8)",
        ),
        (
            ("plan", "--model", "gpt3-175b", "--global-batch", "1536", "--gpus", str(2**40)),
            "argument --gpus: must be between 1 and 1,048,576",
        ),
        (
            ("plan", "--model", "gpt3-175b", "--gpus", "1024", "--global-batch", "1" * 23),
            "argument --global-batch: must be between 1 and 16,777,216",
        ),
        (("params", *GPT3[2:], "--layers", BIG), "argument --layers: must be between 1 and 65,536"),
        (
            ("memory", *GPT3[2:], "--heads", "96", "--dp", "1", "--zero", "0", "--layers", BIG),
            "argument --layers: must be between 1 and 65,536",
        ),
        (
            ("collective", "--op", "all-reduce", "--algorithm", "ring", "--ranks", "8")
            + ("--link", "ib-ndr400", "--bytes", "1e300"),
            "argument --bytes: must be between 0 and 1,125,899,906,842,624",
        ),
        (
            ("flops", *GPT3, "--batch", "1536", "--seconds", "21.4"),
            "--gpus is missing: these FLOPs in --seconds 21.4 need at least 508 × A100-80GB",
        ),
        (
            ("flops", *GPT3, "--batch", "1536", "--seconds", "21.4", "--gpus", "8"),
            "--seconds (21.4) must be at least the peak's time for these FLOPs (1.36e+03 s on "
            "--gpus 8 × A100-80GB)",
        ),
    ],
)
def test_an_input_out_of_range_is_refused_naming_its_flag(capsys, argv, words):
    """Each input of a newcomer's sweep that used to get a generic "predicted … seconds is out of
    range", a 48-digit count or a 290-digit time, or blamed --seconds for a missing --gpus."""
    for extra in ((), ("--json",)):
        status, out, err = run(capsys, *argv, *extra)
        assert (status, out) == (2, "") and words in err and err.count("\n") == 1, err
        assert "out of range" not in err


def test_the_largest_model_allowed_prints_what_json_says(capsys):
    """At the flags' bounds every count the table prints is the one --json gives."""
    shape = ("--layers", str(2**16), "--hidden", str(2**20), "--seq", "2048", "--vocab", "51200")
    n = run_json(capsys, "params", *shape)["params"]
    status, out, _ = run(capsys, "params", *shape)
    assert status == 0 and f"{n:,}" in out
    mem = run_json(capsys, "memory", *shape, "--heads", "8", "--dp", "1", "--zero", "0")
    status, out, _ = run(capsys, "memory", *shape, "--heads", "8", "--dp", "1", "--zero", "0")
    assert status == 0 and f"{mem['params']:,}" in out
    assert repr(mem["bytes_per_device"]) in out  # past 2**53: the float's shortest form


@pytest.mark.slow  # over a CPU-second (CONTRIBUTING.md, Tests)
def test_plan_sensitivity_moves_each_constant_alone(capsys):
    """--sensitivity: ±20 % on η, the flash rate, α, the NIC bandwidth and the headroom, one at a
    time; a slower GEMM or flash kernel slows the chosen layout, a faster one speeds it up."""
    argv = ("plan", "--model", "llama3-8b", "--gpu", "H100-SXM", "--gpus", "8")
    status, out, err = run(capsys, *argv, "--global-batch", "16", "--sensitivity", "--json")
    assert status == 0, err
    rows = {(r["knob"], r["factor"]): r for r in json.loads(out)["sensitivity"]}
    assert len(rows) == 10
    assert rows[("gemm_efficiency", 0.8)]["step_change"] > 0.05
    assert rows[("gemm_efficiency", 1.2)]["step_change"] < -0.03
    assert rows[("flash_efficiency", 0.8)]["step_change"] > 0.005
    assert all(isinstance(r["same"], bool) for r in rows.values())


def test_plan_fp8_fa3_and_compiled_switches(capsys):
    """--fp8, --attention fa3 and --compiled reach the planner: FP8 casts get a column and the
    step is shorter than bf16's; on an A100 (no FP8 tensor cores) FP8 is refused by its rule."""
    base = ("plan", "--model", "llama3-8b", "--gpus", "8", "--gpu", "H100-SXM")
    base += ("--global-batch", "128", "--tp", "1", "--pp", "1", "--zero", "3")
    bf16 = run_json(capsys, *base, "--recompute", "none")
    fp8 = run_json(
        capsys, *base, "--recompute", "none", "--fp8", "delayed", "--attention", "fa3", "--compiled"
    )
    step = lambda r: r["configs"][0]["step_seconds"]
    assert step(fp8) < 0.8 * step(bf16)
    status, out, _ = run(capsys, *base, "--fp8", "current")
    assert status == 0 and "FP8 cast" in out
    # refused before the search, naming the flag and the GPU (not as a rule every layout broke,
    # beside an unrelated layout rule); the default --gpu is the A100
    for flags, words in (
        (("--fp8", "delayed"), "--fp8 delayed needs FP8 tensor cores (Hopper or later); --gpu "),
        (("--attention", "fa3"), "--attention fa3 (FlashAttention-3) is a Hopper kernel; --gpu "),
    ):
        status, _, err = run(capsys, *base[:-4], *flags, "--gpu", "A100-80GB")
        assert status == 2 and words + "A100-80GB" in err and "H100-SXM" in err, err
        assert "no layout is valid" not in err, err


def test_plan_tp_overlap_and_rowwise_switches(capsys):
    """--tp-overlap (the default on an H100) hides TP's collectives under the GEMMs but one chunk
    and what the overlap costs them (a smaller TP column, a shorter step than --no-tp-overlap);
    --fp8 rowwise casts more than current scaling, at its own GEMM rate."""
    base = ("plan", "--model", "llama3-70b", "--gpus", "64", "--gpu", "H100-SXM")
    base += ("--global-batch", "64", "--tp", "8", "--pp", "4", "--zero", "1")
    base += ("--micro-batch", "1", "--recompute", "full")
    plain, over = (
        run_json(capsys, *base, "--no-tp-overlap"),
        run_json(capsys, *base, "--tp-overlap"),
    )
    assert run_json(capsys, *base)["configs"][0] == over["configs"][0]  # the era's default
    first = lambda r: r["configs"][0]
    assert first(over)["tp_seconds"] < first(plain)["tp_seconds"] / 3
    assert first(over)["step_seconds"] < first(plain)["step_seconds"]
    cur = run_json(capsys, *base, "--fp8", "current")
    row = run_json(capsys, *base, "--fp8", "rowwise")
    assert first(row)["fp8_casts_seconds"] > first(cur)["fp8_casts_seconds"]


@pytest.mark.slow  # over a CPU-second (CONTRIBUTING.md, Tests)
def test_a_tight_first_layout_names_the_first_that_surely_fits(capsys):
    """Llama 3 8B on 8 H100s: the fastest layout is tight (inside the allocator margin) and the
    next, 0.1 % slower, surely fits: the plan says so under the table. Control: a plan whose
    first layout is not tight prints no such line."""
    argv = ("plan", "--model", "llama3-8b", "--gpu", "H100-SXM", "--gpus", "8")
    status, out, err = run(capsys, *argv, "--global-batch", "64", "--top", "3")
    assert status == 0, err
    rows = [ln for ln in out.splitlines() if ln.strip().endswith("%")]
    assert "*" in rows[0] and "*" not in rows[1], out
    assert "the first is tight, ranked by time alone: row 2, 0.1% slower, surely fits" in out
    status, out, err = run(capsys, *GPT3_PLAN, "--global-batch", "1536", "--top", "3")
    assert status == 0 and "the first is tight" not in out


MIXTRAL = ("plan", "--model", "mixtral-8x7b", "--gpus", "64", "--global-batch", "512")


@pytest.mark.parametrize(
    "extra, cause",
    [
        (("--ep", "3"), "ep (3) needs an MoE model whose experts (8) it divides"),
        (("--hidden", "4097"), "hidden size (4097) must be divisible by heads (32)"),
        (("--cp", "8", "--seq", "100"), "seq (100) must be divisible by 2·cp (16)"),
        (("--tp", "8", "--kv-heads", "4"), "kv heads (4) must be divisible by t (8)"),
    ],
)
def test_a_refusal_names_its_cause_alone(capsys, extra, cause):
    """Each used to add "; t·cp·p (128) must divide the GPUs (64)": a layout the search leaves
    out for not dividing the GPUs, not why no layout was valid."""
    status, out, err = run(capsys, *MIXTRAL, *extra)
    assert (status, out) == (2, "") and cause in err, err
    assert "t·cp·p" not in err and err.count(";") == 0, err


def test_the_divisibility_rules_are_the_cause_when_no_layout_passes_them():
    from minipar.cost.planner.three_d import _causes

    pruned = ["t·cp·p (128) must divide the GPUs (64)"] * 3 + ["d (3) must divide the global batch"]
    assert _causes(pruned) == [pruned[0]]
    both = ["rule A"] * 2 + ["rule B"] * 2 + pruned
    assert _causes(both) == ["rule A", "rule B"]  # both hold as often: both named
