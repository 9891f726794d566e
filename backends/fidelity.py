"""How right the dump grammars and the layer slicer are on every decoder-only architecture
transformers ships, against torch's own ``nn_module_stack`` (``layerc fidelity`` runs it).

Each architecture is exported by ``export-hf`` (a tiny random config, CPU) in a child process of
its own (an export can take all memory or hang: the child is capped and timed), then read in both
syntaxes (AutoDeploy dump and FX print), printed back (the round trip must be byte-identical),
and sliced; every op's layer is compared with the layer its module stack names:

- recall: of the ops inside a decoder layer, the share given that layer;
- precision: of the ops the slicer put in a layer, the share that belong there;
- the same two on ops that read a weight.

A figure a test could fake is worth nothing here: nothing is filtered, every op counts. The
result is a JSON record per architecture and a Markdown table for the README.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from layerc.ir.diagnostics import LayercError

BEGIN, END = "<!-- fidelity: begin (make fidelity writes this) -->", "<!-- fidelity: end -->"


#: a child's limits: an export of a tiny model takes seconds and a few hundred MB
CHILD_SECONDS = 600


CHILD_MEMORY = 8 << 30


LAYERS = 3


def decoder_architectures() -> tuple[list[str], dict[str, str]]:
    """The decoder-only causal-LM model types of the installed transformers, and the others with
    why they are left out (an encoder or an encoder-decoder used as a causal LM, or one that
    ``export-hf`` does not export: :data:`export_hf.NOT_EXPORTED` says why)."""
    from transformers import AutoConfig, logging as hf_logging
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    from layerc.backends.synth.hf_export import NOT_EXPORTED

    hf_logging.set_verbosity_error()  # default configs warn about their own token ids
    keep, left_out = [], {}
    for arch in sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES):
        if arch in NOT_EXPORTED:
            left_out[arch] = NOT_EXPORTED[arch]
            continue
        if arch in MODEL_FOR_MASKED_LM_MAPPING_NAMES:
            left_out[arch] = "an encoder (masked LM) with a causal-LM head"
            continue
        try:
            config = AutoConfig.for_model(arch)
        except Exception as e:  # noqa: BLE001 - a config class that cannot build is a finding
            left_out[arch] = f"its config does not build: {_first_line(e)}"
            continue
        if getattr(config, "is_encoder_decoder", False):
            left_out[arch] = "an encoder-decoder"
            continue
        keep.append(arch)
    return keep, left_out


def measure(arch: str, layers: int = LAYERS, keep: str | None = None) -> dict:
    """Export ``arch`` and measure it (in this process: :func:`run_child` isolates it).

    With ``keep``, the export goes to ``keep/arch-layers`` and one already there is reused, so
    a change to the readers or the slicer is measured again in seconds, not in a full export.

    Each syntax is read on its own: one that does not parse is recorded (``parse_error`` for the
    dump, ``fx_parse_error`` for the FX print) and its round trip counts as failed; the slicer
    runs on the dump, or on the FX print where only that parses (``sliced_syntax``)."""
    from layerc.backends.autodeploy import print_module
    from layerc.backends.fx import print_graph
    from layerc.grammar.dumps import load, parse_and_verify
    from layerc.ir.graph import OP
    from layerc.passes.pipeline import run_passes
    from layerc.passes.slicing import SliceLayers
    from layerc.backends.synth import hf_export as export_hf

    record: dict = {"arch": arch, "layers": layers}
    with _export_dir(keep, arch, layers) as tmp:
        files = [Path(tmp) / name for name in (export_hf.DUMP_FILENAME, export_hf.FX_FILENAME, export_hf.LAYERS_FILENAME)]
        if not all(f.is_file() for f in files):
            t0 = time.perf_counter()
            try:
                export_hf.export(arch, layers, tmp)
            except Exception as e:  # noqa: BLE001 - why an architecture does not export is the figure
                record["export_error"] = _first_line(e)
                return record
            record["export_seconds"] = round(time.perf_counter() - t0, 1)
        dump_text = (Path(tmp) / export_hf.DUMP_FILENAME).read_text()
        fx_text = (Path(tmp) / export_hf.FX_FILENAME).read_text()
        truth = json.loads((Path(tmp) / export_hf.LAYERS_FILENAME).read_text())["nodes"]
        module = fx_module = None
        try:
            module = load(tmp)
            record["dump_round_trip"] = print_module(module) == dump_text
        except Exception as e:  # noqa: BLE001 - a reader's own crash is a finding too, not the end of the run
            record["dump_round_trip"] = False
            record["parse_error"] = _diagnostic(e, tmp)
        try:
            fx_module = parse_and_verify(fx_text, export_hf.FX_FILENAME)
            record["fx_round_trip"] = print_graph(fx_module.graphs[0]) == fx_text
        except Exception as e:  # noqa: BLE001
            record["fx_round_trip"] = False
            record["fx_parse_error"] = _diagnostic(e, tmp)
        if module is None:
            if fx_module is None:
                return record
            module, record["sliced_syntax"] = fx_module, "fx"
        try:
            run_passes([SliceLayers()], module)
        except Exception as e:  # noqa: BLE001
            record["slice_error"] = _diagnostic(e, tmp)
            return record
        ops = [n for n in module.main_graph().nodes if n.kind == OP]
        record["nodes"] = len(ops)
        record.update(agreement([(n.name, n.meta.get("layer"), truth.get(n.name)) for n in ops], "all"))
        record.update(agreement([(n.name, n.meta.get("layer"), truth.get(n.name)) for n in ops if n.weights], "weights"))
    return record


@contextmanager
def _export_dir(keep: str | None, arch: str, layers: int) -> Iterator[str]:
    if keep is None:
        with tempfile.TemporaryDirectory(prefix="layerc-fidelity-") as tmp:
            yield tmp
    else:
        path = Path(keep) / f"{arch}-{layers}"
        path.mkdir(parents=True, exist_ok=True)
        yield str(path)


def _diagnostic(e: Exception, tmp: str) -> str:
    """The first line of a diagnostic (of any other exception: ``internal error:`` and its type),
    its file named without the temporary directory."""
    text = e.format().splitlines()[0] if isinstance(e, LayercError) else f"internal error: {_first_line(e)}"
    return text.replace(str(Path(tmp)) + os.sep, "")


def agreement(rows: list[tuple[str, int | None, int | None]], prefix: str) -> dict:
    """Recall and precision of predicted layers against true ones (None: outside every layer),
    and a few of the misses by name."""
    inside = [r for r in rows if r[2] is not None]
    placed = [r for r in rows if r[1] is not None]
    right = sum(1 for _, got, want in inside if got == want)
    misses = [f"{name}: {got} not {want}" for name, got, want in rows if got != want]
    return {
        f"{prefix}_recall": round(right / len(inside), 4) if inside else None,
        f"{prefix}_precision": round(right / len(placed), 4) if placed else None,
        f"{prefix}_misses": len(misses),
        f"{prefix}_examples": misses[:8],
    }


def run_child(arch: str, layers: int, keep: str | None = None) -> dict:
    """:func:`measure` in a capped child: a crash, a hang or a memory blow-up is a record too."""
    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (CHILD_MEMORY, CHILD_MEMORY))

    argv = [sys.executable, "-m", "layerc.tools.fidelity", "--child", arch, "--layers", str(layers)]
    if keep is not None:
        argv += ["--keep", keep]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=cap, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=CHILD_SECONDS)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return {"arch": arch, "layers": layers, "export_error": f"ran past {CHILD_SECONDS} s"}
    lines = out.decode("utf-8", "replace").strip().splitlines()
    if proc.returncode != 0 or not lines:
        return {"arch": arch, "layers": layers, "export_error": f"the child died (exit {proc.returncode}): {_tail(err)}"}
    try:
        record = json.loads(lines[-1])
    except ValueError:
        record = None
    if not isinstance(record, dict) or record.get("arch") != arch:
        return {"arch": arch, "layers": layers, "export_error": f"the child printed no record: {lines[-1][:200]}"}
    return record


def table(records: list[dict], left_out: dict[str, str]) -> str:
    """The README table: one row per architecture, then the ones left out and why."""
    def pct(v) -> str:
        return "" if v is None else f"{v:.3f}"

    lines = ["| architecture | ops | dump round trip | FX round trip | recall | precision | weight ops recall | weight ops precision | note |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(records, key=lambda r: r["arch"]):
        note = r.get("export_error") or r.get("parse_error") or r.get("slice_error") or r.get("fx_parse_error") or ""
        if r.get("sliced_syntax"):
            note = f"sliced from the {r['sliced_syntax']} print; {note}"
        lines.append(
            f"| {r['arch']} | {r.get('nodes', '')} | {_yes(r.get('dump_round_trip'))} | {_yes(r.get('fx_round_trip'))} | "
            f"{pct(r.get('all_recall'))} | {pct(r.get('all_precision'))} | {pct(r.get('weights_recall'))} | "
            f"{pct(r.get('weights_precision'))} | {note[:120].replace('|', '/')} |")
    if left_out:
        lines += ["", "Left out:", ""]
        lines += [f"- {arch}: {why}" for arch, why in sorted(left_out.items())]
    return "\n".join(lines) + "\n"


def spliced(readme: str, text: str) -> str:
    """``readme`` with ``text`` between its fidelity markers."""
    if BEGIN not in readme or END not in readme:
        raise LayercError(f"the README has no fidelity markers: put {BEGIN} and {END} where the table goes")
    head, rest = readme.split(BEGIN, 1)
    return f"{head}{BEGIN}\n{text}{END}{rest.split(END, 1)[1]}"


def score(r: dict) -> float | None:
    """min(recall, precision) of a sliced record, None for one not sliced; a figure with nothing to
    count (no op placed in a layer, or none inside one) counts as 0."""
    if "nodes" not in r:
        return None
    return min(r.get("all_recall") or 0.0, r.get("all_precision") or 0.0)


def summary(records: list[dict]) -> str:
    exported = [r for r in records if "export_error" not in r]
    scores = {id(r): s for r in exported if (s := score(r)) is not None}
    sliced = [r for r in exported if id(r) in scores]
    good = [r for r in sliced if scores[id(r)] >= 0.995]
    exact = [r for r in sliced if r.get("weights_recall") == 1.0 and r.get("weights_precision") == 1.0]
    both = [r for r in exported if r.get("dump_round_trip") and r.get("fx_round_trip")]
    mean = sum(scores.values()) / len(sliced) if sliced else 0.0
    return (f"{len(records)} architectures, {len(exported)} export, {len(both)} round-trip in both syntaxes, "
            f"{len(sliced)} sliced: {len(good)} at >= 0.995 recall and precision, {len(exact)} exact on weight ops, "
            f"mean min(recall, precision) {mean:.3f}")


def _yes(v) -> str:
    return "" if v is None else ("yes" if v else "**no**")


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:200]}" if text else type(e).__name__


def _tail(err: bytes) -> str:
    lines = [x for x in err.decode("utf-8", "replace").strip().splitlines() if x.strip()]
    return lines[-1][:200] if lines else ""
