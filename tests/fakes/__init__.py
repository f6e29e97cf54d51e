"""Stand-ins the tests and bench/ use (fake OpenAI / vLLM servers, the vLLM stand-in, fake stage services,
the planted-deficit shop policy); not installed with gapforge. See README.md."""
