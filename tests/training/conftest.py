from __future__ import annotations

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_model_dir):
    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture
def tiny_model(tiny_model_dir):
    return AutoModelForCausalLM.from_pretrained(tiny_model_dir)
