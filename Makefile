# mt — every user-facing command. The first target that needs Python creates .venv and installs.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# CPU wheel by default (a loose "torch" pulls a multi-GB CUDA build). GPU users:
#   make install TORCH="torch==2.13.0" TORCH_INDEX_URL=https://download.pytorch.org/whl/cu126
TORCH ?= torch==2.13.0
TORCH_INDEX_URL ?=
EXP ?= demo
ARGS ?=
NPROC ?= 1
CKPT ?=
INPUT ?=
OUTPUT ?=
MODEL ?= transformer_base
VOCAB ?= 37000
RUN ?= runs/$(EXP)
TO ?=
OUT ?=
QUANT ?=
PORT ?= 5000
# test processes (pytest-xdist): 2 where there are 2 cores or more, else one process
TEST_WORKERS ?= $(shell [ "$$(nproc 2>/dev/null || echo 1)" -ge 2 ] && echo 2 || echo 0)
HOST ?= 127.0.0.1
STAMP := $(VENV)/.installed-$(subst /,_,$(subst =,_,$(TORCH)))

.PHONY: install test train translate eval export import summary bench bench-scale bench-peers bench-decode-peers bench-bf16 bench-curves ablate plots average lint clean help
.PHONY: serve bench-serve bench-serve-models bench-finetune bench-align eval-documents gpu-check gpu-wheels

help:
	@echo "make train [EXP=demo|multi30k_en_de|wmt14_en_de_base|wmt14_en_de_big] [ARGS='hydra overrides'] [NPROC=N]"
	@echo "make translate [EXP=..|CKPT=..] [INPUT=file] [OUTPUT=file]   (stdin -> stdout otherwise)"
	@echo "make eval [EXP=..|CKPT=..] [ARGS='--align 3']                 (report under reports/)"
	@echo "make export TO=ctranslate2|hf CKPT=path/to/checkpoint.pt OUT=dir [QUANT=int8] [ARGS=--force]"
	@echo "make import DIR=path/to/hf/model OUT=model.pt [ARGS=--force]"
	@echo "make bench-scale PAIRS=4500000 | make bench-peers | make bench-bf16 | make bench-curves | make ablate [ARGS='--minutes 30']"
	@echo "make serve [EXP=..|CKPT=..] [PORT=5000] [HOST=127.0.0.1] [ARGS='--api-keys keys.txt']   (HTTP, page at /)"
	@echo "make bench-serve CKPT=multi30k/checkpoints/best.pt [ARGS='--soak-minutes 10' | ARGS='--documents 200']"
	@echo "make eval-documents CKPT=multi30k/checkpoints/best.pt   (paragraph BLEU, tag placement)"
	@echo "make test | make bench | make summary MODEL=transformer_base VOCAB=37000 | make plots RUN=runs/demo"

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "Installing $(TORCH) and mt into $(VENV) ..." >&2
	@$(BIN)/python -m pip install -q --disable-pip-version-check "$(TORCH)" \
		$(if $(TORCH_INDEX_URL),--index-url $(TORCH_INDEX_URL)) >&2
	@$(BIN)/python -m pip install -q --disable-pip-version-check -e ".[test]" >&2
	@rm -f $(VENV)/.installed-*
	@touch $@

install: $(STAMP)

test: $(STAMP)
	HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 $(BIN)/python -m pytest -q --durations=10 -n $(TEST_WORKERS) --dist loadfile

train: $(STAMP)
ifeq ($(NPROC),1)
	$(BIN)/python -m mt.train experiment=$(EXP) $(ARGS)
else
	$(BIN)/torchrun --standalone --nproc_per_node=$(NPROC) -m mt.train experiment=$(EXP) $(ARGS)
endif

translate: $(STAMP)
	@$(BIN)/mt-translate --exp $(EXP) $(if $(CKPT),--ckpt $(CKPT)) \
		$(if $(INPUT),--input $(INPUT)) $(if $(OUTPUT),--output $(OUTPUT)) $(ARGS)

eval: $(STAMP)
	$(BIN)/mt-eval --exp $(EXP) $(if $(CKPT),--ckpt $(CKPT)) --split test $(ARGS)

export: $(STAMP)
	$(if $(and $(TO),$(CKPT),$(OUT)),,$(error usage: make export TO=ctranslate2|hf CKPT=path/to/checkpoint.pt OUT=dir [QUANT=int8] [ARGS=--force]))
	$(BIN)/mt-export --to $(TO) --ckpt $(CKPT) --out $(OUT) $(if $(QUANT),--quantization $(QUANT)) $(ARGS)

import: $(STAMP)
	$(if $(and $(DIR),$(OUT)),,$(error usage: make import DIR=path/to/hf/model OUT=model.pt [ARGS="--source-lang en --target-lang de"]))
	$(BIN)/mt-import --from hf $(DIR) --out $(OUT) $(ARGS)

serve: $(STAMP)
	$(BIN)/mt-serve $(if $(MODELS),--models $(MODELS),--exp $(EXP) $(if $(CKPT),--ckpt $(CKPT))) --host $(HOST) --port $(PORT) $(ARGS)

# paragraphs with and without sentence splitting, and inline-tag placement (docs/documents.md); eflomal (the
# reference word aligner) is installed on first use
eval-documents: $(STAMP)
	$(if $(CKPT),,$(error usage: make eval-documents CKPT=path/to/multi30k/checkpoint.pt))
	@$(BIN)/python -c "import eflomal" 2>/dev/null || $(BIN)/python -m pip install -q --disable-pip-version-check eflomal==2.0.0
	$(BIN)/python scripts/eval_documents.py paragraphs --ckpt $(CKPT) $(ARGS)
	$(BIN)/python scripts/eval_documents.py tags --ckpt $(CKPT) $(ARGS)

bench-serve: $(STAMP)
	$(BIN)/python scripts/bench_serve.py $(if $(CKPT),--ckpt $(CKPT)) $(ARGS)

# the accelerator check (docs/gpu.md): on a machine with CUDA and a Python that has torch, no install step;
# the packages that Python lacks come from .whl/ (made here by make gpu-wheels), installed outside the tree
GPU_PYTHON ?= $(if $(wildcard $(BIN)/python),$(BIN)/python,python3)
GPU_WHEELS := hydra-core==1.3.8 omegaconf==2.3.1 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 \
	num2words==0.5.14 ctranslate2==4.8.5
# sources only on the index: built into wheels here
GPU_PURE := antlr4-python3-runtime==4.9.3 docopt==0.6.2
gpu-check:
	@if [ -d .whl ] && ! $(GPU_PYTHON) -c "import hydra" 2>/dev/null; then $(GPU_PYTHON) -m pip install -q \
		--no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/mt-gpu-site .whl/*.whl; fi
	PYTHONPATH=$(CURDIR):/tmp/mt-gpu-site $(GPU_PYTHON) scripts/gpu_check.py $(ARGS)

gpu-wheels: $(STAMP)
	$(BIN)/python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
		--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
		--platform any -d .whl $(GPU_WHEELS)
	$(BIN)/python -m pip wheel -q --no-deps -w .whl $(GPU_PURE)
	@du -sh .whl

# word alignment's cost beside decoding (docs/documents.md)
bench-align: $(STAMP)
	$(if $(CKPT),,$(error usage: make bench-align CKPT=path/to/checkpoint.pt))
	$(BIN)/python scripts/bench_align.py --ckpt $(CKPT) $(ARGS)

# fine-tuning the OPUS-MT shape: mt against transformers' Seq2SeqTrainer (docs/benchmarks.md)
bench-finetune: $(STAMP)
	$(BIN)/python scripts/bench_finetune.py $(ARGS)

# two models behind one server: each alone and both at once (64 clients), and the memory of 1-4 models
bench-serve-models: $(STAMP)
	$(BIN)/python scripts/bench_serve_models.py $(if $(CKPT),--ckpt $(CKPT)) $(ARGS)

summary: $(STAMP)
	@$(BIN)/python -m mt.model.summary --model $(MODEL) --vocab $(VOCAB)

plots: $(STAMP)
	$(BIN)/mt-plots $(RUN)

average: $(STAMP)
	$(BIN)/python scripts/average_checkpoints.py $(RUN)/checkpoints --last $(or $(N),5)

bench: $(STAMP)
	$(BIN)/python scripts/bench.py $(ARGS)

bench-peers: $(STAMP)
	$(BIN)/python scripts/bench_peers.py $(ARGS)

bench-decode-peers: $(STAMP)
	$(BIN)/python scripts/bench_decode_peers.py $(ARGS)

bench-scale: $(STAMP)
	$(BIN)/python scripts/bench_scale.py --pairs $(or $(PAIRS),1000000) --results bench/scale-results.jsonl $(ARGS)

bench-bf16: $(STAMP)
	$(BIN)/python scripts/bf16_parity.py $(ARGS)

bench-curves: $(STAMP)
	$(BIN)/python scripts/bench_curves.py $(ARGS)

ablate: $(STAMP)
	$(BIN)/python scripts/ablate.py $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .

clean:
	rm -rf runs reports data/cache .pytest_cache
