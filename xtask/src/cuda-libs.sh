# Sourced by the bundles' scripts (run.sh, bench.sh, ab.sh). GPU builds link the CUDA 13
# libraries candle uses (cublas, curand, nvrtc, cudart): take them from the machine's CUDA 13 toolkit;
# and NCCL (specdec's feature `nccl`): take it from the machine's PyTorch.
for lib in "${CUDA_HOME:-/usr/local/cuda}/lib64" /usr/local/cuda/lib64 /usr/local/cuda-13*/lib64; do
  if [ -e "$lib/libcublas.so.13" ]; then
    export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    break
  fi
done
nccl=$(python3 -c "
import glob, os, site
for d in site.getsitepackages():
    for lib in glob.glob(os.path.join(d, 'nvidia', 'nccl', 'lib', 'libnccl.so.2')) + glob.glob(os.path.join(d, 'torch', 'lib', 'libnccl.so.2')):
        print(os.path.dirname(lib))
        raise SystemExit
" 2>/dev/null)
if [ -n "$nccl" ]; then
  export LD_LIBRARY_PATH="$nccl${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
