"""The benchmark client: stream completions through the OpenAI-compatible API, diff /metrics."""
