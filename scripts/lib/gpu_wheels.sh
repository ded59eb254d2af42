# Sourced by the carry scripts (scripts/vllm_carry, scripts/sglang_carry): pip download
# arguments for wheels that run on the lent GPU machine (CPython 3.12, x86_64, glibc 2.39),
# whatever Python and platform prepare them here.
gpu_wheel_args=(--only-binary=:all: --python-version 3.12 --implementation cp
  --platform manylinux_2_35_x86_64 --platform manylinux_2_34_x86_64 --platform manylinux_2_31_x86_64
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
