from __future__ import annotations

import pytest
from transformers import AutoTokenizer


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_model_dir):
    """The tokenizer of the session's tiny Qwen-architecture model (tests/conftest.py: tiny_model_dir)."""
    return AutoTokenizer.from_pretrained(tiny_model_dir)
