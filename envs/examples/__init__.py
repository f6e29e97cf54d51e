"""Hand-written example synthetic envs (trusted code): one SyntheticEnv subclass per module."""
