"""The accelerators a cost model and a measured roofline compare against: their peaks (matrix
per precision, vector, HBM, interconnect), fixed times and efficiency curves, from the presets
in ``data/hardware.toml`` or a user's TOML file; and the preset of a device a profiler names."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, cast

from layerc.ir.diagnostics import LayercError

if TYPE_CHECKING:  # (TOML and its errors load where a file is read: a trace's run reads presets from the cache)
    from layerc.grammar.config_files import ConfigFile

Steps = tuple[tuple[float, float], ...]
#: The longest fixed time per kernel or collective, in µs (a hardware file's or an option's): a
#: second per launch.
MAX_LAUNCH_US = 1e6
#: The slowest peak (TFLOP/s), bandwidth (GB/s) and efficiency a hardware file may give: a GFLOP/s,
#: a MB/s, 0.1% — slower is no accelerator, and would take the layer's times past what a schedule counts.
MIN_RATE = 1e-3


@dataclass(frozen=True)
class Hardware:
    """One accelerator's peaks, fixed times and efficiency curves (a preset or a user's file)."""

    key: str
    name: str
    matrix_tflops: dict[str, float]
    vector_tflops: float
    hbm_gbps: float
    interconnect_gbps: float = 0.0
    launch_overhead_us: float = 2.0
    collective_latency_us: float = 10.0
    matrix_efficiency: Steps = ((0.0, 1.0),)
    vector_efficiency: Steps = ((0.0, 1.0),)
    memory_efficiency: Steps = ((0.0, 1.0),)
    source: str | None = field(default=None, compare=False)  #: the TOML file it was read from (None: a preset)
    devices: tuple[str, ...] = ()  #: regexes of the device names profilers give this hardware

    def matrix_peak(self, dtype: str) -> float:
        """FLOP/s of the tensor cores for ``dtype`` (a torch name or ``float8``)."""
        key = _precision(dtype)
        tflops = self.matrix_tflops.get(key)
        if tflops is None:
            have = ", ".join(sorted(self.matrix_tflops))
            raise LayercError(f"{self.name} has no {key} matrix peak (it has: {have})", self.source)
        return tflops * 1e12

    def with_launch_overhead(self, us: float) -> "Hardware":
        from dataclasses import replace

        return replace(self, launch_overhead_us=us)


def _precision(dtype: str) -> str:
    d = dtype.removeprefix("torch.")
    if d.startswith("float8"):
        return "float8"
    return {"half": "float16", "float": "float32"}.get(d, d)


def efficiency(steps: Steps, size: float) -> float:
    """The eta of the largest threshold <= ``size`` (the first step below every threshold)."""
    eta = steps[0][1]
    for threshold, value in steps:
        if size >= threshold:
            eta = value
    return eta


_HW_KEYS = {"name", "matrix_tflops", "vector_tflops", "hbm_gbps", "interconnect_gbps", "launch_overhead_us",
            "collective_latency_us", "matrix_efficiency", "vector_efficiency", "memory_efficiency", "devices"}


_BUILTIN = Path(__file__).parent / "data" / "hardware.toml"  # (beside this module: importlib.resources costs a run 6 ms)


@lru_cache(maxsize=1)
def _builtin_file() -> ConfigFile:
    from layerc.grammar.config_files import read_toml_config

    return read_toml_config(_BUILTIN, _BUILTIN.read_text(encoding="utf-8"))


@lru_cache(maxsize=1)
def _builtin_presets() -> dict[str, dict[str, Any]]:
    """Every built-in preset's fields, in file order: kept beside this module's bytecode
    (``data_cache``) under the file's text and this module's stamp, so a trace's run reads them
    without parsing TOML (or importing its reader)."""
    from dataclasses import fields

    from layerc.passes import data_cache

    cache = data_cache.beside(__file__, "hardware")
    key = (_BUILTIN.read_text(encoding="utf-8"), data_cache.stamp(__file__))
    found = data_cache.read(cache, key)
    if found is None:
        presets = {k: load_hardware(k) for k in hardware_presets()}
        found = {k: {f.name: getattr(hw, f.name) for f in fields(Hardware)} for k, hw in presets.items()}
        data_cache.write(cache, key, found)
    return cast("dict[str, dict[str, Any]]", found)


def hardware_presets() -> tuple[str, ...]:
    return tuple(k for k in _builtin_file().doc if k != "defaults")


@lru_cache(maxsize=64)
def device_preset(device: str) -> Hardware | None:
    """The first preset (in file order) one of whose ``devices`` regexes the profiler's name of
    a device matches (``NVIDIA H100 80GB HBM3`` → h100); None for a device no preset names."""
    for preset in _builtin_presets().values():
        if any(re.search(pattern, device) for pattern in preset["devices"]):
            return Hardware(**preset)
    return None


def load_hardware(spec: str) -> Hardware:
    """A preset (``h100``) or a TOML file with one table in the presets' format (``[defaults]``
    of the built-in file apply, and the file's own ``[defaults]`` if it has one)."""
    from layerc.grammar.config_files import read_toml_config

    builtin = _builtin_file()
    if spec.lower() in builtin.doc and spec.lower() != "defaults":
        return _hardware(builtin, spec.lower(), builtin.doc.get("defaults", {}), source=None)
    if not spec.endswith(".toml"):
        raise LayercError(f"unknown hardware '{spec}' (presets: {', '.join(hardware_presets())}; or a .toml file)")
    f = read_toml_config(spec)
    tables = [k for k, v in f.doc.items() if isinstance(v, dict) and k != "defaults"]
    if len(tables) != 1:
        raise f.error(f"a hardware file needs exactly one table such as [my_gpu], not {len(tables)}")
    own = f.doc.get("defaults", {})
    if not isinstance(own, dict):
        raise f.error("'defaults' must be a table ([defaults])", "defaults")
    unknown = sorted(set(own) - _HW_KEYS)
    if unknown:
        raise f.error(f"unknown key '{unknown[0]}' (keys: {', '.join(sorted(_HW_KEYS))})", unknown[0], "defaults")
    defaults = {**builtin.doc.get("defaults", {}), **own}
    return _hardware(f, tables[0], defaults, source=f.path)


def _hardware(f: ConfigFile, key: str, defaults: dict[str, Any], source: str | None) -> Hardware:
    from layerc.grammar.config_files import finite_number, shown

    table = f.doc[key]
    doc = {**defaults, **table}

    def bad(msg: str, k: str) -> LayercError:
        return f.error(msg, k, key if k in table else "defaults")

    unknown = set(table) - _HW_KEYS
    if unknown:
        k = sorted(unknown)[0]
        raise bad(f"unknown key '{k}' (keys: {', '.join(sorted(_HW_KEYS))})", k)

    def rate(k: str, required: bool = True) -> float:
        """A peak or a bandwidth: at least MIN_RATE (0 for an optional one: none)."""
        v = doc.get(k)
        if v is None:
            if not required:
                return 0.0
            raise f.error(f"[{key}] has no '{k}'", None)
        x = finite_number(v)
        if x is None or not (x >= MIN_RATE or (not required and x == 0)):
            raise bad(f"'{k}' must be a positive number, at least {MIN_RATE:g}{'' if required else ' (or 0: none)'}, "
                      f"not {shown(v)}", k)
        return x

    def duration(k: str) -> float:
        v = doc.get(k, 0.0)
        x = finite_number(v)
        if x is None or not 0 <= x <= MAX_LAUNCH_US:
            raise bad(f"'{k}' must be a number of µs from 0 to {MAX_LAUNCH_US:.0f}, not {shown(v)}", k)
        return x

    peaks = doc.get("matrix_tflops")
    if not isinstance(peaks, dict) or not peaks or not all(
            (finite_number(v) or 0) >= MIN_RATE for v in peaks.values()):
        raise bad(f"'matrix_tflops' must be a table of finite peaks of at least {MIN_RATE:g} per dtype, "
                  f"e.g. {{ bfloat16 = 989.4 }}", "matrix_tflops")
    return Hardware(
        key=key,
        name=str(doc.get("name", key)),
        matrix_tflops={_precision(k): cast(float, finite_number(v)) for k, v in peaks.items()},  # checked above
        vector_tflops=rate("vector_tflops"),
        hbm_gbps=rate("hbm_gbps"),
        interconnect_gbps=rate("interconnect_gbps", required=False),
        launch_overhead_us=duration("launch_overhead_us"),
        collective_latency_us=duration("collective_latency_us"),
        matrix_efficiency=_steps(doc, "matrix_efficiency", bad),
        vector_efficiency=_steps(doc, "vector_efficiency", bad),
        memory_efficiency=_steps(doc, "memory_efficiency", bad),
        source=source,
        devices=_patterns(doc, bad),
    )


def _patterns(doc: dict[str, Any], bad: Callable[[str, str], LayercError]) -> tuple[str, ...]:
    """``devices``: a list of regexes that compile."""
    v = doc.get("devices", [])
    if not isinstance(v, list) or not all(isinstance(p, str) for p in v):
        raise bad("'devices' must be a list of regexes of device names, e.g. ['H100']", "devices")
    for p in v:
        try:
            re.compile(p)
        except re.error as e:
            raise bad(f"'devices' has a regex that does not compile: {p!r} ({e})", "devices") from None
    return tuple(v)


def _steps(doc: dict[str, Any], k: str, bad: Callable[[str, str], LayercError]) -> Steps:
    from layerc.grammar.config_files import finite_number

    v = doc.get(k, [[0, 1.0]])
    pairs = [tuple(finite_number(x) for x in p) if isinstance(p, list) and len(p) == 2 else (None, None)
             for p in v] if isinstance(v, list) else []
    ok = pairs and all(a is not None and b is not None and a >= 0 and MIN_RATE <= b <= 1 for a, b in pairs)
    steps = cast("list[tuple[float, float]]", pairs)  # read below only when ``ok``: pairs of numbers
    if not ok or [a for a, _ in steps] != sorted(a for a, _ in steps):
        raise bad(f"'{k}' must be ascending [threshold, efficiency] pairs of finite numbers with "
                  f"{MIN_RATE:g} <= efficiency <= 1", k)
    return tuple(steps)
