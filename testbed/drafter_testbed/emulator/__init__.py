"""Engine emulator: serves a vLLM or SGLang command line with the engine's HTTP API and metrics,
timing tokens with the speculative-decoding model (see server.py for the API, model.py for timing)."""
