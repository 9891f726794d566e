"""Op-trace reports: seed 003's markdown (execution graph, op summary table, cross-validation
summary, notes), the kernel-trace markdown (each kernel's call chains back to its ops), and
JSON with everything.

The execution graph keeps seed 003's tree characters (``├─>``, ``└─>``, ``│``) outside a code
block, so its ``[op()](file#Lline)`` links can be clicked: indentation is made of no-break
spaces and every line but the last ends in a hard line break (``\\``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

from layerc.ir.optree import BRANCH, ROOT, KernelSite, OpNode, OpTree, Site

NBSP = "\u00a0"
PRIMARY = 6  #: kernels named in the summary table's Primary Kernels column
CHAINS_PER_KERNEL = 3  #: call chains drawn per kernel in the kernel traces; the rest are listed
#: how kernel families are ordered when a column names a few (custom kernels first)
FAMILY_ORDER = ("sgl-kernel", "flashinfer", "deep-gemm", "deep-ep", "flash-attn", "cutlass", "cute-dsl", "vllm", "aiter",
                "jit", "triton", "nccl", "torch.ops", "npu", "quack", "torch")

Linker = Callable[[Site], str]


@dataclass
class SummaryRow:
    label: str
    kernels: list[KernelSite]  #: distinct by name, custom kernels first
    sites: list[Site]  #: the op's call sites
    conditional: set[str] = field(default_factory=set)  #: kernels that run only under a condition, at every site

    def count_text(self) -> str:
        n = len(self.kernels)
        return f"{n} ({len(self.conditional)} conditional)" if self.conditional else str(n)


def linker(sources, out_dir: str | None, prefix: str | None) -> Linker:
    """``path#Lline`` for a site, as ``SourceSet.link`` resolves the path."""
    return lambda site: f"{sources.link(site.path, out_dir, prefix)}#L{site.line}"


def family_rank(k: KernelSite) -> tuple[int, str]:
    rank = FAMILY_ORDER.index(k.family) if k.family in FAMILY_ORDER else len(FAMILY_ORDER) - 1
    return rank, k.name


def summary_rows(tree: OpTree) -> list[SummaryRow]:
    """One row per op label that has kernels (pure containers left out), in execution order."""
    rows: dict[str, SummaryRow] = {}
    always_by_row: dict[str, set[str]] = {}
    for node, conditional in _walk_conditional(tree.root, False):
        if node.kind != "op" or not node.kernels:
            continue
        if node.children and not node.direct:
            continue
        row = rows.setdefault(node.label, SummaryRow(node.label, [], []))
        names = {k.name for k in row.kernels}
        always = always_by_row.setdefault(node.label, set())
        always.update(k.name for k in node.kernels if not k.conditions and not conditional)
        for k in node.kernels:  # each kernel once, in the order they come
            if k.name not in names:
                names.add(k.name)
                row.kernels.append(k)
        if node.site is not None and node.site not in row.sites:
            row.sites.append(node.site)
    for row in rows.values():
        row.kernels.sort(key=family_rank)
        row.conditional = {k.name for k in row.kernels} - always_by_row[row.label]
    return list(rows.values())


def _walk_conditional(node: OpNode, under: bool):
    """Pre-order, with whether the node runs only under a condition: its own annotation or an
    ancestor's (a branch of a dispatch, an op under ``if``)."""
    under = under or bool(node.annotation)
    yield node, under
    for c in node.children:
        yield from _walk_conditional(c, under)


def _subtree_key(node: OpNode) -> tuple:
    return (node.label, node.callee, node.callee_sites, tuple(_subtree_key(c) for c in node.children))


def graph_lines(tree: OpTree, link: Linker) -> list[str]:
    """The execution graph, one line per node; a container whose whole subtree was drawn
    before (the same callee reached from another path) is drawn once and then referred to."""
    lines: list[str] = []
    drawn: set[tuple] = set()

    def label(node: OpNode) -> str:
        text = node.label
        if node.kind == BRANCH:
            text = f"**{text}**"
        elif node.kernels and node.site is not None and (not node.children or node.direct):
            text = f"[{text}]({link(node.site)})"
        if node.kind != ROOT and not node.children and node.kernels and all(k.target == node.callee for k in node.kernels):
            text += f" *({node.kernels[0].family})*"  # a kernel called from model code
        if node.annotation:
            text += f" **({node.annotation})**"
        if node.unresolved:
            text += " *(unresolved)*"
        if node.recursive:
            text += " *(recursive)*"
        return text

    def draw(node: OpNode, prefix: str, last: bool, top: bool) -> None:
        key = _subtree_key(node) if node.children else None
        repeated = key is not None and key in drawn and len(node.children) > 0
        connector = "" if top else ("└─> " if last else "├─> ")
        lines.append(prefix + connector + label(node) + (" *(expanded above)*" if repeated else ""))
        if repeated:
            return
        if key is not None:
            drawn.add(key)
        child_prefix = prefix if top else prefix + ("    " if last else "│   ")
        for i, c in enumerate(node.children):
            draw(c, child_prefix, i == len(node.children) - 1, False)

    draw(tree.root, "", True, True)
    return lines


def _md_graph(lines: list[str]) -> str:
    out = []
    for i, line in enumerate(lines):
        body = line.lstrip(" │├└─>")
        prefix = line[: len(line) - len(body)].replace(" ", NBSP)
        if prefix.endswith(">" + NBSP):
            prefix = prefix[:-1] + " "  # ``├─> label``: the indentation keeps its width, the arrow its space
        out.append(prefix + body + ("\\" if i < len(lines) - 1 else ""))
    return "\n".join(out)


def op_traces_markdown(tree: OpTree, validation, link: Linker, title: str, kernel_traces: str | None = None,
                       dynamic=None) -> str:
    rows = summary_rows(tree)
    kernels_total = len(validation.kernels) if validation is not None else len({k.name for r in rows for k in r.kernels})
    out = [f"# {title} Op Traces", ""]
    out.append(f"**Entry:** `{tree.entry}`  ")
    out.append(f"**Source:** `{os.path.basename(tree.source.rstrip('/'))}` · **Model code:** "
               + ", ".join(f"`{s}`" for s in tree.scope) + "  ")
    if tree.configuration:
        out.append(f"**Configuration:** {tree.configuration} ({tree.pruned} branches pruned)  ")
    if kernel_traces:
        out.append(f"**Kernel call chains:** [{os.path.basename(kernel_traces)}]({os.path.basename(kernel_traces)})  ")
    out.append(f"**Generated by:** `layerc optrace` ({kernels_total} kernels, "
               f"{sum(1 for n, _ in tree.nodes() if n.kind == 'op')} op call sites)")
    out += ["", "## Execution Graph", "", _md_graph(graph_lines(tree, link)), "", "## Op Summary", "",
            "| Op | Kernel Count | Primary Kernels |", "|----|--------------|-----------------|"]
    for r in rows:
        names = [k.name for k in r.kernels]
        shown = ", ".join(names[:PRIMARY]) + (", ..." if len(names) > PRIMARY else "")
        out.append(f"| `{r.label}` | {r.count_text()} | {shown} |")
    out += ["", "## Cross-Validation Summary", ""]
    if validation is not None:
        out += cross_validation_lines(validation, tree)
    if dynamic is not None:
        out += ["", "## Dynamic Cross-Check", ""] + dynamic_lines(dynamic, tree, link)
    out += ["", "## Notes", ""] + notes_lines(tree)
    return "\n".join(out) + "\n"


def cross_validation_lines(v, tree: OpTree) -> list[str]:
    out = []
    mapped = len(v.kernels)
    if v.unmapped:
        out.append(f"✅ Passed: {mapped} kernels reached from `{tree.entry.rsplit('.', 1)[-1]}.forward` are mapped "
                   f"to ops above; {v.chains} call chains end at their op's call site.")
    else:
        out.append(f"✅ All {mapped} kernels reached from `{tree.entry.rsplit('.', 1)[-1]}.forward` are mapped to ops "
                   f"above; {v.chains} call chains end at their op's call site; all {v.scanned} custom-kernel calls "
                   "written in the model code are reached.")
    out.append(f"{'⚠️' if v.issues else '✅'} Issues found: {v.issues}")
    out += ["", "| Category | Kernels Mapped |", "|----------|----------------|"]
    for cat in sorted(v.categories, key=lambda c: (-len(v.categories[c]), c)):
        names = sorted(v.categories[cat])
        shown = ", ".join(names[:PRIMARY]) + (", ..." if len(names) > PRIMARY else "")
        out.append(f"| {cat} | {len(names)} ({shown}) |")
    if v.issues:
        out += ["", "Issues to fix in the kernel traces:", ""]
        n = 0
        for u in v.unmapped:
            n += 1
            out.append(f"{n}. ⚠️ KERNEL TRACE ISSUE: Kernel `{u.kernel.name}` ({u.kernel.family}) called at "
                       f"`{u.site.path}:{u.site.line}` in `{u.function}` is not mapped to any op  ")
            out.append(f"   Action: no call path from an op of `{tree.entry.rsplit('.', 1)[-1]}.forward` reaches "
                       f"`{u.function.rsplit('.', 1)[-1]}` statically (an indirect call: a callback, a registry); "
                       "check how it is called")
        for op in v.ops_without_kernels:
            n += 1
            where = f"`{op.site.path}:{op.site.line}`" if op.site else ""
            why = "its callee could not be resolved" if op.unresolved else "no call below it is in the kernel table"
            out.append(f"{n}. ⚠️ KERNEL TRACE ISSUE: Op `{op.label}` at {where} has no kernels traced to it  ")
            out.append(f"   Action: {why}; add its library to `kernel_calls.toml` if it launches kernels")
    return out


def dynamic_lines(a, tree: OpTree, link: Linker) -> list[str]:
    nodes = {id(n): n for n, _ in tree.nodes()}
    cfg = a.config
    out = [f"A tiny `{a.arch}` model ({cfg.get('layers')} layers, {cfg.get('dtype')}, attention "
           f"`{cfg.get('attn_implementation')}`, experts `{cfg.get('experts_implementation')}`) ran one forward "
           "on CPU under `torch.profiler` with Python stacks; each top-level aten op was mapped down the tree.", "",
           f"{'✅' if a.percent >= 95 else '⚠️'} Agreement: {a.agreed} of {a.total} aten ops "
           f"({a.percent:.1f}%) map to a node of the static tree.  ",
           f"{a.predicted} of them ({a.predicted_percent:.1f}%) carry an aten name a kernel call site of their node "
           "predicts; the rest come from Python operators and indexing (`+`, `*`, `x[..., None]`).", "",
           "| Op | Aten ops | Most frequent |", "|----|----------|---------------|"]
    for key, counts in sorted(a.by_node.items(), key=lambda kv: -sum(kv[1].values())):
        top = ", ".join(f"{name.removeprefix('aten::')} ×{c}" for name, c in counts.most_common(4))
        node = nodes[key]
        where = f" ([L{node.site.line}]({link(node.site)}))" if node.site is not None and node.kind != ROOT else ""
        out.append(f"| `{node.label}`{where} | {sum(counts.values())} | {top} |")
    out += [""] + module_check_lines(a, nodes)
    if a.disagreed:
        out += ["", "Aten ops that do not fit the tree:", ""]
        seen: dict[tuple, int] = {}
        for item in a.disagreed:
            seen[item] = seen.get(item, 0) + 1
        for (name, where), c in sorted(seen.items(), key=lambda kv: -kv[1]):
            out.append(f"- `{name}` ×{c}: {where}")
    return out


def module_check_lines(a, nodes: dict[int, OpNode]) -> list[str]:
    """The module check both ways: modules that ran but are not in the tree (errors of the
    tree), and the tree's module ops that never ran (conditional ones: branches not taken)."""
    out = []
    if a.runtime_missing:
        out.append(f"⚠️ {len(a.runtime_missing)} module class(es) ran but no op of the tree calls them: "
                   + ", ".join(f"`{c}` (`{m}`)" for c, m in a.runtime_missing[:10]))
    else:
        out.append("✅ Every module class that ran is called by an op of the tree.")
    unconditional = [k for k, cond in a.never_called if not cond]
    conditional = [k for k, cond in a.never_called if cond]
    if unconditional:
        out.append(f"⚠️ {len(unconditional)} op(s) of the tree call modules that never ran, with no condition "
                   "marked: " + ", ".join(f"`{nodes[k].label}`" for k in unconditional[:10]))
    out.append(f"{len(conditional)} conditional op(s) of the tree were not taken by this run"
               + (": " + ", ".join(f"`{nodes[k].label}`" for k in conditional[:10]) if conditional else "") + ".")
    return out


def notes_lines(tree: OpTree) -> list[str]:
    families = sorted({k.family for n, _ in tree.nodes() for k in n.kernels}, key=lambda f: FAMILY_ORDER.index(f)
                      if f in FAMILY_ORDER else 99)
    return [
        "- **Container ops** (no link) call further ops and have no kernels of their own; **leaf ops** link to "
        "their call site. A container that also calls kernels itself is linked too and appears in the summary.",
        "- **Path annotations** come from the branch a call sits in: `X path` for an enum dispatch "
        "(`if m == AttnForwardMethod.X`), `if <condition>` otherwise. A module attribute assigned different "
        "classes under different conditions is split into one **Class.forward()** branch per class.",
        ("- **Kernels** are what the calls below an op can launch under the configuration given; branches it "
         "decides against are pruned, the others kept. " if tree.configuration else
         "- **Kernels** are what the calls below an op can launch, from every branch (backends, quantization "
         "methods, platforms); which one runs depends on the config and the hardware (`--config`, "
         "`--attention-backend`, `--quant`, `--platform`, `--phase` decide them). ")
        + "A kernel reached only under a condition is counted *conditional* in the summary, and the kernel "
        "traces show each chain's conditions. Families seen: " + ", ".join(f"*{f}*" for f in families) + ".",
        "- `torch` kernels are PyTorch calls (`torch.*`, `F.*`, `Tensor.*` methods, `nn.*` modules): aten ops "
        "on the CPU, one or more GPU kernels on a device. Python operators (`+`, `*`) and indexing are not "
        "listed as kernel calls.",
        f"- Ops outside the model code (`{', '.join(tree.scope)}`) are leaf ops unless they call modules the "
        "model built (a communicator calling the layer's norms); *(expanded above)* marks a subtree drawn "
        "before from another call site.",
    ] + [f"- Warning: {w}" for w in tree.warnings[:10]]


def kernel_traces_markdown(tree: OpTree, link: Linker, title: str) -> str:
    """Seed 003's kernel-trace side: per custom kernel, its call chains back to the op call sites."""
    by_kernel: dict[str, list[tuple[OpNode, KernelSite]]] = {}
    for node, _ in tree.nodes():
        for k in node.kernels:
            if not k.native:
                by_kernel.setdefault(k.name, []).append((node, k))
    categories: dict[str, list[str]] = {}
    for name, uses in by_kernel.items():
        categories.setdefault(uses[0][1].category, []).append(name)
    out = [f"# {title} Kernel Traces", "", f"**Entry:** `{tree.entry}`  ",
           f"**Generated by:** `layerc optrace` ({len(by_kernel)} custom kernels; PyTorch-native calls are in the "
           "op traces' summary)", ""]
    for ci, cat in enumerate(sorted(categories), 1):
        out += [f"### {ci}. {cat}", ""]
        for ki, name in enumerate(sorted(categories[cat]), 1):
            uses = by_kernel[name]
            k0 = uses[0][1]
            out += [f"#### {ci}.{ki} {name} **({k0.family})**", ""]
            chains: dict[tuple, KernelSite] = {}
            for _, k in uses:
                chains.setdefault(tuple(s.site for s in k.chain), k)
            for k in list(chains.values())[:CHAINS_PER_KERNEL]:
                out += [_md_graph(_chain_lines(k, link)), ""]
            rest = list(chains.values())[CHAINS_PER_KERNEL:]
            if rest:
                ends = sorted({f"`{k.chain[-1].label}` ([L{k.chain[-1].site.line}]({link(k.chain[-1].site)}))" for k in rest})
                out.append(f"*{len(rest)} more chains, to:* " + ", ".join(ends))
                out.append("")
    out += ["## Summary Table", "", "| Kernel | Source | Category | Primary Call Site |", "|--------|--------|----------|-------------------|"]
    for name in sorted(by_kernel):
        k = by_kernel[name][0][1]
        out.append(f"| `{name}()` | {k.family} | {k.category} | [{k.site.path.rsplit('/', 1)[-1]}:{k.site.line}]({link(k.site)}) |")
    out += ["", "## Kernel → Ops Mapping Table", "", "| Kernel | Target Ops | Op Call Sites |", "|--------|------------|---------------|"]
    for name in sorted(by_kernel):
        ops: dict[str, list[int]] = {}
        for node, k in by_kernel[name]:
            ops.setdefault(node.label, [])
            if k.chain[-1].site.line not in ops[node.label]:
                ops[node.label].append(k.chain[-1].site.line)
        target = ", ".join(f"`{o}`" for o in list(ops)[:PRIMARY]) + (", ..." if len(ops) > PRIMARY else "")
        lines = sorted({ln for v in ops.values() for ln in v})
        out.append(f"| `{name}` | {target} | {', '.join(f'L{ln}' for ln in lines[:8])}{', ...' if len(lines) > 8 else ''} |")
    return "\n".join(out) + "\n"


def _chain_lines(k: KernelSite, link: Linker) -> list[str]:
    lines = [f"[{k.chain[0].label}]({link(k.chain[0].site)}) **({k.family})**"]
    if k.chain[0].cond:
        lines[0] += f" *(if {k.chain[0].cond})*"
    for depth, step in enumerate(k.chain[1:]):
        lines.append("    " * depth + f"└─> [{step.label}]({link(step.site)})" + (f" *(if {step.cond})*" if step.cond else ""))
    return lines


def report_json(tree: OpTree, validation, dynamic=None) -> dict:
    """Everything, with kernels and call sites interned (a DeepSeek tree has ~15,000 kernel
    chains over a few hundred kernels and sites)."""
    kernels: dict[tuple, int] = {}
    sites: dict[tuple, int] = {}
    kernel_rows: list[dict] = []
    site_rows: list[list] = []

    def kernel_id(k: KernelSite) -> int:
        key = (k.target, k.family, k.name)
        if key not in kernels:
            kernels[key] = len(kernel_rows)
            kernel_rows.append({"name": k.name, "target": k.target, "family": k.family, "category": k.category,
                                "aten": list(k.aten)})
        return kernels[key]

    def site_id(label: str, s: Site, cond: str) -> int:
        key = (label, s, cond)
        if key not in sites:
            sites[key] = len(site_rows)
            site_rows.append([label, s.path, s.line, s.col, cond])
        return sites[key]

    def node_json(n: OpNode) -> dict:
        d = n.fields_dict()
        d["kernels"] = [[kernel_id(k), [site_id(s.label, s.site, s.cond) for s in k.chain], i < n.direct]
                        for i, k in enumerate(n.kernels)]
        d["children"] = [node_json(c) for c in n.children]
        return d

    doc = {"entry": tree.entry, "source": tree.source, "scope": list(tree.scope), "warnings": tree.warnings,
           "root": node_json(tree.root)}
    if tree.configuration:
        doc["configuration"] = {"given": tree.configuration, "pruned_branches": tree.pruned}
    doc["kernels"] = kernel_rows
    doc["sites"] = site_rows
    doc["summary"] = [{"op": r.label, "kernel_count": len(r.kernels), "kernels": [k.name for k in r.kernels],
                       "conditional": sorted(r.conditional),
                       "call_sites": [s.to_dict() for s in r.sites]} for r in summary_rows(tree)]
    if validation is not None:
        doc["cross_validation"] = {
            "kernels_mapped": len(validation.kernels), "chains": validation.chains, "scanned": validation.scanned,
            "categories": {c: sorted(v) for c, v in sorted(validation.categories.items())},
            "unmapped": [{"kernel": u.kernel.name, "family": u.kernel.family, "function": u.function, **u.site.to_dict()}
                         for u in validation.unmapped],
            "ops_without_kernels": [{"op": o.label, **(o.site.to_dict() if o.site else {})}
                                    for o in validation.ops_without_kernels],
        }
    if dynamic is not None:
        doc["dynamic"] = dynamic.to_dict(tree)
    return doc
