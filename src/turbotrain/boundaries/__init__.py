"""The boundaries with other libraries' private names (Transformers, torch, jax, TRL): every private name turbotrain uses is reached through one of these modules, its signature pinned by a test."""
