#!/bin/bash
# One device session: capture the traces (capture.py), try Nsight Systems, run `layerc profile`
# on CUDA. Everything lands in $OUT (the device tool's return folder): cap.tar, logs, JSON.
# Run from the repository root with the wheels of layerc and its missing dependencies in .whl/.
cd "$(dirname "$0")/../../.." || exit 1
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
exec > >(tee "$OUT/log.txt") 2>&1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
python3 -c "import torch, transformers; print(torch.__version__, torch.version.cuda, transformers.__version__)"
CASES=${CASES:-eager,cudagraph,moe,hybrid,compiled}
if [ "$CASES" != none ]; then
  mkdir -p /tmp/cap
  timeout "${CAPTURE_S:-300}" python3 tests/data/gpu/capture.py /tmp/cap --cases "$CASES" 2>&1 \
    | grep -v -e FutureWarning -e 'return forward_call' -e 'output = func' -e USDT
  (cd /tmp/cap && tar cf "$OUT/cap.tar" .)
fi

# Nsight Systems, if any copy of it works here: a node-mode capture of the hand-made CUDA graph.
if [ -n "$NSYS_TRY" ]; then
  NSYS=$(command -v nsys || ls /opt/nvidia/nsight-systems*/*/bin/nsys /opt/nvidia/*/*/host/target-linux-x64/nsys \
         /usr/local/cuda*/bin/nsys 2>/dev/null | head -1)
  echo "nsys: ${NSYS:-none}"; find / -xdev -name 'QdstrmImporter*' 2>/dev/null | head -3
  if [ -n "$NSYS" ]; then
    mkdir -p /tmp/ncap
    timeout 150 "$NSYS" profile -t cuda,nvtx --cuda-graph-trace=node -o /tmp/ncap/node -f true \
      python3 tests/data/gpu/capture.py /tmp/ncap --cases cudagraph --prefix nsys 2>&1 | tail -5
    ls -la /tmp/ncap /tmp/*.qdstrm
    IMPORTER=$(dirname "$NSYS")/../linux-desktop-glibc_2_11_3-x64/QdstrmImporter
    q=$(ls /tmp/*.qdstrm /tmp/ncap/*.qdstrm 2>/dev/null | head -1)
    [ ! -f /tmp/ncap/node.nsys-rep ] && [ -n "$q" ] && timeout 90 "$IMPORTER" -i "$q" -o /tmp/ncap/node.nsys-rep 2>&1 | tail -5
    ls -la /tmp/ncap
    [ -f /tmp/ncap/node.nsys-rep ] && timeout 60 "$NSYS" export --type sqlite --lazy=false \
      -o /tmp/ncap/node.sqlite /tmp/ncap/node.nsys-rep 2>&1 | tail -3
    [ -f /tmp/ncap/node.sqlite ] && gzip -9 -c /tmp/ncap/node.sqlite > "$OUT/nsys_node.sqlite.gz"
  fi
fi

# layerc's own CUDA path: one decoder layer measured on the GPU against its simulation.
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site
  cd /tmp || exit 1  # the checkout's own layerc/ folder would shadow the installed package
  for a in "llama prefill 512" "llama decode 1024" "mixtral prefill 256"; do
    set -- $a
    timeout 45 python3 -m layerc.tools.driver profile --arch "$1" --phase "$2" --n-tokens "$3" --device cuda \
      --json "$OUT/profile_$1_$2.json" 2>&1 | tail -15
  done
fi
