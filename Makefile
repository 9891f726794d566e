# layerc — the two set-up commands are `make demo` and `make test` (see README.md).
# Everything installs into .venv; a stamp file skips the install when pyproject.toml is unchanged.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
# The CPU build of torch comes from the local wheel directory when the machine has one;
# naming the exact version keeps pip from pulling the CUDA build from the index.
TORCH_VERSION ?= 2.13.0
FIND_LINKS := $(if $(wildcard /opt/wheels),--find-links /opt/wheels)
STAMP  := $(VENV)/.installed
DEMO   := out/demo
# The sglang source `layerc optrace` is tested on (tests/passes/test_optrace_sglang.py). A wheel is a zip:
# optrace reads it in place, nothing installs it. Downloaded once; skipped when present.
SGLANG_VERSION ?= 0.5.9
SGLANG_WHEEL   := build/wheels/sglang-$(SGLANG_VERSION)-py3-none-any.whl

.PHONY: install demo test typecheck bench fuzz fidelity graphviz pictures clean

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q $(FIND_LINKS) "torch==$(TORCH_VERSION)"
	$(PIP) install -q $(FIND_LINKS) -e ".[dev,torch]"
	@touch $(STAMP)

install: $(STAMP) graphviz $(SGLANG_WHEEL)

$(SGLANG_WHEEL): | $(STAMP)
	$(PIP) download -q --no-deps --only-binary=:all: "sglang==$(SGLANG_VERSION)" -d $(dir $(SGLANG_WHEEL))

graphviz:
	@command -v dot >/dev/null 2>&1 || { \
	  echo "installing Graphviz (dot)"; \
	  SUDO=$$(command -v sudo >/dev/null 2>&1 && [ "$$(id -u)" != 0 ] && echo sudo); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq graphviz >/dev/null; }
	@command -v dot >/dev/null 2>&1 || { echo "error: Graphviz 'dot' is missing and could not be installed" >&2; exit 1; }

demo: install
	@mkdir -p $(DEMO)
	$(VENV)/bin/layerc gen-dump deepseek_v3 $(DEMO)
	$(VENV)/bin/layerc gen-kernels $(DEMO) -o $(DEMO)/decode_replay.json.gz
	$(VENV)/bin/layerc layer $(DEMO) 5 --trace $(DEMO)/decode_replay.json.gz --timing
	$(VENV)/bin/layerc gen-trace $(DEMO)/serving_trace.json.gz --model deepseek_v3 --tp 8
	$(VENV)/bin/layerc trace $(DEMO)/serving_trace.json.gz --num-layers 61 --json $(DEMO)/serving_layers.json --perfetto $(DEMO)/serving_trace.pftrace
	$(VENV)/bin/layerc gen-mem $(DEMO)/ws_graphs
	$(VENV)/bin/layerc mem $(DEMO)/ws_graphs -o $(DEMO)/mem --combine
	@echo "demo: layer 5 of a 61-layer DeepSeek-V3 dump, as JSON, DOT, PNG and SVG, with the kernels of a decode replay bound to its nodes, in $(DEMO)/;"
	@echo "      the layers of a DeepSeek-V3 TP8 serving trace (1 prefill pass, 2 decode replays) as tables, JSON and Perfetto;"
	@echo "      the SMEM/TMEM plan of a flash-attention-backward Triton kernel, checked and drawn, in $(DEMO)/mem/"

test: install typecheck
	$(PY) -m pytest -q -n 2 --durations=10

# mypy cannot follow the editable install's folder mapping: it reads a farm of links laid out as
# the installed package. Strict on the IR and the passes, plain on the grammar, the backends and the tools.
TYPECHECK := build/typecheck
typecheck: install
	@rm -rf $(TYPECHECK) && mkdir -p $(TYPECHECK)/layerc
	@for d in ir grammar passes backends tools; do ln -s $(CURDIR)/$$d $(TYPECHECK)/layerc/$$d; done
	cd $(TYPECHECK) && $(CURDIR)/$(PY) -m mypy -p layerc.ir --strict --ignore-missing-imports
	cd $(TYPECHECK) && $(CURDIR)/$(PY) -m mypy -p layerc.grammar --ignore-missing-imports --follow-imports=silent
	cd $(TYPECHECK) && $(CURDIR)/$(PY) -m mypy -p layerc.passes --strict --ignore-missing-imports --follow-imports=silent
	cd $(TYPECHECK) && $(CURDIR)/$(PY) -m mypy -p layerc.backends --ignore-missing-imports --follow-imports=silent
	cd $(TYPECHECK) && $(CURDIR)/$(PY) -m mypy -p layerc.tools --ignore-missing-imports --follow-imports=silent

# A long fuzz campaign over every reader (tests/fuzz): the figures go in the README.
fuzz: install
	$(PY) -m tests.fuzz.campaign --cases 4200 --jobs 2

# Grammars and slicer against nn_module_stack on every decoder-only HF architecture: the table
# goes in the README (between the fidelity markers).
fidelity: install
	@mkdir -p out
	$(VENV)/bin/layerc fidelity --json out/fidelity.json --table out/fidelity.md --readme README.md

bench: install
	$(PIP) install -q $(FIND_LINKS) -e ".[bench]"
	$(PY) -m tests.bench.run
	$(PY) -m tests.bench.process

# the README's pictures (tests/pictures/*.png), remade by the commands the README shows
pictures: install
	$(PY) -m tests.pictures.make

clean:
	rm -rf $(VENV) out .pytest_cache .hypothesis
