"""The decoder layers an op tree must reach: an empty decoder layer is an error, never "0 issues".

The layer class is found by structure, not by name: starting from the entry module, the
attributes its construction assigns are followed (``self.model = LlamaModel(config)``) to a
module list of instances of one package class (``self.layers = nn.ModuleList([Layer(config, i)
for i in ...])``). The op tree must call that class's ``forward`` and reach something through it;
where it does not, the loop over the layers was not followed (an ``enumerate`` over a slice, a
``getattr`` by name...), and everything the report would say about the layers is missing.
"""

from __future__ import annotations

from dataclasses import dataclass

from layerc.ir.diagnostics import LayercError, Location, source_line_at
from layerc.ir.optree import OpTree
from layerc.passes.pyresolve import ClassInfo, Obj, Resolver, Seq

#: attributes followed from the entry to the layer list (ForCausalLM → Model → layers)
MAX_DEPTH = 3


@dataclass(frozen=True)
class LayerList:
    """A module list of one package class: where it is built, and the class."""

    owner: str  #: the class whose construction assigns it
    attr: str  #: the attribute (``layers``)
    cls: ClassInfo


def layer_lists(r: Resolver, entry: ClassInfo) -> list[LayerList]:
    """The module lists of one package class reachable from the entry's attributes."""
    out: list[LayerList] = []
    seen: set[str] = set()
    frontier = [r.make_obj(entry, None, None)]
    for _ in range(MAX_DEPTH):
        nxt = []
        for obj in frontier:
            if obj.cls.qualname in seen:
                continue
            seen.add(obj.cls.qualname)
            names = dict.fromkeys(name for c in r.mro(obj.cls) for name in r.self_assigns(c))  # in source order
            for name in names:
                for v in r.attr_of_obj(obj, name):
                    if isinstance(v, Obj):
                        nxt.append(v)
                    elif isinstance(v, Seq):
                        classes = {e.cls.qualname: e.cls for e in v.elems if isinstance(e, Obj)}
                        if len(classes) == 1:
                            out.append(LayerList(obj.cls.name, name, next(iter(classes.values()))))
        frontier = nxt
    return out


def check_layers(r: Resolver, entry: ClassInfo, tree: OpTree) -> None:
    """Raise where the model's layer list is never reached, or reached with nothing inside."""
    lists = layer_lists(r, entry)
    if not lists:
        return
    reached = {}
    for node, _ in tree.root.walk():
        for name in node.callee_classes:
            if node.children or node.kernels:
                reached[name] = True
            else:
                reached.setdefault(name, False)
    if any(reached.get(x.cls.name) for x in lists):
        return
    x = lists[0]
    site = x.cls.site
    called = "is called but reaches nothing" if x.cls.name in reached else "is never called"
    raise LayercError(f"the decoder layer {x.cls.name} (the list {x.owner}.{x.attr}) {called} from {entry.name}.forward: "
                      "the loop over the layers was not followed, so the op tree has no decoder layer",
                      site.path, Location(site.line, site.col), source_line_at(x.cls.module.text, site.line))
