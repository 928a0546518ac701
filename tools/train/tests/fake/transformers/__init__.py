"""Stand-in for transformers in tools/train/tests/smoke_local.sh (see qwen35_torch.py)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
from qwen35_torch import Config as Qwen3_5TextConfig  # noqa: E402,F401
from qwen35_torch import CausalLM as Qwen3_5ForCausalLM  # noqa: E402,F401

__version__ = "fake (tools/train/qwen35_torch.py)"
