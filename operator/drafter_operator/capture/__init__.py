"""Request capture: the sidecar's pure decisions (which requests to keep, what of each line to keep, which
captured files to delete), each in its own module; the engines' flags that produce the lines live with the
engines (engines/sglang.py, engines/vllm.py)."""
