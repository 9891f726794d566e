"""The slicing rules, each on the class of graphs it is for: eager decoders as torch.export prints
transformers models (``gen-dump eager``), every variant of the structures that decide where a
layer begins and ends (``gen_eager.CHOICES``), against the generator's own truth."""

from __future__ import annotations

import json
import random
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from layerc.grammar.dumps import load
from layerc.ir.graph import OP
from layerc.passes.pipeline import run_passes
from layerc.passes.slicing import SliceLayers
from layerc.backends.synth import dump as gen_dump, eager as gen_eager
from tests.layerc_cli import run_layerc


def _misses(module) -> list[tuple[str, object, object]]:
    run_passes([SliceLayers()], module)
    return [(n.name, n.meta["layer"], n.meta.get("true_layer")) for n in module.main_graph().nodes
            if n.kind == OP and n.meta["layer"] != n.meta.get("true_layer")]


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 6), st.one_of(st.none(), st.integers(0, 1000)), st.booleans(), st.booleans())
def test_every_variant_slices_as_its_modules_say(variant, layers, seed, constants, symbolic):
    """Norms with and without casts, post-norm stacks, embedding tails, masks one layer reads,
    hybrids, MoE tails, user-less checks, closing scales, residual casts, side states; generic op
    names permuted (``seed``), so nothing is decided by a name; with every constant class and
    symbolic sizes."""
    module = gen_dump.generate("eager", layers, seed=seed, variant=variant, constants=constants, symbolic=symbolic)
    assert _misses(module) == [], gen_eager.features(variant)


def test_the_variants_cover_every_structure():
    """A property over variants is only as good as the variants: the first 64 hold every choice
    of every structure, and every layer kind."""
    seen = {k: Counter() for k in gen_eager.CHOICES}
    kinds = Counter()
    for v in range(64):
        f = gen_eager.features(v)
        for k, value in f.items():
            seen[k][value] += 1
        kinds.update(gen_eager.layer_kinds(f, 4, v))
    for k, values in gen_eager.CHOICES.items():
        assert set(seen[k]) == set(values), (k, seen[k])
    assert set(kinds) == {"full", "sliding", "ssm"}


def test_a_mask_one_layer_reads_is_still_the_models():
    """A hybrid with one attention layer: its mask and rotary tables, computed before the stack,
    are the model's, though only that layer reads them."""
    for v in range(2000):
        f = gen_eager.features(v)
        if f["mixers"] == "hybrid" and f["rope"] and gen_eager.layer_kinds(f, 3, v).count("full") == 1:
            break
    module = gen_dump.generate("eager", 3, variant=v)
    assert _misses(module) == []
    graph = module.main_graph()
    tables = [n for n in graph.nodes if n.kind == OP and n.target in ("aten.arange.default", "aten.cos.default", "aten.where.ScalarOther")]
    assert tables and all(n.meta["layer"] is None and n.meta["region"] == "prologue" for n in tables)


def test_regions_are_named():
    """Every op says where it went: the model's prologue, a layer, or the epilogue."""
    module = gen_dump.generate("eager", 3, variant=0)
    run_passes([SliceLayers()], module)
    regions = Counter(n.meta["region"] for n in module.main_graph().nodes if n.kind == OP)
    assert set(regions) == {"prologue", "layer 0", "layer 1", "layer 2", "epilogue"}
    ops = [n for n in module.main_graph().nodes if n.kind == OP]
    assert ops[0].meta["region"] == "prologue" and ops[-1].meta["region"] == "epilogue"  # embedding; lm_head


def test_user_less_nodes_stay_with_their_inputs():
    """A check without users goes with the values it reads, never to the next layer."""
    for v in range(2000):
        if gen_eager.features(v)["side_effects"]:
            break
    module = gen_dump.generate("eager", 4, variant=v)
    assert _misses(module) == []
    checks = [n for n in module.main_graph().nodes if n.kind == OP and not n.users]
    assert len(checks) >= 5  # the model's, and one per layer
    for n in checks:
        sources = {v.meta["layer"] for v in n.inputs if getattr(v, "kind", None) == OP}
        assert n.meta["layer"] in sources or n.meta["layer"] is None and not sources


def test_gen_dump_writes_an_eager_dump_that_parses_and_round_trips(tmp_path):
    rc, _, err = run_layerc("gen-dump", "eager", tmp_path, "--layers", "3", "--variant", "7")
    assert rc == 0, err
    [dump] = tmp_path.glob("*_export_export_to_gm.txt")
    truth = json.loads(dump.with_name(dump.stem + "_truth.json").read_text())
    module = load(dump)
    from layerc.backends.autodeploy import print_module

    assert print_module(module) == dump.read_text()
    run_passes([SliceLayers()], module)
    got = {n.name: n.meta["layer"] for n in module.main_graph().nodes if n.kind == OP}
    assert got == {k: v for k, v in truth.items() if k in got}


def test_many_layers_of_one_variant():
    """Deep stacks (one cut per boundary, every boundary alike)."""
    v = random.Random(5).randrange(10**6)
    assert _misses(gen_dump.generate("eager", 24, variant=v)) == []
