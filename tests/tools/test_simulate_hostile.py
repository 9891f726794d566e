"""`layerc simulate` and `layerc profile` on hostile options and inputs (issue 15).

Every numeric option is checked at parse time: a value that is not finite, not whole where a
whole number is due, or outside the option's range is a usage error (exit 2) that says what the
option takes; any other value runs to exit 0 or 1, never an internal error. Mutants of a small
config.json, a hardware TOML and a seed trace run in subprocesses with a capped address space and
a timeout: exit 0, or exit 1 with ``file[:line[:col]]: error:`` naming the mutant first; no
output left behind on an error; the inputs byte-identical after.
"""

from __future__ import annotations

import json
import math
import os
import random
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests import capped
from layerc.grammar.hf_config import MAX_SIZE
from layerc.passes.cost import MAX_LAUNCH_US, MAX_TP
from layerc.tools.profile import MAX_RUNS
from tests.layerc_cli import run_layerc

MEMORY = 2 << 30  # RLIMIT_AS of every subprocess
TIMEOUT = 60  # seconds, each

# -- options ----------------------------------------------------------------------------------------
#: option → (whole number?, lowest, highest) of the values it takes (None: no upper bound).
SIMULATE_OPTIONS = {
    "--seq-len": (True, 1, MAX_SIZE), "--batch": (True, 1, MAX_SIZE), "--layer": (True, 0, MAX_SIZE - 1),
    "--tp": (True, 1, MAX_TP), "--engines": (True, 1, None), "--launch-overhead": (False, 0, MAX_LAUNCH_US),
}
PROFILE_OPTIONS = {
    "--n-tokens": (True, 1, MAX_SIZE), "--batch": (True, 1, MAX_SIZE), "--layer": (True, 0, MAX_SIZE - 1),
    "--repeat": (True, 1, MAX_RUNS), "--warmup": (True, 0, MAX_RUNS), "--threads": (True, 1, os.cpu_count() or 1),
}
HOSTILE_TEXTS = ["inf", "-inf", "Infinity", "nan", "NaN", "-nan", "-1", "0", "-0", "0.0", "1e9", "1e308", "1e400",
                 "2147483647", "2147483648", "9223372036854775808", "1" + "0" * 30, "9" * 5000, "1.5", "", " ", "0x10",
                 "1_000", "²", "12abc", "1000000000"]


def values() -> st.SearchStrategy[str]:
    """Option values a fuzzer tries: infinities, NaN, negatives, zero, huge, fractions, junk."""
    return st.one_of(st.sampled_from(HOSTILE_TEXTS),
                     st.integers(-2**70, 2**70).map(str),
                     st.floats(allow_nan=True, allow_infinity=True).map(repr))


def in_range(text: str, whole: bool, low: float, high: float | None) -> bool:
    """What the option should accept (Python's own reading of numbers)."""
    try:
        x = int(text) if whole else float(text)
    except ValueError:
        return False
    return math.isfinite(x) and x >= low and (high is None or x <= high)


@settings(max_examples=60)
@given(st.sampled_from(sorted(SIMULATE_OPTIONS)), values())
def test_simulate_numeric_options(option, text):
    """In-process: a value in range only costs a preset's layer (no option sizes an allocation)."""
    whole, low, high = SIMULATE_OPTIONS[option]
    rc, _, err = run_layerc("simulate", "--preset", "llama-3.2-1b", f"{option}={text}")
    assert "internal error" not in err
    if in_range(text, whole, low, high):
        assert rc in (0, 1), err
        if rc == 1:
            assert err.startswith("layerc: error: ")
    else:
        assert rc == 2, (option, text, err)
        assert f"argument {option}: takes " in err


@settings(max_examples=40)
@given(st.sampled_from(sorted(PROFILE_OPTIONS)), values())
def test_profile_numeric_options(option, text):
    """A missing --config stops a valid command before torch: only parsing is under test here."""
    whole, low, high = PROFILE_OPTIONS[option]
    missing = "/nonexistent/layerc-no-such-config.json"
    rc, _, err = run_layerc("profile", "--config", missing, f"{option}={text}")
    assert "internal error" not in err
    if in_range(text, whole, low, high):
        assert rc == 1 and err.startswith(f"{missing}: error: no such file"), err
    else:
        assert rc == 2, (option, text, err)
        assert f"argument {option}: takes " in err


def test_engines_beyond_the_ops_are_clamped_with_a_note(tmp_path):
    rc, out, err = run_layerc("simulate", "--preset", "llama-3.2-1b", "--engines", 10**40, "--json", tmp_path / "r.json")
    assert rc == 0, err
    assert "has 18 kernel ops: scheduled on 18" in err
    assert json.loads((tmp_path / "r.json").read_text())["schedule"]["engines"] == 18


def test_profile_device_and_hardware_are_checked_at_parse_time():
    for args in (["--device", "cuda:x"], ["--device", "gpu"], ["--device", "cuda:99999"]):
        rc, _, err = run_layerc("profile", "--arch", "llama", *args)
        assert rc == 2 and "argument --device: takes cpu, cuda or cuda:N" in err


def test_profile_refuses_a_step_larger_than_the_machine():
    """Checked against the memory there is before any tensor is allocated (torch only)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    rc, _, err = run_layerc("profile", "--arch", "llama", "--n-tokens", 2**31 - 1, "--batch", 64)
    assert rc == 1 and "GiB, more than the" in err and "give smaller sizes" in err


# -- mutated inputs -----------------------------------------------------------------------------------
CONFIG = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
          "num_key_value_heads": 2, "num_hidden_layers": 2, "head_dim": 16, "rms_norm_eps": 1e-5,
          "torch_dtype": "bfloat16", "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "mscale_all_dim": 1.0}}
#: DeepSeek-V3 in small: MLA, a sigmoid grouped router, shared experts, the first layer dense.
MOE_CONFIG = {"model_type": "deepseek_v3", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
              "num_key_value_heads": 4, "num_hidden_layers": 2, "moe_intermediate_size": 32, "num_experts_per_tok": 2,
              "q_lora_rank": 32, "kv_lora_rank": 16, "qk_rope_head_dim": 8, "qk_nope_head_dim": 16, "v_head_dim": 16,
              "n_routed_experts": 8, "n_shared_experts": 1, "n_group": 2, "topk_group": 1, "first_k_dense_replace": 1,
              "routed_scaling_factor": 2.5, "norm_topk_prob": True, "moe_layer_freq": 1}
HARDWARE = ('[gpu]\nname = "tiny"\nmatrix_tflops = { bfloat16 = 100.0 }\nvector_tflops = 10\nhbm_gbps = 1000\n'
            'interconnect_gbps = 100\nlaunch_overhead_us = 2\nmemory_efficiency = [[0, 0.5], [10, 0.9]]\n')
SEED = {"traceEvents": [{"ph": "X", "name": n, "ts": ts, "dur": d, "tid": t, "args": {"op_type": o}} for n, ts, d, t, o in (
    ("RMSNorm (pre)", 0, 10, 0, "Norm"), ("Q Projection", 10, 50, 0, "MatMul"), ("K Projection", 10, 20, 1, "MatMul"),
    ("V Projection", 30, 20, 1, "MatMul"), ("Residual Connection", 60, 5, 0, "MatAdd"))]}

#: JSON values put in place of a config key's or a seed event field's.
JSON_VALUES = ["0", "-1", "1e12", "1000000000000000", "2147483648", "99999999999999999999999", "1e400", "-1e400", "NaN",
               "Infinity", "-Infinity", '"64"', '""', "null", "[]", "{}", "true", "-0.0", "0.5", "[[[[1]]]]"]
#: TOML values put in place of a hardware key's.
TOML_VALUES = ["0", "-1", "inf", "-inf", "nan", "1e-300", "1e300", "99999999999999999999999999", '"x"', "[]", "{}",
               "true", "[[0, 0.5], [0, 0.5]]", "[[0, 0]]", "[[inf, 1]]", "{ bfloat16 = inf }", "{ bfloat16 = 0 }",
               "{ float8 = 1.0 }", "0.0009"]


def mutate_json(doc: dict, rng: random.Random) -> str:
    """One structural change (a key's value, a key gone, a key added) or one textual one."""
    text = json.dumps(doc, indent=2)
    move = rng.randrange(6)
    spots = _json_spots(text)
    if move <= 2 and spots:  # a hostile value at a key (nested ones too: seed events, rope_scaling)
        start, end = spots[rng.randrange(len(spots))]
        return text[:start] + rng.choice(JSON_VALUES) + text[end:]
    if move == 3:  # a line dropped or doubled
        lines = text.splitlines(keepends=True)
        i = rng.randrange(len(lines))
        return "".join(lines[:i] + ([lines[i]] * 2 if rng.random() < 0.5 else []) + lines[i + 1:])
    if move == 4 or move <= 2:  # bytes: a cut, a stray character, a bad UTF-8 byte
        i = rng.randrange(len(text))
        return text[:i] + rng.choice(["", "\x00", "\udcff", "{", "]", '"', "\\", "\u00e9"]) + text[i + rng.randrange(3):]
    return "[" * rng.choice([10, 100_000]) + text  # nesting past what a parser follows


def _json_spots(text: str) -> list[tuple[int, int]]:
    """Spans of scalar values after ``"key": ``."""
    return [(m.start(1), m.end(1)) for m in re.finditer(r'"[^"]+": ([^,\n{}\[\]]+|\{[^{}]*\}|\[[^\[\]]*\])', text)]


def mutate_toml(text: str, rng: random.Random) -> str:
    lines = text.splitlines(keepends=True)
    move = rng.randrange(5)
    keyed = [i for i, line in enumerate(lines) if " = " in line]
    if not keyed:
        move = 4
    if move <= 2:
        i = rng.choice(keyed)
        key = lines[i].split(" = ")[0]
        lines[i] = f"{key} = {rng.choice(TOML_VALUES)}\n"
    elif move == 3:
        i = rng.choice(keyed)
        del lines[i]
    else:
        i = rng.randrange(len(lines))
        lines.insert(i, rng.choice(["[defaults]\n", "[other]\n", "defaults = 3\n", "unknown = 1\n", "= =\n", "\xff\n",
                                    "[gpu]\n", "hbm_gbps = 1\n"]))
    return "".join(lines).replace("\xff", "\udcff")


def write_mutant(path: Path, text: str) -> bytes:
    """The mutant's bytes (a lone surrogate stands for a byte that is no UTF-8)."""
    data = text.encode("utf-8", "surrogateescape")
    path.write_bytes(data)
    return data


def run_capped(args: list, cwd: Path) -> subprocess.CompletedProcess:
    """``layerc ARGS`` in a capped child (tests/capped.py)."""
    return capped.run(args, memory=MEMORY, timeout=TIMEOUT, cwd=cwd)


def check_mutant(mutant: Path, data: bytes, args: list, outputs: list[Path], cwd: Path) -> None:
    proc = run_capped(args, cwd)
    shown = f"{' '.join(map(str, args))}\n--- mutant ---\n{data[:800]!r}\n--- stderr ---\n{proc.stderr[-2000:]}"
    assert proc.returncode in (0, 1), shown
    assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr, shown
    if proc.returncode == 1:
        first = proc.stderr.splitlines()[0]
        assert re.match(rf"{re.escape(str(mutant))}(:\d+(:\d+)?)?: error: ", first), shown
        assert not any(p.exists() for p in outputs), shown  # nothing half-written on an error
    assert mutant.read_bytes() == data, "the input changed"


def mutants(kind: str, count: int, tmp_path: Path):
    """(mutant, its bytes, the command, its outputs) for ``count`` seeded mutants of one input kind."""
    rng = random.Random(f"layerc-simulate-hostile-{kind}")
    base = tmp_path / "config.json"
    base.write_text(json.dumps(CONFIG, indent=2))
    for i in range(count):
        out = [tmp_path / f"out-{kind}{i}.json"]
        if kind == "config":
            m = tmp_path / f"config{i}" / "config.json"
            m.parent.mkdir()
            data = write_mutant(m, mutate_json(CONFIG if i % 2 else MOE_CONFIG, rng))
            args = ["simulate", "--config", m, "--engines", "auto", "--json", out[0]]
        elif kind == "hardware":
            m = tmp_path / f"hw{i}.toml"
            data = write_mutant(m, mutate_toml(HARDWARE, rng))
            args = ["simulate", "--config", base, "--hw", m, "--tp", 2, "--json", out[0]]
        else:
            m = tmp_path / f"seed{i}.json"
            data = write_mutant(m, mutate_json(SEED, rng))
            out.append(tmp_path / f"out-seed{i}.png")
            args = ["simulate", "--preset", "llama-3.2-1b", "--attention", "eager", "--compare-seed", m, "--json", out[0]]
            if i % 4 == 0:  # the chart too, now and then (matplotlib is slow to start)
                args += ["--png", out[1]]
        yield m, data, args, out


def test_mutated_inputs(tmp_path):
    """Seeded mutants of each input, two subprocesses at a time."""
    jobs = [*mutants("config", 14, tmp_path), *mutants("hardware", 12, tmp_path), *mutants("seed", 10, tmp_path)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        for f in [pool.submit(check_mutant, m, data, args, out, tmp_path) for m, data, args, out in jobs]:
            f.result()


def test_hand_picked_hostile_inputs(tmp_path):
    """The values the fuzzer reported, each with the error it must give."""
    cases = [
        ("config.json", json.dumps({**CONFIG, "hidden_size": 10**12}), "--config",
         "'hidden_size' must be an integer <= 2147483647"),
        ("config.json", json.dumps({**CONFIG, "intermediate_size": 10**15}), "--config",
         "'intermediate_size' must be an integer <= 2147483647"),
        ("config.json", json.dumps({**CONFIG, "num_attention_heads": -4}), "--config", "must be an integer >= 1, not -4"),
        ("config.json", json.dumps({**CONFIG, "num_key_value_heads": "2"}), "--config", "must be an integer >= 1, not '2'"),
        ("config.json", json.dumps({**CONFIG, "rms_norm_eps": math.nan}), "--config", "'rms_norm_eps' must be a positive number"),
        ("config.json", json.dumps({**CONFIG, "hidden_size": 2**31 - 1, "intermediate_size": 2**31 - 1, "head_dim": 1}),
         "--config", "beyond the 64-bit counts"),
        ("gpu.toml", HARDWARE.replace("hbm_gbps = 1000", "hbm_gbps = 0"), "--hw", "'hbm_gbps' must be a positive number"),
        ("gpu.toml", HARDWARE.replace("hbm_gbps = 1000", "hbm_gbps = -5"), "--hw", "'hbm_gbps' must be a positive number"),
        ("gpu.toml", HARDWARE.replace("100.0", "inf"), "--hw", "'matrix_tflops' must be a table of finite peaks"),
        ("gpu.toml", HARDWARE.replace("launch_overhead_us = 2", "launch_overhead_us = 1e300"), "--hw",
         "'launch_overhead_us' must be a number of µs from 0 to 1000000"),
        ("seed.json", json.dumps(SEED).replace('"dur": 50', '"dur": 1e400'), "--compare-seed",
         "needs a 'ts' and a non-negative 'dur'"),
        ("seed.json", json.dumps(SEED).replace('"ts": 10,', '"ts": NaN,', 1), "--compare-seed", "needs a 'ts'"),
    ]
    for name, text, flag, message in cases:
        path = tmp_path / name
        path.write_text(text)
        base = ["--config", path] if flag == "--config" else ["--preset", "llama-3.2-1b", flag, path]
        rc, _, err = run_layerc("simulate", *base)
        assert rc == 1 and err.startswith(f"{path}:") and message in err.splitlines()[0], (name, text, err)
