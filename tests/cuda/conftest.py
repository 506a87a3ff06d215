"""The GPU tests (issue 30, item 4): every test here runs on ``device_helpers.DEVICE`` (CUDA unless
``MMVITREG_TEST_DEVICE=cpu`` asks for a dry run on the CPU) and is skipped, with the reason, where that device is
absent. ``tools/gpu_check.sh`` runs them."""
import os

# cuBLAS is deterministic (as mmengine's randomness.deterministic=True demands through
# torch.use_deterministic_algorithms) only with a fixed workspace, read when its first handle is made: set before
# any test runs
os.environ.setdefault('CUBLAS_WORKSPACE_CONFIG', ':4096:8')
