"""The vLLM server backend (DESIGN §6): ``client`` (``VLLMSampler``, the Sampler the trainer talks to),
``server`` (starting, watching and stopping the server process), ``config`` (the
``sampler.vllm`` section), ``weight_file`` (the format of one weight sync) and ``delivery`` (how a
sync file reaches the server: a shared path or an HTTP push), ``serve`` (a standalone server for a
trainer on another host). ``in_server/`` runs inside the server's own virtualenv."""
