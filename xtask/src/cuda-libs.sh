# Sourced by the bundles' scripts (run.sh, bench.sh, ab.sh). GPU builds link the CUDA 13
# libraries candle uses (cublas, curand, nvrtc, cudart): take them from the machine's CUDA 13 toolkit.
for lib in "${CUDA_HOME:-/usr/local/cuda}/lib64" /usr/local/cuda/lib64 /usr/local/cuda-13*/lib64; do
  if [ -e "$lib/libcublas.so.13" ]; then
    export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    break
  fi
done
