"""The precision pilot's two arms (results/arithmetic-precision/PROTOCOL.md): the arithmetic family's identity
run in float32, as committed, and the same run with a bf16 sampler/learner pair. The file names name the arms."""
